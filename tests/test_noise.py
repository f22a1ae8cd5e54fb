"""openrlhf_copo/noise.py: an entry point silences pynvml's deprecation warning (in its process and the processes it
starts) and DeepSpeed's CPU guess (in its process), and nothing else: another FutureWarning, and another DeepSpeed
warning, still show. (The entry point itself: tests/cli/test_train_ppo_ray.py's --help; a CPU run's workers:
tests/openrlhf_ext/test_worker_hook.py.)"""

import os
import subprocess
import sys

from openrlhf_copo import noise

ENTRY_POINT_PROCESS = r"""
import subprocess, sys, warnings
import openrlhf_copo.cli  # what every `python -m openrlhf_copo.cli.<command>` imports first
import torch  # imports pynvml
warnings.warn("another FutureWarning", FutureWarning)
child = "import warnings, torch; warnings.warn('the child FutureWarning', FutureWarning)"
sys.stderr.write(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stderr)
import deepspeed  # guesses the CPU here
from deepspeed.utils import logger
logger.warning("another DeepSpeed warning")
"""


def test_an_entry_point_silences_the_two_lines_and_nothing_else():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "DS_ACCELERATOR")}
    out = subprocess.run([sys.executable, "-c", ENTRY_POINT_PROCESS], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FutureWarning: another FutureWarning" in out.stderr
    assert "FutureWarning: the child FutureWarning" in out.stderr  # the child inherited the filter, not a blanket one
    assert noise.PYNVML_DEPRECATION not in out.stderr
    assert "another DeepSpeed warning" in out.stdout  # DeepSpeed's logger prints to stdout
    assert noise.DEEPSPEED_CPU_GUESS[:26] not in out.stdout + out.stderr


def test_the_pythonwarnings_entry_joins_the_users_own_once():
    environ = {"PYTHONWARNINGS": "error::DeprecationWarning"}
    noise.silence_pynvml_deprecation(environ)
    noise.silence_pynvml_deprecation(environ)
    assert environ["PYTHONWARNINGS"] == ("error::DeprecationWarning,"
                                         "ignore:The pynvml package is deprecated:FutureWarning")
    empty = {}
    noise.silence_pynvml_deprecation(empty)
    assert empty["PYTHONWARNINGS"] == noise.PYTHONWARNINGS_ENTRY
