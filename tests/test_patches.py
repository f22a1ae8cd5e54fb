"""patches/ applies to OpenRLHF v0.11.2 and the estimator tests pass against the patched copy."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import openrlhf

REPO = Path(__file__).resolve().parents[1]
PATCHES = sorted((REPO / "patches").glob("*.patch"))


def test_patches_apply_and_the_estimator_tests_pass_on_the_fork(tmp_path):
    assert len(PATCHES) == 3
    fork = tmp_path / "fork"
    shutil.copytree(Path(openrlhf.__file__).parent, fork / "openrlhf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for patch in PATCHES:
        out = subprocess.run(["git", "apply", "--verbose", str(patch)], cwd=fork, capture_output=True, text=True)
        assert out.returncode == 0, f"{patch.name} does not apply to openrlhf 0.11.2: {out.stderr}"
    # only glue: every added line is a comment, an import of openrlhf_copo, or a call into it
    added = [line[1:].strip() for p in PATCHES for line in p.read_text().splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    assert not any("torch." in line or "sigmoid" in line or "std(" in line for line in added), added

    env = {**os.environ, "PYTHONPATH": f"{fork}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OPENRLHF_COPO_FORK_UNDER_TEST": str(fork)}
    tests = ["tests/openrlhf_ext/test_advantages.py", "tests/openrlhf_ext/test_training_step.py",
             "tests/cli/test_train_ppo_ray.py::test_paper_defaults",
             "tests/cli/test_train_ppo_ray.py::test_bad_settings_are_refused_with_one_line"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1] and "failed" not in out.stdout.splitlines()[-1]
