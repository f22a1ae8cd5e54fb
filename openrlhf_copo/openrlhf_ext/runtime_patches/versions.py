"""Which openrlhf the patches were written against, and the checks that refuse any other; the same for vLLM.

Every symbol of OpenRLHF that a patch or the CPU device path (`cpu.py`) replaces, wraps, or calls with positional
arguments is listed once, in `PATCHED_SYMBOLS`, with the leading parameters the patch relies on. `check_openrlhf`
checks the version range and every one of them in the driver, so that an openrlhf whose internals moved fails there in one line rather than in a
Ray worker, or worse, silently: `evaluation.apply_eval_generation` calls the private `_generate_vllm` positionally,
and `rollout.patch_agent` reads the engine as the executor's sixth argument. Each patch module also checks its own
symbols when it installs (in the worker). Every patch module reads `PATCHED_ATTR` (the mark a patched class or
function carries, also set by a fork that carries patches/) from here.

vLLM is checked the same way: every vLLM function, class or attribute that a patch, the CPU path or the evaluation
calls is listed once, in `VLLM_SYMBOLS`, with the parameters relied on; `check_vllm` refuses a vLLM that lacks one,
in one line naming it: in the driver (`driver`'s vLLM step), and in each process where the code that calls it
installs (patch 7 in the vLLM engine actors, patch 8 in the trainer, the CPU path in every worker and in vLLM's own
processes, the evaluation before it builds its engine). Without it, a vLLM whose `SamplingParams.clone` or
`wake_up(tags)` moved fails mid-run inside an engine actor, or, for a seed no longer taken, silently.
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
    # --copo.probe: the batch straight to the advantage step (`copo.probe_experience_batch`)
    ("openrlhf.trainer.ppo_utils.experience_maker", "RemoteExperienceMaker.make_experience_batch"):
        (["self", "rollout_samples"], "1"),
    ("openrlhf.trainer.ppo_utils.experience_maker", "RemoteExperienceMaker.split_rollout_samples"):
        (["self", "rollout_samples"], "1"),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.__init__"): (["self"], "2"),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.training_step"):
        (["self", "experience", "kl_ctl", "step", "loss_batch_info"], "3"),
    ("openrlhf.models", "PolicyLoss.forward"):
        (["self", "log_probs", "old_log_probs", "advantages", "action_mask", "rollout_log_probs"], "2, 3"),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.save_logs_and_checkpoints"):
        (["self", "global_step", "logs_dict", "client_states"], "4"),
    ("openrlhf.trainer.ppo_trainer", "compute_eval_metrics"):
        (["eval_dataloader", "samples_list", "n_samples_per_prompt"], "5"),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.init_checkpoint_states"): (["self"], "4, 6"),
    ("openrlhf.trainer.ppo_trainer", "PPOTrainer.evaluate"): (["self", "global_step"], "6"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_samples"): (["self"], "4, 6"),
    ("openrlhf.utils.agent", "SingleTurnAgentExecutor.execute"): (_EXECUTE, "7"),
    ("openrlhf.utils.agent", "MultiTurnAgentExecutor.execute"): (_EXECUTE, "7"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_eval_samples"): (["self"], "8"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._generate_vllm"):
        (["self", "dataloader_iter", "num_prompts", "dynamic_filtering"], "8, 11"),
    ("openrlhf.trainer.ray.vllm_engine", "batch_vllm_engine_call"): (["engines", "method_name"], "8"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._dispatch_prompts_to_vllm"):
        (["self", "prompts", "labels"], "9, 11"),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._process_response_into_experience"):
        (["self", "response"], "4, 11"),
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


#: Who calls a vLLM symbol besides the patches: the evaluation (`openrlhf_copo.evaluation.evaluate.sample`).
EVALUATION = "the evaluation"

#: Every vLLM symbol openrlhf_copo calls or reads: (module, qualified name) -> (the parameters passed by position,
#: which must lead its signature in this order; the parameters passed by name, which it must take by name; who calls
#: it: patch numbers, `EVALUATION` or `CPU_PATH`). A class stands for its constructor; a keyword of a class built
#: with it stands for the attribute of the same name that is read or set on it (`SamplingParams.seed`).
VLLM_SYMBOLS: Dict[Tuple[str, str], Tuple[List[str], List[str], Tuple[str, ...]]] = {
    # patch 7 (`rollout.seeded_sampling_params`, in the engine actors): a request's SamplingParams copied with
    # `clone()` and given a `.seed`; the engine's own seed is the `seed` OpenRLHF puts in the engine arguments it
    # keeps (`kwargs["seed"]`) and hands vLLM's AsyncEngineArgs
    ("vllm", "SamplingParams"): ([], ["n", "temperature", "top_p", "max_tokens", "seed"], ("7", EVALUATION)),
    ("vllm", "SamplingParams.clone"): (["self"], [], ("7",)),
    ("vllm", "AsyncEngineArgs"): ([], ["seed"], ("7",)),
    # patch 8: batch_vllm_engine_call(engines, "sleep" / "wake_up") reaches OpenRLHF's engine actor, which calls
    # vLLM's engine `sleep(level=...)` and `wake_up(tags=[...])`
    ("vllm", "AsyncLLMEngine.sleep"): (["self"], ["level"], ("8",)),
    ("vllm", "AsyncLLMEngine.wake_up"): (["self"], ["tags"], ("8",)),
    # the evaluation: LLM(model=..., dtype=..., seed=..., enforce_eager=..., trust_remote_code=...),
    # llm.get_tokenizer(), llm.generate(prompts, params)
    ("vllm", "LLM"): ([], ["model", "dtype", "seed", "enforce_eager", "trust_remote_code"], (EVALUATION,)),
    ("vllm", "LLM.generate"): (["self", "prompts", "sampling_params"], [], (EVALUATION,)),
    ("vllm", "LLM.get_tokenizer"): (["self"], [], (EVALUATION,)),
    # the CPU path (`cpu.py`): the plugin loader that runs `cpu.vllm_plugin` (entry point group
    # "vllm.general_plugins") in vLLM's own processes, the gloo weight-sync group, the engine config hook (it sets
    # `dtype` and `enable_chunked_prefill`), the reload of the synced weights in vLLM's worker
    ("vllm.plugins", "load_general_plugins"): ([], [], (CPU_PATH,)),
    ("vllm.distributed.utils", "stateless_init_torch_distributed_process_group"):
        (["host", "port", "rank", "world_size"], ["backend"], (CPU_PATH,)),
    ("vllm.engine.arg_utils", "EngineArgs"): ([], ["dtype", "enable_chunked_prefill"], (CPU_PATH,)),
    ("vllm.engine.arg_utils", "EngineArgs.create_engine_config"): (["self"], [], (CPU_PATH,)),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner.get_model"): (["self"], [], (CPU_PATH,)),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner.reload_weights"):
        (["self"], ["weights_iterator", "is_checkpoint_format"], (CPU_PATH,)),
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


class VllmVersionError(RuntimeError):
    """The installed vLLM lacks a function or parameter that openrlhf_copo calls (`VLLM_SYMBOLS`)."""


def _lookup(module: str, qualname: str):
    try:
        obj = importlib.import_module(module)
    except ImportError:
        return None
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


def _vllm_version() -> str:
    return str(getattr(importlib.import_module("vllm"), "__version__", "?"))


def _signature(obj):
    """The parameters of a function, or of a class's constructor; None if it has none to read."""
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return None


