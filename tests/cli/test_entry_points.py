"""Which steps each entry point runs: the CLI's `main`, `load_args`, and a fork's main (patches/train_ppo_ray.patch,
which calls `driver.train_from_fork`). The test records the steps `driver.after_parse` runs, by name, and what each
does where the driver calls it, so that a step's name and its effects cannot part. Run by tests/test_patches.py over
the patched fork too, where the CLI runs the fork's main block."""

import argparse

import pytest

from openrlhf_copo.cli import train_ppo_ray as cli
from openrlhf_copo.openrlhf_ext import cpu, device, driver, runtime_patches
from openrlhf_copo.openrlhf_ext.runtime_patches import versions
from tests_support import copo_argv

ARGUMENT_CHECKS = ["refuse_bad_arguments", "print_regime_and_warnings", "check_openrlhf_version_and_symbols"]
RUN_STEPS = ARGUMENT_CHECKS + ["check_vllm_symbols", "patch_openrlhf_in_this_process", "decide_device",
                               "install_cpu_path", "start_ray_to_join_the_cluster",
                               "guard_resume_write_settings_and_preflight"]
#: Which steps each entry point runs, in order (`driver.after_parse`). load_args reads no file, writes nothing, asks no
#: cluster, patches nothing and trains nothing.
TABLE = {"cli": RUN_STEPS, "fork": RUN_STEPS, "load_args": ARGUMENT_CHECKS}
#: What each step calls, in order, on the CPU path (this CUDA-less machine, no cluster to join: the disk checks run
#: in this process).
EFFECTS = {
    "refuse_bad_arguments": ["copo_problems"],
    "print_regime_and_warnings": ["copo_warnings"],
    "check_openrlhf_version_and_symbols": ["check_openrlhf"],
    "check_vllm_symbols": ["check_vllm"],
    "patch_openrlhf_in_this_process": ["runtime_patches.apply"],
    "decide_device": ["device.decide"],
    "install_cpu_path": ["cpu.prepare_driver", "cpu.install"],
    "start_ray_to_join_the_cluster": [],  # no cluster to join here: Ray starts with the training
    "guard_resume_write_settings_and_preflight": ["check_resume_settings", "preflight"],
}
#: The CPU path's settings (`--vllm.sync_backend nccl` is OpenRLHF's default, which the CPU path refuses).
CPU_OK = ("--vllm.sync_backend", "gloo", "--ds.attn_implementation", "sdpa")


@pytest.fixture
def steps(monkeypatch):
    """The steps `after_parse` runs, by name, in order."""
    ran = []

    def recording(name, step):
        def call(*a, **k):
            ran.append(name)
            return step(*a, **k)
        return call

    for name in RUN_STEPS:
        monkeypatch.setattr(driver, name, recording(name, getattr(driver, name)))
    return ran


@pytest.fixture
def calls(monkeypatch):
    """What the steps call, recorded where the driver calls it; the machine-dependent ones (installing the CPU path,
    the resume guard, the preflight), Ray's start (with the decision it is handed) and the training do nothing
    else."""
    ran = []

    def recording(name, original=None):
        def call(*a, **k):
            ran.append(name)
            return original(*a, **k) if original else None
        return call

    monkeypatch.setattr(driver, "copo_problems", recording("copo_problems", driver.copo_problems))
    monkeypatch.setattr(driver, "copo_warnings", recording("copo_warnings", driver.copo_warnings))
    monkeypatch.setattr(runtime_patches, "check_openrlhf", recording("check_openrlhf", runtime_patches.check_openrlhf))
    monkeypatch.setattr(versions, "check_vllm", recording("check_vllm", versions.check_vllm))
    monkeypatch.setattr(runtime_patches, "apply", recording("runtime_patches.apply", runtime_patches.apply))
    monkeypatch.setattr(device, "decide", recording("device.decide", device.decide))
    monkeypatch.setattr(cpu, "prepare_driver", recording("cpu.prepare_driver"))
    monkeypatch.setattr(cpu, "install", recording("cpu.install"))
    monkeypatch.setattr(driver, "check_resume_settings", recording("check_resume_settings"))
    monkeypatch.setattr(driver, "preflight", recording("preflight"))
    monkeypatch.setattr(driver, "start_ray", lambda args, decision: ran.append(("start_ray", decision.device)))
    monkeypatch.setattr(driver, "openrlhf_train", recording("train"))
    return ran


