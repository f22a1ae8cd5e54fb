"""Which openrlhf the patches were written against, and the checks that refuse any other.

Every symbol of OpenRLHF that a patch or the CPU device path (`cpu.py`) replaces, wraps, or calls with positional
arguments is listed once, in `PATCHED_SYMBOLS`, with the leading parameters the patch relies on. `check_openrlhf`
checks the version range and every one of them in the driver, so that an openrlhf whose internals moved fails there in one line rather than in a
Ray worker, or worse, silently: `evaluation.apply_eval_generation` calls the private `_generate_vllm` positionally,
and `rollout.patch_agent` reads the engine as the executor's sixth argument. Each patch module also checks its own
symbols when it installs (in the worker). Every patch module reads `PATCHED_ATTR` (the mark a patched class or
function carries, also set by a fork that carries patches/) from here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from typing import Dict, List, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import Version


#: OpenRLHF releases whose patched symbols were read and tested (a 0.11.x whose symbols moved is refused by
#: `check_openrlhf` all the same).
SUPPORTED_OPENRLHF = SpecifierSet(">=0.11.2,<0.12")


PATCHED_ATTR = "__openrlhf_copo_patched__"


#: The "patch" of the symbols the CPU device path replaces (`openrlhf_ext/cpu.py`), which has no number.
CPU_PATH = "the CPU path"

_EXECUTE = ["self", "prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "llm_engine"]

#: (module, qualified name) -> (the parameters each patch relies on, in order from the first; which patches).
PATCHED_SYMBOLS: Dict[Tuple[str, str], Tuple[List[str], str]] = {
    ("openrlhf.trainer.ppo_utils.experience_maker", "RemoteExperienceMaker.compute_advantages_and_returns"):
        (["self", "experiences"], "1"),
    ("openrlhf.trainer.ppo_utils.experience_maker", "apply_length_penalties"): (["experiences", "args"], "1"),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.__init__"): (["self"], "2"),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.training_step"):
        (["self", "experience", "kl_ctl", "step", "loss_batch_info"], "3"),
    ("openrlhf.models", "PolicyLoss.forward"):
        (["self", "log_probs", "old_log_probs", "advantages", "action_mask", "rollout_log_probs"], "2, 3"),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.save_logs_and_checkpoints"):
        (["self", "global_step", "logs_dict", "client_states"], "4"),
    ("openrlhf.trainer.ppo_trainer", "compute_eval_metrics"):
        (["eval_dataloader", "samples_list", "n_samples_per_prompt"], "5"),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.init_checkpoint_states"): (["self"], "6"),
    ("openrlhf.trainer.ppo_trainer", "PPOTrainer.evaluate"): (["self", "global_step"], "6"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_samples"): (["self"], "6"),
    ("openrlhf.utils.agent", "SingleTurnAgentExecutor.execute"): (_EXECUTE, "7"),
    ("openrlhf.utils.agent", "MultiTurnAgentExecutor.execute"): (_EXECUTE, "7"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_eval_samples"): (["self"], "8"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._generate_vllm"):
        (["self", "dataloader_iter", "num_prompts", "dynamic_filtering"], "8, 11"),
    ("openrlhf.trainer.ray.vllm_engine", "batch_vllm_engine_call"): (["engines", "method_name"], "8"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._dispatch_prompts_to_vllm"):
        (["self", "prompts", "labels"], "9, 11"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._process_response_into_experience"):
        (["self", "response"], "11"),
    ("openrlhf.trainer.ppo_trainer", "prepare_datasets"): (["strategy", "tokenizer"], "10"),
    # the CPU device path (`openrlhf_ext/cpu.py`): replaced outright, only on a run whose device decision is the CPU
    ("openrlhf.utils.deepspeed.deepspeed", "init_device_mesh"): (["device_type"], CPU_PATH),
    ("openrlhf.trainer.ppo_utils.replay_buffer", "NaiveReplayBuffer.__init__"): (["self"], CPU_PATH),
    ("openrlhf.utils.distributed_util", "stateless_init_process_group"):
        (["master_address", "master_port", "rank", "world_size", "device"], CPU_PATH),
    ("openrlhf.trainer.ray.ppo_actor", "stateless_init_process_group"):
        (["master_address", "master_port", "rank", "world_size", "device"], CPU_PATH),
    ("openrlhf.trainer.ray.vllm_worker_wrap", "WorkerWrap.update_weight"):
        (["self", "name", "dtype", "shape", "empty_cache"], CPU_PATH),
    ("openrlhf.utils.utils", "convert_to_torch_dtype"): (["param_dtype"], CPU_PATH),
}


class OpenRLHFVersionError(RuntimeError):
    """The installed openrlhf is not one whose internals these patches were written against."""


def check_version() -> str:
    """The installed openrlhf version (package metadata only: imports nothing); raises if untested."""
    version = importlib.metadata.version("openrlhf")
    if Version(version) not in SUPPORTED_OPENRLHF:
        raise OpenRLHFVersionError(
            f"openrlhf {version} is installed; openrlhf_copo patches openrlhf{SUPPORTED_OPENRLHF} only "
            "(pip install 'openrlhf==0.11.2'), or apply patches/ to your fork"
        )
    return version


def _lookup(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return inspect.unwrap(obj)  # a patch already installed (functools.wraps) is checked as the original


def check_symbol(module: str, qualname: str) -> None:
    """Raises `OpenRLHFVersionError` if ``module.qualname`` is gone or no longer takes, in order, the leading
    parameters its patch was written for (`PATCHED_SYMBOLS`)."""
    expected, patch = PATCHED_SYMBOLS[(module, qualname)]
    fn = _lookup(module, qualname)
    params = list(inspect.signature(fn).parameters)[: len(expected)] if fn is not None else None
    if params != expected:
        raise OpenRLHFVersionError(
            f"openrlhf {check_version()}: {module}.{qualname} has moved or changed (expected parameters {expected}, "
            f"found {params}); openrlhf_copo's {patch if patch == CPU_PATH else 'patch ' + patch} cannot use it"
        )


def check_openrlhf() -> str:
    """The installed openrlhf version; raises `OpenRLHFVersionError` if untested or if any patched symbol moved."""
    version = check_version()
    for module, qualname in PATCHED_SYMBOLS:
        check_symbol(module, qualname)
    return version
