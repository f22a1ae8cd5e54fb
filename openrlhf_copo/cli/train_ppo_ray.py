"""`python -m openrlhf_copo.cli.train_ppo_ray`: OpenRLHF's train_ppo_ray, with COPO.

argv -> OpenRLHF's own `openrlhf.cli.train_ppo_ray` main (its parser lives under `if __name__ ==
"__main__"`, so it is run, not imported), with the driver steps of `openrlhf_copo.openrlhf_ext.driver`
(the COPO flags, refusals, resume guard, preflight, the device decision and the CPU path, the worker hook,
the one-line ending; a fork carrying patches/ runs the same steps). With no model given it runs the embedded
CPU demo instead (`openrlhf_copo.cpu_demo.job`). Every other flag keeps OpenRLHF's meaning.
"""

from __future__ import annotations

import runpy
import sys
from typing import List, Optional

OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"
PROG = "python -m openrlhf_copo.cli.train_ppo_ray"


def _fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _run(argv: List[str], stop_before_training: bool) -> dict:
    """OpenRLHF's own main, with the driver steps of `openrlhf_copo.openrlhf_ext.driver`."""
    from openrlhf_copo.openrlhf_ext import driver

    captured: dict = {}
    saved_argv = sys.argv
    sys.argv = [PROG] + list(argv)
    try:
        with driver.openrlhf_main_hooks(captured, stop_before_training=stop_before_training, prog=PROG, warn=_warn):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__", alter_sys=False)
    except driver.StopBeforeTraining:
        pass
    except driver.DriverError as e:
        _fail(str(e))
    except Exception as e:  # a dead Ray worker, an out-of-memory, ...: the traceback, then one line
        if stop_before_training:
            raise
        driver.end_run(e, captured.get("args"), PROG)
    finally:
        sys.argv = saved_argv
    return captured


def load_args(argv: List[str]):
    """The validated, hierarchized args that `train(args)` would receive, without training (the CPU
    path's checks and adaptations are left out: they depend on the machine, not on the command line).

    Runs OpenRLHF's parser and its post-parse checks with the COPO hooks, then stops where
    `train(args)` begins. Used by tests and the example-script check.
    """
    return _run(argv, stop_before_training=True)["args"]


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    from openrlhf_copo.cpu_demo import job

    if job.requested(argv):
        raise SystemExit(job.main(argv))
    _run(argv, stop_before_training=False)


if __name__ == "__main__":
    main()
