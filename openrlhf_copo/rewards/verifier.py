"""math-verify behind a hard deadline, safe to call from threads, async code and Ray actors.

OpenRLHF calls the reward function through `asyncio.to_thread` inside a Ray actor. math-verify's
own timeouts use `signal.alarm`, which only works in a process's main thread, and without them
a pathological answer (a huge power tower, a deeply nested LaTeX) can hang sympy for minutes.

So math-verify runs in child processes started with `python -m openrlhf_copo.rewards.verifier`
(an importable module: OpenRLHF loads reward files by path, and nothing defined in such a file
can be sent to another process). Each child answers one JSON line per request on its stdout.
The parent waits at most `timeout` seconds; past that it kills the child (and the stuck
computation with it), starts a fresh one, and reports the request as timed out. Inside the
child, math-verify's own signal timeouts are on too, as a first, gentler bound.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

__all__ = ["Verdict", "VerifierPool", "get_pool", "canonical_form", "judge", "label_parses"]

DEFAULT_TIMEOUT_S = float(os.environ.get("COPO_VERIFY_TIMEOUT", "10"))
DEFAULT_WORKERS = int(os.environ.get("COPO_VERIFY_WORKERS", "2"))
STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Verdict:
    """What math-verify said about one (answer, label) pair.

    ``canon`` is the canonical form of the predicted answer (None if it did not parse);
    ``status`` is ``ok``, ``timeout`` (the deadline killed the worker) or ``error`` (the worker
    died or answered garbage).
    """

    correct: bool
    canon: Optional[str]
    gold_ok: bool
    status: str = "ok"


# ---------------------------------------------------------------------------------------------
# Child side: runs math-verify. Imported lazily: the parent never imports sympy for this.


def canonical_form(expr) -> str:
    """A string that is equal for mathematically equal answers (the basis of the answer id).

    Real or complex numbers become their value to 10 significant digits (`1/2`, `0.5`,
    `\\frac{1}{2}` -> `num:0.5`; `\\sqrt{8}`, `2\\sqrt{2}` -> `num:2.828427125`); other sympy
    objects (sets, intervals, equations, symbolic expressions) their `srepr` after `simplify`;
    anything else its stripped text.
    """
    import sympy

    if isinstance(expr, str):
        return "str:" + "".join(expr.split())
    try:
        if getattr(expr, "is_number", False):
            value = complex(sympy.N(expr, 30))
            re_part, im_part = (f"{v:.10g}" for v in (value.real, value.imag))
            re_part = "0" if re_part == "-0" else re_part
            if im_part in ("0", "-0"):
                return "num:" + re_part
            return f"num:{re_part}{'+' if not im_part.startswith('-') else ''}{im_part}j"
        return "expr:" + sympy.srepr(sympy.simplify(expr))
    except Exception:
        return "str:" + "".join(str(expr).split())


class _CanonTimeout(Exception):
    pass


def _bounded_canonical_form(expr, seconds: int) -> str:
    """`canonical_form` under a SIGALRM bound (child's main thread only): evaluating a huge
    power tower numerically would otherwise outlive the whole deadline."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return canonical_form(expr)

    def on_alarm(signum, frame):
        raise _CanonTimeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, seconds))
    try:
        return canonical_form(expr)
    except _CanonTimeout:
        return "str:" + "".join(str(expr).split())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _parse(text: str, inner_timeout: int):
    from math_verify import parse

    # Try it as the content of a box first (forces LaTeX reading of "\frac12", "1/2", ...),
    # then as free text ("72", "$x=3$").
    parsed = parse("\\boxed{" + text + "}", parsing_timeout=inner_timeout)
    return parsed if parsed else parse(text, parsing_timeout=inner_timeout)


def judge(pred: Optional[str], gold: str, inner_timeout: int = 5) -> Tuple[bool, Optional[str], bool]:
    """(correct, canonical form of pred, gold parsed) for one extracted answer and its label."""
    from math_verify import verify

    gold_parsed = _parse(gold, inner_timeout) if gold else []
    # math-verify falls back to the raw string when nothing parses: a label is "ok" only if it
    # became a mathematical object (a text label still gets string comparison, but is flagged).
    gold_ok = any(not isinstance(g, str) for g in gold_parsed)
    if pred is None:
        return False, None, gold_ok
    pred_parsed = _parse(pred, inner_timeout)
    canon = _bounded_canonical_form(pred_parsed[0], inner_timeout) if pred_parsed else None
    if not gold_parsed or not pred_parsed:
        return False, canon, gold_ok
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=inner_timeout)), canon, gold_ok