def effects(entry):
    return [call for step in TABLE[entry] for call in EFFECTS[step]]


def test_each_entry_point_runs_its_steps_in_order(steps, calls, no_ray_cluster):
    cli.main(copo_argv(*CPU_OK))
    assert steps == TABLE["cli"]
    # Ray starts with the training, handed the device decision (this CUDA-less machine: the CPU path)
    assert calls == effects("cli") + [("start_ray", "cpu"), "train"]

    steps.clear()
    calls.clear()
    args = cli.load_args(copo_argv(*CPU_OK))
    assert steps == TABLE["load_args"] and calls == effects("load_args")

    steps.clear()
    calls.clear()  # what the fork's main calls in place of its `train(args)`
    driver.train_from_fork(lambda a: calls.append("train"), args, argparse.ArgumentParser(prog="fork"))
    assert steps == TABLE["fork"] and calls == effects("fork") + [("start_ray", "cpu"), "train"]


def test_the_device_decision_is_handed_on_not_written_into_the_args(no_ray_cluster, monkeypatch):
    """`after_parse` returns the decision, which the steps after it and Ray's start are handed: the args keep the
    flag as the user gave it (`auto`), and what a run's Ray gets follows the decision alone."""
    monkeypatch.setattr(cpu, "prepare_driver", lambda: None)
    monkeypatch.setattr(cpu, "install", lambda: None)
    monkeypatch.setattr(driver, "guard_resume_write_settings_and_preflight", lambda args: None)
    args = cli.load_args(copo_argv(*CPU_OK))
    decision = driver.after_parse(args, driver.CLI)
    assert decision.device == "cpu" and args.copo.device == "auto"
    assert driver.after_parse(args, driver.LOAD_ARGS) is None  # the argument checks decide no device
    on_cuda = device.DeviceDecision(device.CUDA, "--copo.device cuda")
    assert driver.ray_init_kwargs(args, {}, on_cuda).get("address") is None  # CUDA: OpenRLHF's own Ray start
    assert driver.ray_init_kwargs(args, {}, decision)["address"] == "local"  # the CPU path: a cluster of its own


def test_the_driver_docstring_lists_the_steps_in_order():
    """The module docstring's list of steps is the one the test records, in its order (the maintainer reads the list
    first)."""
    listed = [line.split()[0] for line in driver.__doc__.split("The steps (`after_parse`)")[1].split("\n\nThen")[0]
              .splitlines()[1:] if line.startswith("    ") and line[4:5].isalpha()]
    assert listed == TABLE["cli"]


def test_a_forks_call_hands_the_clis_recorder_its_args_and_runs_no_step(calls):
    """The CLI reading a fork's arguments runs the fork's main block with an `ArgsRecorder` for `train`: the fork's
    `train_from_fork` gives it the args, and the CLI's own entry point decides the steps."""
    args = cli.load_args(copo_argv())
    calls.clear()
    recorder = driver.ArgsRecorder()
    driver.train_from_fork(recorder, args, argparse.ArgumentParser(prog="fork"))
    assert recorder.calls == [args] and calls == []


def test_a_forks_refusal_is_its_parsers_error(capsys):
    args = cli.load_args(copo_argv())
    args.copo.eps = -1.0
    with pytest.raises(SystemExit) as exc:
        driver.train_from_fork(lambda a: pytest.fail("trained"), args, argparse.ArgumentParser(prog="fork"))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    # with what the device it would get cannot run (this machine has no CUDA: the CPU path), in the same message
    start = next(i for i, line in enumerate(err) if line.startswith("fork: error: "))
    assert err[start].startswith("fork: error: ") and err[start].endswith("settings are refused:"), err
    assert "--copo.eps -1.0 must be >= 0" in err[start + 1], err
    assert any("(the actors would run on the CPU path: --copo.device auto" in line for line in err[start + 2:]), err


