"""One comparison run's life as a process: its training child and the lock on its folder.

    run_child      the train_ppo_ray child in its own process group, ended with its parent (PR_SET_PDEATHSIG) and
                   with the group on exit, SIGTERM or SIGINT; its pid in the folder's lock while it runs
    RunLock        refuses to touch a run folder whose recorded child is still alive (pid and start time)

Resuming from a run's checkpoints and checking its steps: `openrlhf_copo.compare.runner`.

Why: a comparison at the paper's size is ~45 GPU-hours of runs (docs/gpu-recipe.md); a crash at step 59 of 60
must not redo the run, a killed `compare` must not leave a training child running, and a rerun must not delete
the files of a run that is still going.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from openrlhf_copo.files import write_atomic

#: The lock file in a run folder: the pid and start time of the training child while it runs.
LOCK = "run.lock"


def process_start(pid: int) -> Optional[str]:
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat, clock ticks since boot): with the pid, what
    names one process, as a pid is reused; None where it is not running or there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def alive(pid: int, start: Optional[str]) -> bool:
    """Whether process ``pid`` runs and is the one that started at ``start`` (where /proc tells it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = process_start(pid)
    return start is None or now is None or now == start


class RunLock:
    """A run folder's lock: `LOCK` holds the training child's pid and start time while it runs."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK

    def refuse_if_running(self) -> None:
        """Stops (one line naming the folder and the pid) when the recorded child is still alive; a stale lock (the
        child gone, or its pid now another process) is removed."""
        if not self.path.exists():
            return
        try:
            held = json.loads(self.path.read_text())
        except ValueError:
            held = {}
        if "pid" in held and alive(int(held["pid"]), held.get("start")):
            raise SystemExit(f"{self.path.parent}: its run is still going (pid {held['pid']}, {self.path}): wait for "
                             f"it or stop it (kill -- -{held['pid']}) before rerunning it")
        self.path.unlink(missing_ok=True)

    def hold(self, pid: int) -> None:
        write_atomic(self.path, json.dumps({"pid": pid, "start": process_start(pid), "parent": os.getpid()}))

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, however it dies (even SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # not Linux: the process group is still ended on exit and on SIGTERM / SIGINT
        pass


def end_group(child: subprocess.Popen, grace: float = 30.0) -> None:
    """The child's process group ended: SIGTERM, then SIGKILL after ``grace`` seconds (Ray's driver shuts its
    local cluster down on SIGTERM); whatever of the group outlives the child is killed."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if child.poll() is not None:
            break
        try:
            os.killpg(child.pid, sig)
            child.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(cmd: Sequence[str], log: Path, lock: RunLock, env: Optional[dict] = None, append: bool = False) -> int:
    """``cmd``'s exit code, its output in ``log``: started in its own process group (a Ctrl-C of the terminal
    reaches only this process, which ends the group), ended with this process (`_die_with_parent`), and with its
    group when this process exits or gets SIGTERM or SIGINT. Its pid is in ``lock`` while it runs."""
    previous = {}

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}") if signum == signal.SIGINT else SystemExit(128 + signum)

    with open(log, "a" if append else "w") as out:
        child = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                 preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        try:
            lock.hold(child.pid)
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, stop)
            return child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            end_group(child)
            lock.release()
