"""The CPU device path: refused settings, loopback-only Ray, and nothing applied where CUDA exists."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openrlhf_copo.openrlhf_ext import cpu
from openrlhf_copo.vllm_cpu import OMP_BIND_ENV
from tests_support import cli_exit_here, copo_argv

CPU_OK = ["--vllm.sync_backend", "gloo", "--vllm.num_engines", "1", "--actor.num_gpus_per_node", "1"]


@pytest.mark.parametrize("extra, reason", [
    (["--vllm.sync_with_ray"], "--vllm.sync_with_ray fails on the CPU"),
    (["--train.colocate_all", "--vllm.enable_sleep"], "vLLM sleep mode is not supported"),
    (["--vllm.sync_backend", "nccl"], "NCCL needs CUDA; add --vllm.sync_backend gloo"),
    (["--ds.packing_samples"], "--ds.packing_samples needs flash-attention, which has no CPU kernels"),
    (["--ds.ring_attn_size", "2"], "--ds.ring_attn_size 2 needs flash-attention, which has no CPU kernels"),
    (["--ds.attn_implementation", "flash_attention_2"],
     "--ds.attn_implementation flash_attention_2 needs flash-attention, which has no CPU kernels: use "
     "--ds.attn_implementation sdpa (or eager) without packing"),
    (["--ds.attn_implementation", "flash_attention_3"],
     "--ds.attn_implementation flash_attention_3 needs flash-attention, which has no CPU kernels"),
    (["--ds.attn_implementation", "kernels-community/vllm-flash-attn3"],
     "--ds.attn_implementation kernels-community/vllm-flash-attn3 needs flash-attention, which has no CPU kernels"),
    (["--ds.use_liger_kernel"], "liger's Triton kernels need CUDA"),
    (["--train.enable_ema"], "--train.enable_ema"),
])
def test_settings_that_cannot_work_on_the_cpu(load_args, extra, reason):
    problems = cpu.cpu_problems(load_args(copo_argv(*CPU_OK, *extra)))
    assert problems and reason in problems[0], problems


def test_the_cpu_test_settings_are_clean(load_args):
    assert cpu.cpu_problems(load_args(copo_argv(*CPU_OK))) == []


def test_ray_is_local_and_on_loopback(load_args, no_ray_cluster):
    args = load_args(copo_argv(*CPU_OK, "--vllm.num_engines", "2"))
    kw = cpu.ray_init_kwargs(args, {"runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN"}}})
    assert kw["_node_ip_address"] == "127.0.0.1" and kw["include_dashboard"] is False
    assert kw["address"] == "local"  # no cluster to join: one of its own
    assert kw["num_gpus"] == 3  # 1 actor rank + 2 vLLM engines (no reference model with init_coef 0)
    env = kw["runtime_env"]["env_vars"]
    assert env["OPENRLHF_COPO_CPU"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and env["NCCL_DEBUG"] == "WARN"


#: A driver of a local cluster started with the CPU path's `ray.init` arguments (given as JSON): it prints its cluster's
#: GCS address, its session folder and the GCS address a task of its own sees; waits for the file ``go``; runs a task
#: again and prints what it sees.
LOCAL_CLUSTER = """
import json, sys, time
from pathlib import Path
import ray

kwargs, go = json.loads(sys.argv[1]), Path(sys.argv[2])
ray.init(**kwargs, log_to_driver=False)

@ray.remote(num_cpus=0)
def seen():
    return ray.get_runtime_context().gcs_address

def say(**kw):
    print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "task_gcs": ray.get(seen.remote()), **kw}),
          flush=True)

say(session=ray._private.worker._global_node.get_session_dir_path())
while not go.exists():
    time.sleep(0.2)