def test_the_cli_starts_ray_with_copos_settings_over_openrlhfs_then_openrlhfs_train(monkeypatch, load_args, tmp_path):
    """OpenRLHF's `train` skips its own `ray.init` when Ray is up; the CLI starts it first with OpenRLHF's settings
    (as OpenRLHF's `train` has them) plus COPO's worker hook."""
    import inspect

    import ray

    upstream = __import__("openrlhf.cli.train_ppo_ray", fromlist=["train"])
    source = inspect.getsource(upstream.train)
    for name in ("TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in driver.openrlhf_ray_init_kwargs()["runtime_env"]["env_vars"].items():
        assert f'"{name}": os.environ.get("{name}", "{value}")' in source, name

    args = load_args(copo_argv(model=str(tmp_path)))  # no tokenizer there: no stop tokens
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(calls))
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(("init", kwargs)))
    monkeypatch.setattr(upstream, "train", lambda a: calls.append(("train", a)))
    driver.run_training(driver.openrlhf_train, args, "prog", device.DeviceDecision(device.CUDA, "--copo.device cuda"))
    (init, kwargs), (train, trained) = calls
    assert (init, train, trained) == ("init", "train", args)
    env = kwargs["runtime_env"]
    assert env["worker_process_setup_hook"] == driver.RAY_WORKER_SETUP_HOOK
    assert env["env_vars"]["NCCL_DEBUG"] == "WARN" and env["env_vars"]["TOKENIZERS_PARALLELISM"] == "true"


LOAD_ARGS_WRITES_AND_PATCHES_NOTHING = r"""
import json, os, sys
sys.path.insert(0, "tests")
from tests_support import copo_argv
from openrlhf_copo.cli.train_ppo_ray import load_args
from openrlhf_copo.openrlhf_ext import cpu, runtime_patches
ckpt = sys.argv[1]
os.makedirs(os.path.join(ckpt, "_actor"))  # a half-written checkpoint: the resume guard would move it aside
before = runtime_patches.is_applied()  # True only on a fork that carries patches/ in its own source
environ = dict(os.environ)
# settings that a run on this machine's CPU path would accept: nothing refused before the steps that write
args = load_args(copo_argv("--vllm.sync_backend", "gloo", "--ckpt.path", ckpt, "--ckpt.load_enable",
                           "--ckpt.save_steps", "1"))
assert args.algo.advantage.estimator == "copo"
changed = {key for key, _ in set(os.environ.items()) ^ set(environ.items())}  # an import sets LD_LIBRARY_PATH
print(json.dumps({"patched": [before, runtime_patches.is_applied()], "cpu_path": cpu._APPLIED,
                  "cpu_env": sorted(changed & set(cpu.loopback_env())), "ckpt": sorted(os.listdir(ckpt))}))
"""


def test_load_args_writes_and_patches_nothing(tmp_path):
    """load_args checks the arguments alone, in a fresh process: OpenRLHF's classes stay as they were (stock
    OpenRLHF's, or a fork's, which carries the patches in its own source: tests/test_patches.py runs this there), the
    CPU path is neither installed nor set in the environment, and a run's checkpoint folder is left as it is (the
    resume guard would move its half-written `_actor` aside and write copo_settings.json)."""
    import json
    import subprocess
    import sys

    from tests_support import REPO

    out = subprocess.run([sys.executable, "-c", LOAD_ARGS_WRITES_AND_PATCHES_NOTHING, str(tmp_path / "ckpt")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    before, after = seen["patched"]
    assert after == before
    assert seen["cpu_path"] is False and seen["cpu_env"] == []
    assert seen["ckpt"] == ["_actor"]
