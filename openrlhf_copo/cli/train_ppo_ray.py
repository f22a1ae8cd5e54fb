"""`python -m openrlhf_copo.cli.train_ppo_ray`: OpenRLHF's train_ppo_ray, with COPO.

Two entry points, each read top to bottom; which steps each runs is `driver.after_parse`:

- `main`: argv -> the arguments OpenRLHF's own `openrlhf.cli.train_ppo_ray` main hands to `train(args)`, COPO's
  flags in its parser (`driver.openrlhf_args`) -> the CLI's steps (`driver.after_parse`: refusals, warnings, the
  openrlhf and vLLM checks, patches 1-3 in this process, the device and the CPU path, then the resume guard, which
  writes copo_settings.json, and the preflight where the actors run; it returns the device decision) -> Ray started
  with COPO's settings for that device, then OpenRLHF's `train`, a run that stops ending on one line
  (`driver.run_training`, `driver.openrlhf_train`).
  With no model given it runs the CPU demo instead (`openrlhf_copo.cpu_demo.job`), after its flags are checked.
  Every other flag keeps OpenRLHF's meaning; flags are written whole (OpenRLHF's parser would also take an
  abbreviation, which the demo's "no model given" and the example scripts, reading the command line as written,
  would not see). Over a fork carrying patches/ it runs the same way (the fork's main block hands over its args;
  see `driver`). `--copo.help` prints COPO's flags alone (`config.copo_help`) before any of this: OpenRLHF is not
  imported for it.
- `load_args`: the same arguments, with the checks on the arguments alone (`driver.after_parse(args, LOAD_ARGS)`); nothing is
  written or patched, and nothing trains.
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


def load_args(argv: List[str]):
    """The validated args that `train(args)` would receive, after OpenRLHF's own adjustments, without training: the
    steps of `driver.after_parse(args, LOAD_ARGS)` only, the checks on the arguments alone (no file read, nothing
    written or patched, no cluster asked: the resume guard, preflight and device decision depend on the machine and
    the files, not on the command line).
    Used by tests and the example-script check. A refusal exits with its message (every refused setting), as
    `main`."""
    from openrlhf_copo.openrlhf_ext import driver

    try:
        args = driver.openrlhf_args(argv, PROG)
        driver.after_parse(args, driver.LOAD_ARGS, warn=_warn)
    except driver.DriverError as e:
        _fail(str(e))
    return args


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    from openrlhf_copo.openrlhf_ext.config import COPO_HELP, copo_help

    if COPO_HELP in argv:  # answered before OpenRLHF's parser is built (importing OpenRLHF takes seconds)
        print(copo_help(PROG), end="")
        raise SystemExit(0)
    from openrlhf_copo.cpu_demo import job
    from openrlhf_copo.openrlhf_ext import driver

    if job.requested(argv):
        unknown = [flag for flag in driver.unknown_flags(argv, PROG) if flag not in job.DEMO_FLAGS]
        if unknown:  # an abbreviated --actor.model_name_or_path, say: not a demo with the user's model at the end
            _fail(f"unrecognized argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: not a flag of "
                  "OpenRLHF's train_ppo_ray or COPO's (flags are written whole; --help lists them)")
        raise SystemExit(job.main(argv))
    try:
        args = driver.openrlhf_args(argv, PROG)
        decision = driver.after_parse(args, driver.CLI, warn=_warn)
    except driver.DriverError as e:
        _fail(str(e))
    driver.run_training(driver.openrlhf_train, args, PROG, decision)


if __name__ == "__main__":
    main()