say()
ray.shutdown()
"""


@pytest.mark.heavy(group=2)  # two local Ray clusters (and this is why group 2 may hold one beside group 1's)
def test_two_local_clusters_of_the_cpu_path_run_side_by_side_each_on_its_own(load_args, no_ray_cluster, tmp_path):
    """What lets the two heavy groups of the suite each start a local Ray cluster at once (tests/quick_tier.py): two
    clusters started as the CPU path starts them (`cpu.ray_init_kwargs`: address "local"), in Ray's default temp dir
    as the CLI's runs are, each run their tasks in their own cluster; the one port they share, the dashboard agent's
    HTTP port 52365, one agent gives up and its cluster goes on working."""
    kwargs = cpu.ray_init_kwargs(load_args(copo_argv(*CPU_OK)), {})
    assert kwargs["address"] == "local"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_TMPDIR", "RAY_ADDRESS")}  # Ray's default temp dir
    go = tmp_path / "go"
    drivers = [subprocess.Popen([sys.executable, "-c", LOCAL_CLUSTER, json.dumps(kwargs), str(go)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    try:
        first = []
        for d in drivers:
            line = d.stdout.readline()  # its cluster is up
            assert line, d.communicate(timeout=60)[1][-3000:]
            first.append(json.loads(line))
        logs = [Path(f["session"]) / "logs" / "dashboard_agent.log" for f in first]
        deadline = time.time() + 60  # the agent's retries take about 3 s
        while not any(re.search(r"port #?52365 failed to bind after", p.read_text()) for p in logs if p.exists()):
            assert time.time() < deadline, [p.read_text()[-2000:] for p in logs if p.exists()]
            time.sleep(0.5)
        go.touch()
        second = []
        for d in drivers:
            out, err = d.communicate(timeout=120)
            assert d.returncode == 0, err[-3000:]
            second.append(json.loads(out))
    finally:
        go.touch()
        for d in drivers:
            if d.poll() is None:
                d.kill()
    assert first[0]["gcs"] != first[1]["gcs"] and first[0]["session"] != first[1]["session"]
    for f, s in zip(first, second):  # each cluster's tasks ran in it, before and after the agent gave the port up
        assert f["task_gcs"] == f["gcs"] == s["task_gcs"] == s["gcs"]


PRETEND_CUDA = """
import os, torch
torch.cuda.is_available = lambda: True          # a GPU machine, as far as the CPU path can tell
os.environ.pop("OPENRLHF_COPO_CPU", None)
from openrlhf_copo.openrlhf_ext import cpu
from openrlhf_copo.vllm_cpu import OMP_BIND_ENV
import openrlhf.trainer.ray.vllm_worker_wrap as wrap, openrlhf.utils.distributed_util as du
before = (torch.cuda.set_device, torch.cuda.current_device, wrap.WorkerWrap.update_weight, du.stateless_init_process_group)
assert cpu.apply() is False
cpu.vllm_plugin()
after = (torch.cuda.set_device, torch.cuda.current_device, wrap.WorkerWrap.update_weight, du.stateless_init_process_group)
assert before == after, "CPU patches were applied on a CUDA machine"
print("untouched")
"""


def test_nothing_is_applied_when_cuda_is_present():
    out = subprocess.run([sys.executable, "-c", PRETEND_CUDA], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "untouched" in out.stdout, out.stderr[-2000:]


def test_no_argument_run_on_a_gpu_machine_points_to_the_scripts(monkeypatch, capfd):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    code, _, err = cli_exit_here(["--advantage_estimator", "copo"], capfd)
    assert code == 2
    assert "examples/scripts/train_copo_ray.sh" in err and "Traceback" not in err


def test_cpu_path_is_active_in_this_process(cpu_path):
    import torch

    import openrlhf.trainer.ray.vllm_worker_wrap as wrap

    assert torch.cuda.current_device() == torch.device("cpu")
    assert wrap.WorkerWrap.update_weight is cpu._cpu_update_weight


def test_both_ends_of_the_weight_sync_build_the_gloo_group(cpu_path):
    """The actor's end (rank 0, ppo_actor's import) and the vLLM workers' end (distributed_util's) both build the gloo
    group. Either end left on OpenRLHF's own builds vLLM's PyNcclCommunicator, which where NCCL is missing disables
    itself without a word (its broadcast does nothing): no test without a training run noticed the actor's end
    missing (docs/testing.md)."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils.distributed_util as du

    assert ppo_actor.stateless_init_process_group is cpu._gloo_stateless_init_process_group
    assert du.stateless_init_process_group is cpu._gloo_stateless_init_process_group


