"""The GPU suite's import-only vLLM stand-in (tests/gpu/stubs): OpenRLHF imports with it, and any use fails loudly."""

import os
import subprocess
import sys
from pathlib import Path

STUBS = Path(__file__).resolve().parents[1] / "gpu" / "stubs"

CODE = """
import vllm
assert vllm.__openrlhf_copo_stand_in__, vllm.__file__
import openrlhf.trainer.ray.ppo_actor, openrlhf.trainer.ppo_utils.samples_generator  # noqa: F401  (module-level imports)
from vllm import SamplingParams
try:
    SamplingParams(max_tokens=4)
except RuntimeError as e:
    assert "import-only vLLM stand-in" in str(e), e
    print("loud")
"""


def test_openrlhf_imports_with_the_stand_in_and_using_it_fails_loudly():
    env = {**os.environ, "PYTHONPATH": f"{STUBS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.strip().endswith("loud"), out.stderr[-3000:]
