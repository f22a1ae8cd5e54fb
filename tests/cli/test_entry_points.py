"""Which checks each entry point runs: the CLI's `main`, `load_args`, and a fork's main (patches/train_ppo_ray.patch,
which calls `driver.train_from_fork`). Every check is recorded where the driver calls it, and the test pins the table.
Run by tests/test_patches.py over the patched fork too, where the CLI runs the fork's main block."""

import argparse

import pytest

from openrlhf_copo.cli import train_ppo_ray as cli
from openrlhf_copo.openrlhf_ext import driver, runtime_patches
from openrlhf_copo.openrlhf_ext.runtime_patches import versions
from tests_support import copo_argv

FULL = ["refusals", "warnings", "openrlhf", "vllm", "patch_driver", "device", "disk_checks"]
#: Which checks each entry point runs, in order (`driver.CHECKS`). load_args reads no file, writes nothing, asks no
#: cluster, patches nothing and trains nothing.
TABLE = {
    "cli": FULL,
    "fork": FULL,
    "load_args": ["refusals", "warnings", "openrlhf"],
}
#: What each entry point calls, in order (no cluster to join: the disk checks run in this process).
DISK_CHECKS = ["resume_guard", "preflight"]
EXPECTED = {
    "cli": FULL[:-1] + DISK_CHECKS + ["train"],
    "fork": FULL[:-1] + DISK_CHECKS + ["train"],
    "load_args": TABLE["load_args"],
}


@pytest.fixture
def steps(monkeypatch):
    """The checks and the training, recorded where the driver calls them; the machine-dependent ones (resume guard,
    preflight, device) and the training do nothing else."""
    ran = []

    def recording(name, original=None):
        def step(*a, **k):
            ran.append(name)
            return original(*a, **k) if original else None
        return step

    monkeypatch.setattr(driver, "copo_problems", recording("refusals", driver.copo_problems))
    monkeypatch.setattr(driver, "copo_warnings", recording("warnings", driver.copo_warnings))
    monkeypatch.setattr(runtime_patches, "check_openrlhf", recording("openrlhf", runtime_patches.check_openrlhf))
    monkeypatch.setattr(versions, "check_vllm", recording("vllm", versions.check_vllm))
    monkeypatch.setattr(runtime_patches, "apply", recording("patch_driver", runtime_patches.apply))
    monkeypatch.setattr(driver, "check_resume_settings", recording("resume_guard"))
    monkeypatch.setattr(driver, "preflight", recording("preflight"))
    monkeypatch.setattr(driver, "apply_device", recording("device"))
    monkeypatch.setattr(driver, "train_with_copo_ray", recording("train"))
    return ran


def test_each_entry_point_runs_its_checks(steps, no_ray_cluster):
    assert {entry: list(checks) for entry, checks in driver.CHECKS.items()} == TABLE

    cli.main(copo_argv())
    assert steps == EXPECTED["cli"]

    steps.clear()
    args = cli.load_args(copo_argv())
    assert steps == EXPECTED["load_args"]

    steps.clear()  # what the fork's main calls in place of its `train(args)`
    driver.train_from_fork(lambda a: steps.append("train"), args, argparse.ArgumentParser(prog="fork"))
    assert steps == EXPECTED["fork"]


def test_a_forks_call_hands_the_clis_recorder_its_args_and_checks_nothing(steps):
    """The CLI reading a fork's arguments runs the fork's main block with an `ArgsRecorder` for `train`: the fork's
    `train_from_fork` gives it the args, and the CLI's own entry point decides the checks."""
    args = cli.load_args(copo_argv())
    steps.clear()
    recorder = driver.ArgsRecorder()
    driver.train_from_fork(recorder, args, argparse.ArgumentParser(prog="fork"))
    assert recorder.calls == [args] and steps == []


def test_a_forks_refusal_is_its_parsers_error(capsys):
    args = cli.load_args(copo_argv())
    args.copo.eps = -1.0
    with pytest.raises(SystemExit) as exc:
        driver.train_from_fork(lambda a: pytest.fail("trained"), args, argparse.ArgumentParser(prog="fork"))
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "fork: error: --copo.eps -1.0 must be >= 0"


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

    args = load_args(copo_argv("--copo.device", "cuda", model=str(tmp_path)))  # no tokenizer there: no stop tokens
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(calls))
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(("init", kwargs)))
    monkeypatch.setattr(upstream, "train", lambda a: calls.append(("train", a)))
    driver.train_with_copo_ray(args)
    (init, kwargs), (train, trained) = calls
    assert (init, train, trained) == ("init", "train", args)
    env = kwargs["runtime_env"]
    assert env["worker_process_setup_hook"] == driver.RAY_WORKER_SETUP_HOOK
    assert env["env_vars"]["NCCL_DEBUG"] == "WARN" and env["env_vars"]["TOKENIZERS_PARALLELISM"] == "true"


LOAD_ARGS_PATCHES_NOTHING = r"""
import sys
sys.path.insert(0, "tests")
from tests_support import copo_argv
from openrlhf_copo.cli.train_ppo_ray import load_args
from openrlhf_copo.openrlhf_ext import runtime_patches
before = runtime_patches.is_applied()  # True only on a fork that carries patches/ in its own source
args = load_args(copo_argv())
assert args.algo.advantage.estimator == "copo"
print("PATCHED", before, runtime_patches.is_applied())
"""


def test_load_args_patches_nothing_in_the_calling_process():
    """load_args checks the arguments alone: OpenRLHF's classes in the caller's process stay as they were (stock
    OpenRLHF's, or a fork's, which carries the patches in its own source: tests/test_patches.py runs this there)."""
    import subprocess
    import sys

    from tests_support import REPO

    out = subprocess.run([sys.executable, "-c", LOAD_ARGS_PATCHES_NOTHING], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    _, before, after = out.stdout.splitlines()[-1].split()
    assert after == before