def test_ray_workers_get_every_core_and_an_fp32_run_builds_fp32_vllm_engines(load_args, monkeypatch, no_ray_cluster):
    """Ray gives an actor that asks for one CPU OMP_NUM_THREADS=1 (torch would train on one core)."""
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = cpu.ray_init_kwargs(load_args(copo_argv(*CPU_OK)), {})["runtime_env"]["env_vars"]
    assert env["OMP_NUM_THREADS"] == str(len(os.sched_getaffinity(0)))
    assert cpu.VLLM_DTYPE_ENV not in env  # bf16 run: OpenRLHF's own bfloat16 engines
    env = cpu.ray_init_kwargs(load_args(copo_argv(*CPU_OK, "--ds.param_dtype", "fp32")), {})["runtime_env"]["env_vars"]
    assert env[cpu.VLLM_DTYPE_ENV] == "float32"


def test_vllm_cpu_engines_bind_every_core_unless_the_user_says_otherwise(load_args, monkeypatch, no_ray_cluster):
    """vLLM-CPU's "auto" binding leaves its model worker one core of two (the other kept for its scheduler)."""
    import os

    monkeypatch.delenv(OMP_BIND_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 0, 1})
    env = cpu.ray_init_kwargs(load_args(copo_argv(*CPU_OK)), {})["runtime_env"]["env_vars"]
    assert env[OMP_BIND_ENV] == "0,1,3"  # vLLM's id-list syntax ("5,2-4"), sorted
    monkeypatch.setenv(OMP_BIND_ENV, "auto")
    assert cpu.ray_init_kwargs(load_args(copo_argv(*CPU_OK)), {})["runtime_env"]["env_vars"][OMP_BIND_ENV] == "auto"


def test_fp32_is_the_cpu_paths_and_refused_on_a_gpu(load_args, monkeypatch, no_ray_cluster):
    from openrlhf_copo.openrlhf_ext import driver

    from openrlhf_copo.openrlhf_ext import device

    args = load_args(copo_argv(*CPU_OK, "--ds.param_dtype", "fp32"))
    assert args.ds.param_dtype == "fp32"
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    with pytest.raises(driver.DriverError, match="where --ds.param_dtype fp32 is the CPU path's"):
        driver.decide_device(args)


def test_fp32_on_the_cpu_path_loads_float32_and_overrides_vllms_bfloat16(cpu_path, monkeypatch, tmp_path):
    import torch
    from vllm.engine.arg_utils import EngineArgs

    from openrlhf.utils.utils import convert_to_torch_dtype

    assert convert_to_torch_dtype("fp32") is torch.float32 and convert_to_torch_dtype("bf16") is torch.bfloat16
    # what OpenRLHF's create_vllm_engines passes; a folder, which offline vLLM takes as it is (a hub name it looks up)
    engine_args = EngineArgs(model=str(tmp_path), dtype="bfloat16")
    monkeypatch.setenv(cpu.VLLM_DTYPE_ENV, "float32")
    try:
        engine_args.create_engine_config()
    except Exception:
        pass  # no model in the empty folder: the dtype was set before vLLM looked for it
    assert engine_args.dtype == "float32"


@pytest.mark.parametrize("layer, tied, shown", [
    ("RotaryEmbedding", False, False), ("Llama3RotaryEmbedding", True, False),  # a computed cache, never synced
    ("ParallelLMHead", True, False),  # tied: re-packed from the synced embedding
    ("ParallelLMHead", False, True),  # untied: it is synced, so a miss is real
    ("QKVParallelLinear", True, True), ("VocabParallelEmbedding", True, True),
])
def test_only_the_expected_reload_warnings_are_filtered(layer, tied, shown):
    import logging

    record = logging.makeLogRecord({"name": cpu.VLLM_RELOAD_LOGGER, "levelno": logging.WARNING,
                                    "msg": "%s: Failed to load weights", "args": (layer,)})
    assert cpu._ExpectedReloadWarnings(tied_lm_head=tied).filter(record) is shown
