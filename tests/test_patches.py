"""patches/ applies to OpenRLHF v0.11.2 and the estimator tests pass against the patched copy."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import openrlhf
import pytest

REPO = Path(__file__).resolve().parents[1]
PATCHES = sorted((REPO / "patches").glob("*.patch"))


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """A copy of the installed openrlhf 0.11.2 with patches/ applied."""
    assert len(PATCHES) == 3
    fork = tmp_path_factory.mktemp("fork")
    shutil.copytree(Path(openrlhf.__file__).parent, fork / "openrlhf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for patch in PATCHES:
        out = subprocess.run(["git", "apply", "--verbose", str(patch)], cwd=fork, capture_output=True, text=True)
        assert out.returncode == 0, f"{patch.name} does not apply to openrlhf 0.11.2: {out.stderr}"
    return fork


def fork_env(fork):
    return {**os.environ, "PYTHONPATH": f"{fork}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "OPENRLHF_COPO_FORK_UNDER_TEST": str(fork)}


def test_patches_apply_and_the_estimator_tests_pass_on_the_fork(fork):
    # only glue: every added line is a comment, an import of openrlhf_copo, or a call into it
    added = [line[1:].strip() for p in PATCHES for line in p.read_text().splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    assert not any("torch." in line or "sigmoid" in line or "std(" in line for line in added), added

    env = fork_env(fork)
    tests = ["tests/openrlhf_ext/test_advantages.py", "tests/openrlhf_ext/test_training_step.py",
             "tests/cli/test_train_ppo_ray.py::test_paper_defaults",
             "tests/cli/test_train_ppo_ray.py::test_bad_settings_are_refused_with_one_line",
             "tests/cli/test_entry_points.py"]  # the CLI over the fork's main block: the CLI's checks, once
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1] and "failed" not in out.stdout.splitlines()[-1]


@pytest.mark.parametrize("extra, reason", [
    (["--copo.eps", "-1"], "--copo.eps -1.0 must be >= 0"),  # refusal
    # preflight: the model folder (after the device step, said outright so that no CPU-path refusal comes first)
    (["--rollout.n_samples_per_prompt", "2", "--copo.device", "cuda"], "does not exist"),
])
def test_the_forks_own_main_runs_the_same_driver_steps(fork, tmp_path, extra, reason):
    """`python -m openrlhf.cli.train_ppo_ray` of the fork: the CLI's refusals and preflight, as one argparse error."""
    from tests_support import copo_argv

    argv = copo_argv(model=str(tmp_path / "no-such-model")) + extra
    env = {**fork_env(fork), "RAY_TMPDIR": str(tmp_path)}  # no `ray start` cluster of this machine to join
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-m", "openrlhf.cli.train_ppo_ray", *argv], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert reason in out.stderr.strip().splitlines()[-1], out.stderr[-2000:]
    assert "Traceback" not in out.stderr


@pytest.mark.heavy  # a training run
def test_a_forks_killed_worker_ends_on_the_same_line_as_the_clis(fork, tmp_path):
    """The fork's own `python -m openrlhf.cli.train_ppo_ray` runs the driver steps to the end (`train_from_fork`):
    the device step (on this CUDA-less machine, the CPU path), then training. Its DeepSpeed worker killed mid-run, it
    ends on the CLI's line (tests/e2e/test_train_ppo_ray_cpu.py), after its own program name."""
    import re

    from openrlhf_copo.cpu_demo.models import tiny_qwen2
    from tests_support import kill_policy_actor_mid_run, train_argv, write_prompts

    model = tiny_qwen2(tmp_path / "tiny-model")
    data = write_prompts(tmp_path / "prompts.jsonl", 6)
    cmd = [sys.executable, "-m", "openrlhf.cli.train_ppo_ray",
           *train_argv(tmp_path, model, data, 6, "--train.num_episodes", "3")]
    reason, victims, returncode, err = kill_policy_actor_mid_run(
        cmd, tmp_path / "metrics.jsonl", {**fork_env(fork), "HF_HUB_OFFLINE": "1"},
        "train_ppo_ray.py: error: training stopped:")
    assert returncode == 2
    assert len(reason) == 1, err[-3000:]
    assert re.search(r"PolicyModelActor \(pid (\d+)\) died", reason[0]).group(1) in victims, reason[0]
    assert f"checkpoints under {tmp_path / 'ckpt'} are as last saved" in reason[0]
    assert "openrlhf_copo: the actors run on the CPU path (no CUDA touched): --copo.device auto" in err
    assert f"{fork}/openrlhf/cli/train_ppo_ray.py" in err  # the traceback runs through the fork's main