@functools.lru_cache(maxsize=None)
def label_parses(label: str) -> bool:
    """The reward's test for a gold answer, in this process: math-verify turns it into a mathematical
    object rather than falling back to the raw string. (Main thread only: math-verify's own
    timeouts use signals; threaded callers use `get_pool().verify(None, label).gold_ok`.)"""
    return judge(None, label)[2]


def _child_main() -> None:
    # The protocol owns the real stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    import math_verify  # noqa: F401  (import cost paid before "ready")

    inner = max(1, int(DEFAULT_TIMEOUT_S // 4))
    out.write('{"ready": true}\n')
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req.get("op") == "sleep":  # test hook: a computation that never finishes in time
                time.sleep(float(req["seconds"]))
            correct, canon, gold_ok = judge(req.get("pred"), req.get("gold", ""), inner)
            resp = {"correct": correct, "canon": canon, "gold_ok": gold_ok}
        except Exception as e:  # a bad answer must not kill the worker
            resp = {"correct": False, "canon": None, "gold_ok": False, "error": repr(e)[:200]}
        out.write(json.dumps(resp) + "\n")


# ---------------------------------------------------------------------------------------------
# Parent side.


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openrlhf_copo.rewards.verifier"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        if self._read(STARTUP_TIMEOUT_S) is None:
            self.kill()
            raise RuntimeError(
                f"math-verify worker ({sys.executable} -m openrlhf_copo.rewards.verifier) did not start within "
                f"{STARTUP_TIMEOUT_S:.0f}s: is math-verify[antlr4_13_2] installed in this environment?"
            )

    def _read(self, timeout: float) -> Optional[dict]:
        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, timeout))
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            return None
        try:
            return json.loads(line)
        except ValueError:
            return None

    def ask(self, req: dict, timeout: float) -> Optional[dict]:
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._read(timeout)

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:
            pass


class VerifierPool:
    """A few math-verify child processes, each call bounded by ``timeout`` seconds.

    Thread-safe: concurrent callers each borrow a free worker. A worker that misses the
    deadline or dies is killed and replaced; its caller gets a ``timeout`` / ``error`` verdict.
    """

    def __init__(self, workers: int = DEFAULT_WORKERS, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout = timeout
        self._free: "queue.Queue[Optional[_Worker]]" = queue.Queue()
        self._all: List[_Worker] = []
        self._lock = threading.Lock()
        self.restarts = 0
        for _ in range(max(1, workers)):
            self._free.put(None)  # started on first use

    def _request(self, req: dict) -> Tuple[Optional[dict], str]:
        worker = self._free.get()
        try:
            if worker is None:
                worker = _Worker()
                with self._lock:
                    self._all.append(worker)
            resp = worker.ask(req, self.timeout)
            if resp is None:
                status = "timeout" if worker.proc.poll() is None else "error"
                worker.kill()
                with self._lock:
                    self._all.remove(worker)
                    self.restarts += 1
                worker = None
                return None, status
            return resp, "ok"
        finally:
            self._free.put(worker)

    def verify(self, pred: Optional[str], gold: str) -> Verdict:
        resp, status = self._request({"pred": pred, "gold": gold})
        if resp is None:
            return Verdict(False, None, True, status)
        return Verdict(bool(resp["correct"]), resp.get("canon"), bool(resp["gold_ok"]),
                       "error" if "error" in resp else "ok")

    def close(self) -> None:
        with self._lock:
            for w in self._all:
                w.kill()
            self._all.clear()


_POOL: Optional[VerifierPool] = None
_POOL_PID: Optional[int] = None
_POOL_LOCK = threading.Lock()


def get_pool() -> VerifierPool:
    """The process-wide pool (a forked child gets its own)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL, _POOL_PID = VerifierPool(), os.getpid()
            atexit.register(_POOL.close)
        return _POOL


if __name__ == "__main__":
    _child_main()
