"""The processes a user's command starts, ended with it, and the locks on the folders it writes.

    child_process        a command run as a child in a session of its own, its output in a log; when the block ends,
                         however it ends (done, an error, SIGTERM or SIGINT to this process), the child and every
                         process below it are ended (`end_group`); if this process is killed outright (SIGKILL), the
                         kernel sends the child SIGTERM (PR_SET_PDEATHSIG, `_die_with_parent`)
    run_child            the same, waited for: the command's exit code (compare's training runs, the probe's run)
    ending_children      for a process whose children a library starts (vLLM's engine core in the evaluation): the
                         processes started below it during the block are ended when the block ends
    stopping_on_signals  SIGTERM and SIGINT raise `Stopped` in the main thread while the block runs
    end_group            a child, its process group and every process seen below it, ended
    FolderLock           an OS lock on a folder (filelock), held while this process acts there; a second process is
                         refused at once, naming the folder and the pid holding it
    RunLock              a run folder's lock, which also records the run's training child
    process_start, alive a process named by its pid and start time (psutil): pids are reused

Who uses it: the CPU demo job (`cpu_demo.job`), `compare` and benchmarks/regimes.py (`compare.run_one`), the probe
(`probe.run`) and the evaluation (`cli.evaluate`). Why: schedulers stop a job with SIGTERM to the process they started
(Slurm, Kubernetes, `timeout`, `kill PID`), whose default action ends that process alone, and a terminal's Ctrl-C
reaches only its foreground process group, which a child in a session of its own is not in. A training child and
its local Ray cluster (13-17 processes: gcs_server, raylet, the actors) must not outlive the command that started
them. A training child ended by SIGTERM stops its Ray cluster itself (Ray's driver exits on SIGTERM and shuts its
local cluster down); its last complete checkpoint is what DeepSpeed's `latest` names, which a rerun goes on from.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import filelock
import psutil

from openrlhf_copo.files import write_atomic

#: Seconds a child has, after SIGTERM to its process group, to end before SIGKILL. Ray's driver shuts its local
#: cluster down within a few seconds of SIGTERM; a checkpoint being written is cut short either way, and DeepSpeed's
#: `latest` still names the last complete one.
GRACE_S = 30.0
#: Seconds a process seen below the child that outlived it has, after SIGTERM, before SIGKILL.
LEFT_S = 5.0
POLL_S = 0.2
#: The signals that stop a command: a scheduler's (SIGTERM) and a terminal's Ctrl-C (SIGINT).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


# --- a process named by pid and start time ---

def process_start(pid: int) -> Optional[float]:
    """The start time of process ``pid`` (seconds since the epoch, psutil's `create_time`): with the pid, what names one
    process, as a pid is reused; None where no such process runs."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def running(process: psutil.Process) -> bool:
    """Whether ``process`` (the one psutil saw, by pid and start time) still runs: a zombie has ended."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def alive(pid: int, start: Optional[float]) -> bool:
    """Whether process ``pid`` runs and is the one that started at ``start`` (any process of that pid if None)."""
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return False
    if not running(process):
        return False
    return start is None or process.create_time() == start


# --- stopping on a signal, ending what was started ---

class Stopped(SystemExit):
    """Raised in the main thread by SIGTERM or SIGINT while `stopping_on_signals` holds: the `finally`s that end the
    children run, and the command exits with 128 + the signal's number, as a shell reports a process the signal
    ended. A `SystemExit`, so that no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _set_handlers(handler) -> Dict[int, object]:
    """``handler`` for each of STOP_SIGNALS not ignored (a command started in the background with SIGINT ignored keeps
    it ignored), in the main thread (the only one Python lets set handlers); the previous handlers."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, handler)
    return previous


def _restore_handlers(previous: Dict[int, object]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: a handler set outside Python


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT raise `Stopped` in the main thread. Why: Python's default for SIGTERM
    ends the process at once, running no `finally`, so its children run on."""
    def stop(signum, frame):
        raise Stopped(signum)

    previous = _set_handlers(stop)
    try:
        yield
    finally:
        _restore_handlers(previous)


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT ignored while the block runs: a second Ctrl-C must not cut short the ending of a tree that
    has begun (it is bounded: `GRACE_S` + `LEFT_S`); SIGKILL still ends this process, and its child then by
    PR_SET_PDEATHSIG."""
    previous = _set_handlers(signal.SIG_IGN)
    try:
        yield
    finally:
        _restore_handlers(previous)


def _tree(pid: int) -> List[psutil.Process]:
    """Process ``pid`` and every process below it, as psutil sees them now ([] where it has ended)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def end_processes(processes: Sequence[psutil.Process], grace: float = LEFT_S) -> None:
    """Each of ``processes`` that still runs ended: SIGTERM, then SIGKILL to those left after ``grace`` seconds."""
    left = [p for p in processes if running(p)]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        for p in left:
            try:
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        deadline = time.monotonic() + wait
        while (left := [p for p in left if running(p)]) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if not left:
            return


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(child: subprocess.Popen, grace: float = GRACE_S) -> None:
    """``child`` and every process below it ended. SIGTERM to the child alone first, with up to ``grace`` seconds to
    exit: a training child is Ray's driver, which shuts its local cluster down in order on SIGTERM (the cluster's
    processes ended under it instead, a driver still in `ray.init` waits out its calls to a GCS that is gone: 30 s
    and more). Then SIGTERM to whatever is left of its process group (it leads one: `child_process` starts it in a
    session of its own) and of the processes seen below it meanwhile (one may have left the group: the reward
    verifier's workers start sessions of their own), and SIGKILL to those left after `LEFT_S`."""
    seen = {p.pid: p for p in _tree(child.pid)}  # a psutil.Process keeps its start time: a reused pid is not it
    if child.poll() is None:
        try:
            child.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while child.poll() is None and time.monotonic() < deadline:
        seen.update((p.pid, p) for p in _tree(child.pid) if p.pid not in seen)
        time.sleep(POLL_S)
    seen.update((p.pid, p) for p in _tree(child.pid) if p.pid not in seen)
    _signal_group(child.pid, signal.SIGTERM)
    end_processes(list(seen.values()))
    _signal_group(child.pid, signal.SIGKILL)  # a process of the group that none saw below the child
    try:
        child.wait(timeout=LEFT_S)
    except subprocess.TimeoutExpired:
        pass


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, however it dies (even SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # not Linux: the child is still ended on exit and on SIGTERM / SIGINT
        pass


@contextmanager
def child_process(cmd: Sequence[str], log: Path, lock: Optional["FolderLock"] = None, env: Optional[dict] = None,
                  append: bool = False) -> Iterator[subprocess.Popen]:
    """``cmd`` running as a child, its output in ``log`` (appended to if ``append``), for the block's duration: started
    in a session of its own (a Ctrl-C of the terminal reaches only this process, which then ends the child), ended
    with this process (`_die_with_parent`), and with its whole tree when the block ends, however it ends: SIGTERM and
    SIGINT raise `Stopped` meanwhile (`stopping_on_signals`). With ``lock``, that lock is held meanwhile, recording
    the child's pid (`FolderLock.hold`)."""
    with stopping_on_signals():
        if lock is not None:
            lock.acquire()
        try:
            with open(log, "a" if append else "w") as out:
                child = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
                try:
                    if lock is not None:
                        lock.hold(child.pid)
                    yield child
                finally:
                    with _signals_held():
                        end_group(child)
        finally:
            if lock is not None:
                lock.release()


def run_child(cmd: Sequence[str], log: Path, lock: Optional["FolderLock"], env: Optional[dict] = None,
              append: bool = False) -> int:
    """``cmd``'s exit code, its output in ``log``: run as `child_process` runs it (ended with this process and on
    SIGTERM or SIGINT, with its whole tree), ``lock`` (if any) held meanwhile with the child's pid in it."""
    with child_process(cmd, log, lock, env=env, append=append) as child:
        return child.wait()


def _resource_tracker() -> Optional[int]:
    """The pid of this process's multiprocessing resource tracker, if it started one. It ignores SIGTERM and SIGINT
    by design, and ends by itself when this process ends, after unlinking the shared memory its users left
    (vLLM's message queues): not one to kill."""
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_pid", None)  # the stdlib's one tracker per process


@contextmanager
def ending_children(grace: float = GRACE_S) -> Iterator[None]:
    """For a process whose children a library starts (vLLM's engine core): SIGTERM and SIGINT raise `Stopped` while
    the block runs, and the processes that were started below this one during the block and still run when it ends
    get SIGTERM, and SIGKILL after ``grace`` seconds. Those below it before the block are left alone, and so is this
    process's multiprocessing resource tracker, which ends with it (`_resource_tracker`)."""
    me = psutil.Process()
    before = {(p.pid, p.create_time()) for p in me.children(recursive=True)}
    with stopping_on_signals():
        try:
            yield
        finally:
            with _signals_held():
                before.add((_resource_tracker(), None))
                started = []
                for p in me.children(recursive=True):
                    try:
                        if (p.pid, p.create_time()) not in before and (p.pid, None) not in before:
                            started.append(p)
                    except psutil.NoSuchProcess:
                        pass
                end_processes(started, grace)


# --- locks on folders ---

class FolderLock:
    """An OS lock on a folder (filelock's FileLock: flock where the file system has it), held by this process while it
    acts there. Taking it is one atomic step: a second process asking for it is refused at once, naming the folder
    and the pid that holds it; the OS lets go when the holder ends, however it ends, so no lock is left stale.

    Files, in the folder: ``<name>.lock``, the locked file (left in place: a lock file removed while another process
    waits on it would let two hold it), and ``<name>.lock.json``, who holds it: this process's pid and start time,
    and the pid and start time of the child it runs there (`hold`); removed on release. A record whose child still
    runs while nobody holds the lock (its command was killed outright and the child has not ended yet) is refused too.

    Nested `acquire` and `release` in one process count: the lock is let go at the last release."""

    def __init__(self, directory: Path, name: str, busy: str, then: str):
        """``busy``: what the holder is doing there, in the refusal ("another compare is running there");
        ``then``: what the refused one should not do before it ends ("before running another")."""
        self.directory = Path(directory)
        self.path = self.directory / f"{name}.lock"
        self.record = self.directory / f"{name}.lock.json"
        self.busy, self.then = busy, then
        self._lock: Optional[filelock.FileLock] = None  # made at the first acquire; let go if garbage-collected
        self._depth = 0

    @property
    def files(self) -> tuple:
        """The names of the lock's files in the folder: whoever clears the folder leaves them."""
        return self.path.name, self.record.name

    def holder(self) -> dict:
        """The record of who holds the lock (or held it last, if it was not released): {} where there is none."""
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}

    def refusal(self, pid, kill: str) -> str:
        return (f"{self.directory}: {self.busy} (pid {pid}, {self.path}): wait for it or stop it ({kill}) "
                f"{self.then}")

    def acquire(self) -> None:
        """Takes the lock, or stops (`SystemExit`, one line naming the folder and the pid) where another process holds
        it, or where the last holder's child still runs."""
        if self._depth:
            self._depth += 1
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._lock is None:
            self._lock = filelock.FileLock(str(self.path), timeout=0)  # timeout 0: refused at once, no waiting
        try:
            self._lock.acquire()
        except filelock.Timeout:
            pid = self.holder().get("pid", "unknown")
            raise SystemExit(self.refusal(pid, f"kill {pid}")) from None
        held = self.holder()
        if "child" in held and alive(int(held["child"]), held.get("child_start")):
            self._lock.release()
            raise SystemExit(self.refusal(held["child"], f"kill -- -{held['child']}"))
        self._depth = 1
        self._write()

    def hold(self, child: int) -> None:
        """Records ``child`` (a pid) as the process this holder runs in the folder; the lock must be held."""
        if not self._depth:
            raise RuntimeError(f"{self.path}: not held by this process")
        self._write(child)

    def release(self) -> None:
        """Lets go of one `acquire` (the lock itself at the last one, its record removed); the child recorded by
        `hold` is forgotten."""
        if not self._depth:
            return
        self._depth -= 1
        if self._depth:
            self._write()
            return
        self.record.unlink(missing_ok=True)
        self._lock.release()

    def _write(self, child: Optional[int] = None) -> None:
        record = {"pid": os.getpid(), "start": process_start(os.getpid())}
        if child is not None:
            record.update(child=child, child_start=process_start(child))
        write_atomic(self.record, json.dumps(record))

    # the old name, which `compare.run_one` calls
    refuse_if_running = acquire

    def __enter__(self) -> "FolderLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


#: A run folder's lock file (and, with ".json", its record).
LOCK = "run.lock"


class RunLock(FolderLock):
    """A run folder's lock (`LOCK`): held while a command prepares, runs and records the run there, with the run's
    training child in its record while it runs. A rerun refuses to touch a folder whose run is still going."""

    def __init__(self, directory: Path):
        super().__init__(directory, Path(LOCK).stem, "its run is still going", "before rerunning it")
