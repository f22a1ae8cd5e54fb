"""`python -m openrlhf_copo.cli.train_ppo_ray`: OpenRLHF's train_ppo_ray, with COPO.

argv -> OpenRLHF's own `openrlhf.cli.train_ppo_ray` main (its parser lives under `if __name__ ==
"__main__"`, so its block is run, not imported: `driver.run_openrlhf_main`), with the driver steps of
`openrlhf_copo.openrlhf_ext.driver` (the COPO flags; then, on the arguments OpenRLHF hands to `train(args)`, the
refusals, resume guard, preflight, the device decision and the CPU path; the worker hook at `ray.init`; the one-line
ending; a fork carrying patches/ runs the same steps). With no model given it runs the CPU demo instead
(`openrlhf_copo.cpu_demo.job`). Every other flag keeps OpenRLHF's meaning.
"""

from __future__ import annotations

import sys
from typing import List, Optional

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
    try:
        driver.run_openrlhf_main(argv, captured, prog=PROG, stop_before_training=stop_before_training, warn=_warn)
    except driver.DriverError as e:
        _fail(str(e))
    except Exception as e:  # a dead Ray worker, an out-of-memory, ...: the traceback, then one line
        if stop_before_training:
            raise
        driver.end_run(e, captured.get("args"), PROG)
    return captured


def load_args(argv: List[str]):
    """The validated args that `train(args)` would receive, after OpenRLHF's own adjustments, without training (the
    CPU path's checks and adaptations are left out: they depend on the machine, not on the command line).

    Runs OpenRLHF's parser, its post-parse adjustments and COPO's checks, then stops where `train(args)` begins.
    Used by tests and the example-script check.
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
