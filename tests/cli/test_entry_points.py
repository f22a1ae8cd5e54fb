"""Which checks each entry point runs: the CLI's `main`, `load_args`, and a fork's main (patches/train_ppo_ray.patch,
which calls `driver.train_from_fork`). Every check is recorded where the driver calls it, and the test pins the table.
Run by tests/test_patches.py over the patched fork too, where the CLI runs the fork's main block."""

import argparse

import pytest

from openrlhf_copo.cli import train_ppo_ray as cli
from openrlhf_copo.openrlhf_ext import driver, runtime_patches
from tests_support import copo_argv

FULL = ["refusals", "warnings", "openrlhf", "resume_guard", "preflight", "device"]
#: What each entry point runs, in order. load_args reads no file, writes nothing, asks no cluster and trains nothing.
EXPECTED = {
    "cli": FULL + ["train"],
    "fork": FULL + ["train"],
    "load_args": ["refusals", "warnings", "openrlhf"],
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
    monkeypatch.setattr(driver, "check_resume_settings", recording("resume_guard"))
    monkeypatch.setattr(driver, "preflight", recording("preflight"))
    monkeypatch.setattr(driver, "apply_device", recording("device"))
    monkeypatch.setattr(driver, "train_with_copo_ray", recording("train"))
    return ran


def test_each_entry_point_runs_its_checks(steps):
    assert {entry: list(checks) for entry, checks in driver.CHECKS.items()} == \
        {entry: [s for s in expected if s != "train"] for entry, expected in EXPECTED.items()}

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
