"""patches/ applies to OpenRLHF v0.11.2 and the estimator tests pass against the patched copy. The fork's own main
with a killed DeepSpeed worker is the killed run of tests/e2e/test_train_ppo_ray_cpu.py, which the CLI resumes."""

import subprocess
import sys

import pytest

from tests_support import PATCHES, REPO, build_fork, fork_env


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """A copy of the installed openrlhf 0.11.2 with patches/ applied."""
    return build_fork(tmp_path_factory.mktemp("fork"))


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
    error = out.stderr[out.stderr.rindex("train_ppo_ray.py: error: "):]  # one error, its refusals a line each
    assert reason in error, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
