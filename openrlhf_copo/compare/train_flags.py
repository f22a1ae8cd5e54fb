"""Every train_ppo_ray command line of the tool, read by train_ppo_ray's own parser: the one the CLI parses with
(OpenRLHF's parser with COPO's flags, abbreviations refused: `driver._main_block_namespace`), so that what the tool
reads, checks and prints is what each run will take.

    given      the flags a command line gives, by their dest, with their values as the parser types them, and the
               flags the parser does not know (a misspelling, an abbreviation)
    refusals   why a whole command would be refused by the run it starts: the parser's, OpenRLHF's asserts, COPO's
               refusals and the refusals of the device the run will take (`cpu.cpu_problems`, `cpu.gpu_problems`)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

#: The program name train_ppo_ray's messages carry.
PROG = "python -m openrlhf_copo.cli.train_ppo_ray"


@dataclass(frozen=True)
class Flag:
    """One flag of a command line: as written (the flag and its values, ``--flag=value`` kept), and its value as
    train_ppo_ray's parser types it (a list for flags of several values, True for a switch)."""

    written: str
    value: object


class FlagError(ValueError):
    """A command line train_ppo_ray's parser refuses (an unknown flag, a bad value), in one line."""


@functools.lru_cache(maxsize=1)
def parser() -> argparse.ArgumentParser:
    """train_ppo_ray's parser as the CLI builds it (COPO's flags, no abbreviations), raising `argparse.ArgumentError`
    instead of exiting on a bad value. Built once (OpenRLHF's main module is imported the first time)."""
    from openrlhf_copo.openrlhf_ext import driver

    _, namespace, _ = driver._main_block_namespace(PROG)
    built = namespace["parser"]
    built.exit_on_error = False
    return built


class _Unset:
    """The value of every dest before parsing: argparse sets a default only where a dest has no value, so what is
    still unset after parsing was not given."""

    def __repr__(self) -> str:
        return "unset"


_UNSET = _Unset()


def given(argv: Sequence[str]) -> Tuple[Dict[str, Flag], List[str]]:
    """({dest: `Flag`} of the flags ``argv`` gives, the last occurrence winning as in argparse: aliases under their
    dest, ``--flag=value`` and ``--flag v1 v2`` alike; the flags the parser does not know, as written without a
    value). A bad value of a known flag raises `FlagError`."""
    p = parser()
    namespace = argparse.Namespace(**{a.dest: _UNSET for a in p._actions if a.dest != argparse.SUPPRESS})
    try:
        parsed, unknown = p.parse_known_args(list(argv), namespace)
    except argparse.ArgumentError as e:
        raise FlagError(str(e)) from None
    values = {dest: v for dest, v in vars(parsed).items() if v is not _UNSET}
    return {dest: Flag(_written(argv, dest), v) for dest, v in values.items()}, \
        [a.split("=", 1)[0] for a in unknown if a.startswith("-")]


def _written(argv: Sequence[str], dest: str) -> str:
    """The last flag of ``argv`` that sets ``dest`` and the values after it, as written."""
    options = parser()._option_string_actions
    at = max(i for i, a in enumerate(argv) if getattr(options.get(a.split("=", 1)[0]), "dest", None) == dest)
    if "=" in argv[at]:
        return argv[at]
    end = at + 1
    while end < len(argv) and not argv[end].startswith("--"):
        end += 1
    return " ".join(argv[at:end])


def dest_of(flag: str) -> str:
    """The dest of a flag train_ppo_ray knows (``--advantage_estimator``: ``algo.advantage.estimator``)."""
    return parser()._option_string_actions[flag].dest


def unknown_flags_line(unknown: Sequence[str]) -> str:
    """One line naming the flags train_ppo_ray does not know (the CLI refuses abbreviations too)."""
    return (f"train_ppo_ray does not know {', '.join(unknown)} (misspelt, or abbreviated: it takes whole flags only; "
            f"`{PROG} --help` lists them)")


def refusals(argv: Sequence[str], device_decision=None) -> List[str]:
    """Why the run of this command line would not start, each in one line, all of them (empty: it would start, as
    far as the arguments tell): the flags train_ppo_ray does not know and bad values (its parser), OpenRLHF's own
    asserts on the arguments, COPO's refusals (`config.copo_problems`), and, given the device the run takes
    (``device_decision``, a `device.DeviceDecision`; each line names it, its reason is the caller's to say), that
    device's refusals (`cpu.cpu_problems` on the CPU path,
    `cpu.gpu_problems` on CUDA). The model and data files are not read (the run's preflight reads them)."""
    from openrlhf_copo.openrlhf_ext import cpu, driver
    from openrlhf_copo.openrlhf_ext.config import copo_problems

    try:
        _, unknown = given(argv)
    except FlagError as e:
        return [f"train_ppo_ray's parser: {e}"]
    if unknown:
        return [unknown_flags_line(unknown)]
    try:
        # OpenRLHF's main block prints its advice (e.g. on the KL estimator) as it parses: not the plan's to print
        with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
            args = driver.openrlhf_args(list(argv), PROG)
    except driver.DriverError as e:
        return [str(e)]
    except SystemExit:  # argparse's exit for what `given` did not catch: its last line says why
        return [(err.getvalue().strip().splitlines() or ["train_ppo_ray's parser refused the command"])[-1]]
    found = copo_problems(args)
    if device_decision is not None:
        on_device = cpu.cpu_problems(args) if device_decision.cpu_path else cpu.gpu_problems(args)
        where = "the CPU path" if device_decision.cpu_path else "CUDA"
        found += [f"on {where}: {p}" for p in on_device]
    return found


def value(argv: Sequence[str], dest: str, default: Optional[object] = None) -> object:
    """The value of ``dest`` that ``argv`` gives (as the parser types it), else ``default``."""
    flags, _ = given(argv)
    return flags[dest].value if dest in flags else default
