"""OpenRLHF's own shipped unit tests still pass with the COPO patches active."""

import subprocess
import sys
import sysconfig
from pathlib import Path

RUNNER = """
import sys, pytest
from openrlhf_copo.openrlhf_ext import runtime_patches
assert runtime_patches.apply() and runtime_patches.is_applied()
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_openrlhf_unit_tests_pass_with_patches(tmp_path):
    suite = Path(sysconfig.get_paths()["purelib"]) / "tests"
    assert (suite / "test_experience.py").exists(), f"openrlhf's shipped tests are missing under {suite}"
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")  # keep this repo's pytest settings out of their run
    out = subprocess.run([sys.executable, "-c", RUNNER, str(suite), "-q", "-p", "no:cacheprovider", "-c", str(ini)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    tail = out.stdout[-3000:]
    assert out.returncode == 0, tail
    summary = [line for line in out.stdout.splitlines() if " passed" in line][-1]
    assert int(summary.split(" passed")[0].split()[-1]) >= 200, summary  # 221 in openrlhf 0.11.2
    assert "failed" not in summary and "error" not in summary
