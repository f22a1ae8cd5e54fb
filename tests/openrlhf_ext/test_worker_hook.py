"""openrlhf_copo.openrlhf_ext.worker_hook: Ray's worker hook touches no CUDA, and the patches still arrive.

Ray runs the hook before it narrows CUDA_VISIBLE_DEVICES to an actor's GPUs. Each test runs in a fresh
interpreter, as a Ray worker process starts: with neither OPENRLHF_COPO_CPU nor
PYTORCH_NVML_BASED_CUDA_CHECK set (what a GPU node looks like to the hook), the hook must import neither torch
(so it cannot initialise CUDA) nor DeepSpeed nor OpenRLHF's trainer modules; once the actor imports those
itself, every COPO patch must be in place."""

import os
import subprocess
import sys

import pytest

GPU_NODE_HOOK = """
import sys
from openrlhf_copo.openrlhf_ext.worker_hook import ray_worker_setup
ray_worker_setup()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "deepspeed", "vllm", "ray", "transformers")
               or m.startswith("openrlhf."))
assert not heavy, f"the worker hook imported {heavy[:8]}"

# the actor's own imports, after Ray narrowed its GPUs
import openrlhf.trainer.ppo_trainer as ppo_trainer
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
from openrlhf_copo.openrlhf_ext import runtime_patches
assert runtime_patches.is_applied()
assert ppo_trainer.BasePPOTrainer.__openrlhf_copo_patched__
assert ppo_trainer.compute_eval_metrics.__openrlhf_copo_patched__
assert ppo_trainer.SamplesGenerator.generate_eval_samples.__openrlhf_copo_patched__
assert ppo_trainer.SamplesGenerator._dispatch_prompts_to_vllm.__openrlhf_copo_patched__
assert ppo_trainer.prepare_datasets.__openrlhf_copo_patched__
import torch
assert torch.cuda.current_device is not None and not getattr(torch.cuda.current_device, "__name__", "") == "<lambda>", \\
    "the CPU path was installed without OPENRLHF_COPO_CPU"
print("ok")
"""

CPU_RUN_HOOK = """
from openrlhf_copo.openrlhf_ext.worker_hook import ray_worker_setup
ray_worker_setup()
import torch
from openrlhf_copo.openrlhf_ext import cpu, runtime_patches
assert torch.cuda.current_device() == torch.device("cpu")  # the CPU path, chosen by the driver's variable
import openrlhf.trainer.ray.ppo_actor  # noqa: F401
assert runtime_patches.is_applied()
from deepspeed.accelerator import get_accelerator
assert get_accelerator().device_name() == "cpu"
print("ok")
"""

ALREADY_IMPORTED = """
import openrlhf.trainer.ppo_utils.experience_maker as em
from openrlhf_copo.openrlhf_ext.worker_hook import ray_worker_setup
ray_worker_setup()
assert em.RemoteExperienceMaker.__openrlhf_copo_patched__  # patched at once, not waiting for an import
print("ok")
"""


#: What a Ray worker of a cluster the driver joined from elsewhere does not inherit from it: the CPU switch, the
#: NVML check DeepSpeed sets, the CPU path's DeepSpeed accelerator, the driver's warning filter (`openrlhf_copo.noise`).
NOT_INHERITED = ("OPENRLHF_COPO_CPU", "PYTORCH_NVML_BASED_CUDA_CHECK", "DS_ACCELERATOR", "PYTHONWARNINGS")


def run_fresh(code: str, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


def test_on_a_gpu_node_the_hook_imports_nothing_heavy_and_the_patches_arrive_with_the_actors_imports():
    """... and the hook silenced pynvml's deprecation warning, which the actor's import of torch would print."""
    out = run_fresh(GPU_NODE_HOOK)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
    assert "The pynvml package is deprecated" not in out.stderr


def test_on_a_cpu_run_the_drivers_variable_installs_the_cpu_path():
    """A CPU run's worker, with the environment the driver gives it (`cpu.loopback_env`): the CPU path installed, and
    DeepSpeed told its accelerator (DS_ACCELERATOR=cpu) instead of guessing it with a warning."""
    from openrlhf_copo.openrlhf_ext.cpu import loopback_env

    out = run_fresh(CPU_RUN_HOOK, **loopback_env())
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
    assert "Setting accelerator to CPU" not in out.stdout + out.stderr


def test_a_module_imported_before_the_hook_is_patched_at_once():
    out = run_fresh(ALREADY_IMPORTED)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_a_suffixed_cuda_arch_list_is_made_one_deepspeeds_jit_build_parses(monkeypatch, capsys):
    """A Hopper image's TORCH_CUDA_ARCH_LIST="9.0a" broke DeepSpeed's FusedAdam build on an H200 (docs/gpu-runs/):
    the worker hook rewrites it, and DeepSpeed's own JIT arch parsing then accepts it."""
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    from openrlhf_copo.openrlhf_ext.worker_hook import deepspeed_arch_list

    builder = FusedAdamBuilder()
    builder.jit_mode = True  # what DeepSpeed's jit_load sets before it asks for the nvcc arch flags
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a 10.0f+PTX")
    with pytest.raises(ValueError, match="0a"):
        builder.compute_capability_args()
    deepspeed_arch_list()
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0 10.0+PTX"
    assert "'8.0;9.0a 10.0f+PTX' -> '8.0;9.0 10.0+PTX'" in capsys.readouterr().err
    builder.compute_capability_args()  # under JIT, DeepSpeed writes its canonical list back for torch's build
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0;10.0+PTX"

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")  # a plain list is left alone, silently
    deepspeed_arch_list()
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0" and capsys.readouterr().err == ""