def check_vllm_symbol(module: str, qualname: str) -> None:
    """Raises `VllmVersionError`, in one line naming it, if ``module.qualname`` is gone, no longer takes its
    positional parameters first and in order, or no longer takes one of its keyword parameters (`VLLM_SYMBOLS`)."""
    leading, keywords, users = VLLM_SYMBOLS[(module, qualname)]
    who = " and ".join(u if u in (EVALUATION, CPU_PATH) else f"patch {u}" for u in users)
    obj = _lookup(module, qualname)
    if obj is None:
        raise VllmVersionError(f"vllm {_vllm_version()}: {module}.{qualname} is gone; openrlhf_copo calls it in {who} "
                               "(install the vllm of requirements.txt)")
    params = _signature(obj) or []
    lost = [p for p in keywords if p not in params]
    if params[: len(leading)] != leading:
        change = f"takes {params[: len(leading)]} first, not {leading}"
    elif lost:
        change = f"has no parameter {', '.join(lost)}"
    else:
        return
    raise VllmVersionError(f"vllm {_vllm_version()}: {module}.{qualname} {change}; openrlhf_copo calls it in {who} "
                           "(install the vllm of requirements.txt)")


def check_vllm(*users: str) -> str:
    """The installed vLLM's version; raises `VllmVersionError` for the first symbol of ``users`` (patch numbers,
    `EVALUATION`, `CPU_PATH`) that is gone or changed. No ``users``: every symbol but the CPU path's, which
    `cpu.install` checks where the CPU path installs (the driver's check must not import vLLM's CPU worker code on a
    CUDA machine). The GPU suite's import-only stand-in (tests/gpu/stubs/vllm) is not checked: it raises on any use."""
    if getattr(importlib.import_module("vllm"), "__openrlhf_copo_stand_in__", False):
        return _vllm_version()
    for (module, qualname), (_, _, used_by) in VLLM_SYMBOLS.items():
        wanted = set(used_by) & set(users) if users else CPU_PATH not in used_by
        if wanted:
            check_vllm_symbol(module, qualname)
    return _vllm_version()
