"""Two lines every command printed that tell a user of this project nothing, silenced where they start; every other
warning shows as it did.

- pynvml's `FutureWarning: The pynvml package is deprecated. Please install nvidia-ml-py instead...`: the pynvml
  wheel (a dependency of the environment, `scripts/setup_cpu.sh`) warns when anything imports it, and torch imports
  it in every process that imports torch. A filter on that message alone (`silence_pynvml_deprecation`), in this
  process and, through `PYTHONWARNINGS`, in every process it starts (the `train_ppo_ray` child of compare and the
  probe, a local Ray cluster's workers, vLLM's engine processes); the worker hook sets it in every Ray worker of a
  cluster joined from elsewhere too.
- DeepSpeed's `Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.`: the
  guess DeepSpeed makes on import where it finds no CUDA. Where the actors run is decided by the driver
  (`openrlhf_ext/device.py`, said in one line), so the CPU path tells DeepSpeed (`DS_ACCELERATOR=cpu` in the CPU
  path's environment, `cpu.loopback_env`: every worker and vLLM process of a CPU run), and DeepSpeed then says
  nothing at its default level. In the driver process, which imports DeepSpeed with OpenRLHF before that decision
  and trains nothing, the line is dropped from DeepSpeed's logger (`silence_deepspeed_guess_in_driver`). A CUDA
  run's workers keep DeepSpeed's own line: there it would be a real warning.

Both are installed by `openrlhf_copo/cli/__init__.py`, before any entry point imports torch. Standard library only,
so the worker hook can call it before anything else.
"""

from __future__ import annotations

import logging
import os
import re
import warnings

#: The start of pynvml's deprecation warning (a FutureWarning), as pynvml 12-13 word it.
PYNVML_DEPRECATION = "The pynvml package is deprecated"
#: The same filter as a `PYTHONWARNINGS` entry (action:message-prefix:category): no colon in the message.
PYTHONWARNINGS_ENTRY = f"ignore:{PYNVML_DEPRECATION}:FutureWarning"
#: The start of the line DeepSpeed logs when it guesses the CPU (deepspeed/accelerator/real_accelerator.py).
DEEPSPEED_CPU_GUESS = "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it"
#: DeepSpeed's logger (deepspeed/utils/logging.py), which prints to stdout.
DEEPSPEED_LOGGER = "DeepSpeed"


def silence_pynvml_deprecation(environ=os.environ) -> None:
    """Ignore pynvml's deprecation FutureWarning in this process, and add the same filter to ``environ``'s
    `PYTHONWARNINGS` (after the entries already there, which it keeps) for the processes started from here."""
    warnings.filterwarnings("ignore", message=re.escape(PYNVML_DEPRECATION), category=FutureWarning)
    entries = [e for e in environ.get("PYTHONWARNINGS", "").split(",") if e]
    if PYTHONWARNINGS_ENTRY not in entries:
        environ["PYTHONWARNINGS"] = ",".join(entries + [PYTHONWARNINGS_ENTRY])


class _DropDeepSpeedCpuGuess(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DEEPSPEED_CPU_GUESS)


def silence_deepspeed_guess_in_driver() -> None:
    """Drop DeepSpeed's CPU-guess line from its logger in this process (the driver: it decides the device itself and
    says so). The filter sits on the logger object, which DeepSpeed configures on import and keeps: installed before,
    it holds after. Idempotent."""
    logger = logging.getLogger(DEEPSPEED_LOGGER)
    if not any(isinstance(f, _DropDeepSpeedCpuGuess) for f in logger.filters):
        logger.addFilter(_DropDeepSpeedCpuGuess())


def quiet_entry_point() -> None:
    """Both, for an entry point's process (`openrlhf_copo/cli/__init__.py`)."""
    silence_pynvml_deprecation()
    silence_deepspeed_guess_in_driver()
