"""math-verify behind a hard deadline, safe to call from threads, async code and Ray actors.

OpenRLHF calls the reward function through `asyncio.to_thread` inside a Ray actor. math-verify's
own timeouts use `signal.alarm`, which only works in a process's main thread, and without them
a pathological answer (a huge power tower, a deeply nested LaTeX) can hang sympy for minutes.

So math-verify runs in child processes started with `python -m openrlhf_copo.rewards.verifier`
(an importable module: OpenRLHF loads reward files by path, and nothing defined in such a file
can be sent to another process). Each child answers one JSON line per request on its stdout.
The parent waits at most `timeout` seconds; past that it kills the child (and the stuck
computation with it), starts a fresh one, and reports the request as timed out. Inside the
child, math-verify's own per-call time limits are off (on a loaded machine they ran out and came back
as an empty parse or a False, indistinguishable from an answer); one alarm per request, a little under
the deadline, makes the worker answer "timeout" instead. Either way the verdict is flagged
`copo_verify_failed` and never cached: a verdict depends on the answer, never on the machine's load.
"""

from __future__ import annotations

import atexit
import collections
import functools
import json
import logging
import os
import queue
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import List, Optional, Tuple

__all__ = ["Verdict", "VerifierPool", "VerifierUnavailable", "get_pool", "reset_pool", "canonical_form", "judge",
           "label_parses"]

DEFAULT_TIMEOUT_S = float(os.environ.get("COPO_VERIFY_TIMEOUT", "10"))
DEFAULT_WORKERS = int(os.environ.get("COPO_VERIFY_WORKERS", "2"))
STARTUP_TIMEOUT_S = 120.0
#: A worker gives up on a request after this share of the deadline and says so (flagged, and the worker lives
#: on); the parent kills one that has not answered by the deadline itself.
CHILD_BUDGET = 0.8
#: Verdicts kept per process (a few MB): a rollout step of 512 prompts x 6 fits many times over.
CACHE_SIZE = 100_000

logger = logging.getLogger("openrlhf_copo.rewards")


@dataclass(frozen=True)
class Verdict:
    """What math-verify said about one (answer, label) pair.

    ``canon`` is the canonical form of the predicted answer (None if it did not parse);
    ``status`` is ``ok``, ``timeout`` (the deadline killed the worker), ``error`` (the worker
    died or answered garbage) or ``unavailable`` (no worker can start here: math-verify missing).
    """

    correct: bool
    canon: Optional[str]
    gold_ok: bool
    status: str = "ok"


# ---------------------------------------------------------------------------------------------
# Child side: runs math-verify. Imported lazily: the parent never imports sympy for this.

#: Exact arithmetic gives up past this many bits (10^{20}+1 is exact; 9^{9^9} is not attempted).
MAX_EXACT_BITS = 4096
#: Significant digits of the value that identifies an irrational or complex number.
APPROX_DIGITS = 30


def _exact_value(expr):
    """The exact rational value of a numeric sympy expression built from integers, decimals, +, *
    and rational powers, or None (irrational, too large, or not such an expression).

    Bounded: every intermediate stays under MAX_EXACT_BITS, so a power tower is refused, not
    computed. Decimals count as written (`0.1` is 1/10; math-verify keeps the digits)."""
    import sympy

    if expr.is_Rational:
        return expr if abs(expr.p).bit_length() + expr.q.bit_length() <= MAX_EXACT_BITS else None
    if expr.is_Float:
        return sympy.Rational(str(expr))
    if isinstance(expr, sympy.UnevaluatedExpr):  # math-verify wraps the 1/100 of "42\\%" in one
        return _exact_value(expr.args[0])
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        total = sympy.Integer(0) if expr.is_Add else sympy.Integer(1)
        for arg in expr.args:
            v = _exact_value(arg)
            if v is None:
                return None
            total = total + v if expr.is_Add else total * v
            if abs(total.p).bit_length() + total.q.bit_length() > MAX_EXACT_BITS:
                return None
        return total
    if isinstance(expr, sympy.Pow):
        base, exp = _exact_value(expr.base), _exact_value(expr.exp)
        if base is None or exp is None or (base == 0 and exp < 0):
            return None
        size = (abs(base.p).bit_length() + base.q.bit_length()) * abs(exp.p)
        if size > MAX_EXACT_BITS * max(1, exp.q):
            return None
        if exp.q == 1:
            return base ** exp.p
        if base < 0:
            return None
        p_root, p_exact = sympy.integer_nthroot(int(base.p), int(exp.q))
        q_root, q_exact = sympy.integer_nthroot(int(base.q), int(exp.q))
        return sympy.Rational(p_root, q_root) ** exp.p if p_exact and q_exact else None
    return None


def _too_large_to_evaluate(expr) -> bool:
    """A numeric expression whose value cannot be approximated in bounded time: a power whose exponent is not a
    small exact number (`9^{9^{9^9}}`, `2^{10^{6}}`). Decided from its structure, never from a clock, so the same
    answer gets the same id on a quiet machine and on a loaded one."""
    import sympy

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow):
            exp = _exact_value(node.exp)
            if exp is None or abs(exp) > 10**4:
                return True
    return False


def _number_key(expr) -> Optional[str]:
    """`num:p/q` for a number with an exact rational value, `num~<30 digits>` for another real or complex
    number (sqrt, pi), `numexpr:<structure>` for a number too large to evaluate, None if ``expr`` is not a number."""
    import sympy

    if not getattr(expr, "is_number", False):
        return None
    exact = _exact_value(expr)
    if exact is not None:
        return number_canon(Fraction(int(exact.p), int(exact.q)))
    expr = expr.xreplace({u: u.args[0] for u in expr.atoms(sympy.UnevaluatedExpr)})
    if _too_large_to_evaluate(expr):
        return "numexpr:" + sympy.srepr(expr)
    re_part, im_part = sympy.N(expr, APPROX_DIGITS + 10).as_real_imag()
    if not (re_part.is_Number and im_part.is_Number):
        return None
    scale = max(abs(re_part), abs(im_part), 1)
    parts = [sympy.Float(v, APPROX_DIGITS) if abs(v) > scale * sympy.Float(10) ** -APPROX_DIGITS else 0
             for v in (re_part, im_part)]
    text = f"num~{parts[0]}" if parts[1] == 0 else f"num~{parts[0]}{'+' if parts[1] > 0 else ''}{parts[1]}j"
    return text


class NotAnId(ValueError):
    """A parsed answer that cannot identify an answer: a truth value, an infinity or nan (`12:00` reads as 12/0)."""


def is_error_value(expr) -> bool:
    """True for what math-verify makes of text that is not a quantity: a truth value (`6 \\times 7 = 42` before we
    take its final side, `1 < 2`), zoo (`12:00` reads as 12/0), nan, or an expression containing zoo or nan.
    (Truth values inside an object are its flags, as an Interval's `left_open`, not errors.)"""
    import sympy
    from sympy.logic.boolalg import BooleanAtom

    if isinstance(expr, BooleanAtom):
        return True
    return isinstance(expr, sympy.Basic) and (expr.has(sympy.zoo) or expr.has(sympy.nan))


def _canon(expr) -> str:
    """`canonical_form` without the fallback (raises NotAnId)."""
    import sympy

    if is_error_value(expr):
        raise NotAnId(str(expr))
    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        return _canon(expr.rhs)
    number = _number_key(expr)
    if number is not None:
        return number
    # Containers element by element, so a decimal inside is exact too: (1, 4.5) and (1, \frac92) are one id.
    if isinstance(expr, sympy.Tuple) or isinstance(expr, tuple):
        return "(" + ",".join(_canon(a) for a in expr) + ")"
    if isinstance(expr, sympy.FiniteSet):
        return "{" + ",".join(sorted(_canon(a) for a in expr.args)) + "}"
    if isinstance(expr, sympy.Interval):
        return ("(" if expr.left_open else "[") + _canon(expr.start) + "," + _canon(expr.end) + (
            ")" if expr.right_open else "]")
    if isinstance(expr, sympy.Union):
        return "U{" + ",".join(sorted(_canon(a) for a in expr.args)) + "}"
    if isinstance(expr, sympy.MatrixBase):
        return "M[" + ";".join(",".join(_canon(expr[i, j]) for j in range(expr.cols)) for i in range(expr.rows)) + "]"
    simplified = sympy.simplify(expr)
    if is_error_value(simplified):
        raise NotAnId(str(expr))
    return "expr:" + sympy.srepr(simplified)


def canonical_form(expr, text: Optional[str] = None) -> str:
    """A string that is equal for mathematically equal answers (the basis of the answer id).

    - Numbers with a rational value, exactly: `1/2`, `0.5`, `\\frac{1}{2}` -> `num:1/2`; `3.0` -> `num:3`;
      `10^{20}+1` -> `num:100000000000000000001` (so near-equal numbers never merge);
    - other real or complex numbers by their value to 30 significant digits: `\\sqrt{8}` and
      `2\\sqrt{2}` -> `num~2.82842712474619009760337744842`;
    - a percentage is its own kind (`pct:1/2` for `50\\%`): math-verify calls `50\\%` equal to both 50 and 0.5,
      which are not equal to each other, so it may share an id with neither;
    - tuples, sets, intervals and matrices element by element; other expressions by `srepr` after `simplify`;
    - never a truth value or an error value (True, False, zoo, nan): those, and anything math-verify could not
      read, are identified by their text without white space (``text``, else the expression's string).
    """
    fallback = "str:" + "".join((text if text is not None else str(expr)).split())
    if isinstance(expr, str):
        return "str:" + "".join(expr.split())
    try:
        form = _canon(expr)
    except NotAnId:
        return fallback
    except Exception:  # sympy's own errors on odd input: the text still identifies the answer
        return fallback
    if text is not None and re.search(r"\\?%\s*$", text) and form.startswith("num"):
        return "pct" + form[3:]
    return form


@functools.lru_cache(maxsize=4096)
def _parse(text: str):
    """math-verify's reading of an answer value or a label, as the content of a box (this forces the LaTeX
    reading of "\\frac12", "1/2", ...). Cached: a label is parsed once per process, and consistent groups
    repeat their answers. No inner time limit (see `_child_main`); no second, free-text reading either: that one
    would read the last number of "F_n = \\sum_{k=0}^{n-1} ..." as the answer."""
    from math_verify import parse

    return parse("\\boxed{" + text + "}", parsing_timeout=None)


def _compact(text: str) -> str:
    return "".join(text.split())


def judge(pred: Optional[str], gold: str) -> Tuple[bool, Optional[str], bool]:
    """(correct, canonical form of pred, gold parsed) for one answer value and its label's value
    (`answers.answer_value` of each).

    Correctness is math-verify's `verify`, with two exceptions: two numbers with the same exact value are
    equal without asking it (the common case of a correct answer; `verify` agrees), and where either side reads
    as an error value (`12:00` is 12/0 = zoo to math-verify) the texts are compared instead."""
    from math_verify import verify

    gold_parsed = _parse(gold) if gold else []
    # math-verify falls back to the raw string when nothing parses: a label is "ok" only if it
    # became a mathematical object (a text label still gets string comparison, but is flagged).
    gold_ok = any(not isinstance(g, str) for g in gold_parsed)
    if pred is None:
        return False, None, gold_ok
    pred_parsed = _parse(pred)
    canon = canonical_form(pred_parsed[0], pred) if pred_parsed else None
    if not gold_parsed or not pred_parsed:
        return False, canon, gold_ok
    if is_error_value(pred_parsed[0]) or is_error_value(gold_parsed[0]):
        return _compact(pred) == _compact(gold), canon, gold_ok
    if canon is not None and canon.startswith("num:") and canon == _gold_canon(gold):
        return True, canon, gold_ok
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)), canon, gold_ok


@functools.lru_cache(maxsize=4096)
def _gold_canon(gold: str) -> Optional[str]:
    parsed = _parse(gold)
    return canonical_form(parsed[0], gold) if parsed else None


@functools.lru_cache(maxsize=None)
def label_parses(label: str) -> bool:
    """The reward's test for a gold answer, in this process: math-verify turns it into a mathematical
    object rather than falling back to the raw string."""
    from openrlhf_copo.rewards.answers import answer_value

    return judge(None, answer_value(label))[2]


class _Deadline(BaseException):
    """The request's alarm. A BaseException: math-verify's `except Exception` must not turn it into an answer."""


def _on_deadline(signum, frame):
    raise _Deadline()


def _child_main() -> None:
    """One JSON line per request: {"pred", "gold", "budget"} -> {"correct", "canon", "gold_ok"} or {"timeout": true}.

    math-verify's own time limits (SIGALRM per parse / verify call) are off: on a loaded machine they ran out and
    math-verify then returned [] or False as if that were its answer, silently. Instead the whole request runs
    under one alarm of ``budget`` seconds (a little under the parent's deadline); when it rings, the request
    answers "timeout" (flagged copo_verify_failed, never cached) and the worker lives on. The parent's deadline
    stays the hard bound."""
    import signal

    # The protocol owns the real stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    import math_verify  # noqa: F401  (import cost paid before "ready")

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout is disabled" notice: we bound it here
    signal.signal(signal.SIGALRM, _on_deadline)
    # One check before "ready": the LaTeX parser and sympy build their tables on first use (about 1 s), a cost
    # that belongs to starting the worker, not to the first responses' deadline.
    signal.setitimer(signal.ITIMER_REAL, STARTUP_TIMEOUT_S / 2)
    try:
        judge("\\frac{x^2}{2} + \\sqrt{3}", "(1, 2]")
    except (_Deadline, Exception):
        pass  # a warm-up, nothing depends on it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out.write('{"ready": true}\n')
    for line in sys.stdin:
        try:
            req = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, max(0.05, float(req.get("budget", DEFAULT_TIMEOUT_S * 0.8))))
            try:
                if req.get("op") == "sleep":  # test hook: a computation that never finishes in time
                    time.sleep(float(req["seconds"]))
                correct, canon, gold_ok = judge(req.get("pred"), req.get("gold", ""))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            resp = {"correct": correct, "canon": canon, "gold_ok": gold_ok}
        except _Deadline:
            resp = {"timeout": True}
        except Exception as e:  # a bad answer must not kill the worker
            resp = {"correct": False, "canon": None, "gold_ok": False, "error": repr(e)[:200]}
        out.write(json.dumps(resp) + "\n")


# ---------------------------------------------------------------------------------------------
# Parent side.


# ---------------------------------------------------------------------------------------------
# Parent side, first: plain numbers need no math-verify at all.

_INTEGER = r"[+-]?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)"
_NUMBER_LITERAL = re.compile(
    rf"^(?:(?P<dec>{_INTEGER}(?:\.\d+)?|[+-]?\.\d+)"
    rf"|(?P<num>{_INTEGER})\s*/\s*(?P<den>\d+)"
    rf"|(?P<sign>[+-]?)\\[dt]?frac\s*\{{\s*(?P<fnum>{_INTEGER})\s*\}}\s*\{{\s*(?P<fden>\d+)\s*\}})$"
)


def literal_value(text: str) -> Optional[Fraction]:
    """The exact value of a plain number as written: `42`, `-7`, `1,000`, `0.25`, `3/4`, `\\frac{3}{4}`,
    `-\\dfrac{1}{2}`; None for anything else. Pure Python, microseconds."""
    m = _NUMBER_LITERAL.match(text.strip())
    if m is None:
        return None
    if m["dec"] is not None:
        return Fraction(m["dec"].replace(",", ""))
    num, den = (m["num"], m["den"]) if m["num"] is not None else (m["fnum"], m["fden"])
    if int(den) == 0:
        return None
    value = Fraction(int(num.replace(",", "")), int(den))
    return -value if m["sign"] == "-" else value


def number_canon(value) -> str:
    """The canonical form of an exact rational (shared by both sides, so their ids agree)."""
    return f"num:{value.numerator}" if value.denominator == 1 else f"num:{value.numerator}/{value.denominator}"


def fast_verdict(pred: Optional[str], gold: str) -> Optional[Verdict]:
    """math-verify's verdict, without math-verify, where the values decide it: answer and label values (after
    `answers.answer_value`, so `x = 3` is 3) are plain numbers (`literal_value`). None otherwise.

    Mirrors math-verify's number rule (`grader.sympy_numeric_eq`): integers and fractions compare
    exactly; if either side is a decimal, values rounded to 6 places compare, so a difference of at
    least 1e-6 is always unequal and a smaller one is left to math-verify (`0.333333` = `1/3` stays
    its call)."""
    if pred is None:
        return None
    p, g = literal_value(pred), literal_value(gold)
    if p is None or g is None:
        return None
    canon = number_canon(p)
    if p == g:
        return Verdict(True, canon, True)
    if "." not in pred and "." not in gold or abs(p - g) >= Fraction(1, 10**6):
        return Verdict(False, canon, True)
    return None


class VerifierUnavailable(RuntimeError):
    """No math-verify worker can start in this process's environment; the message says why and where."""


class _Worker:
    def __init__(self) -> None:
        # The child's stderr goes to a file, not a pipe nobody reads: if it dies at start (math-verify
        # missing), its last line is the reason we report.
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openrlhf_copo.rewards.verifier"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        if self._read(STARTUP_TIMEOUT_S) is None:
            reason = self._last_stderr_line() or f"no answer within {STARTUP_TIMEOUT_S:.0f}s"
            self.kill()
            raise VerifierUnavailable(
                f"the math-verify worker ({sys.executable} -m openrlhf_copo.rewards.verifier) cannot start on node "
                f"{socket.gethostname()}: {reason} (install math-verify[antlr4_13_2] in this environment)"
            )

    def _last_stderr_line(self) -> str:
        try:
            self.proc.wait(timeout=5)
            self.stderr.seek(0)
            lines = [ln.strip() for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
            return lines[-1][:300] if lines else ""
        except Exception:
            return ""

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
        self.stderr.close()


class VerifierPool:
    """A few math-verify child processes, each call bounded by ``timeout`` seconds.

    Why not pebble's ProcessPool (+ cachetools), measured side by side by `benchmarks/bench_verifier_pool.py`
    (2026-11-23, 2 cores, quiet, median of 3, both warmed): on ordinary symbolic answers the two are within their
    run-to-run spread (pebble 23.9/s, 19.4-26.8; ours 22.0/s, 21.6-27.7), and pebble took 11.7 s against our 8.3 s
    for 2 pathological answers among 16 ordinary ones: it restarts a worker at every deadline, where ours answers
    "timeout" from the worker's own alarm and keeps it. The verdict cache is an OrderedDict of a few lines.

    Thread-safe: concurrent callers each borrow a free worker. A worker that misses the
    deadline or dies is killed and replaced; its caller gets a ``timeout`` / ``error`` verdict.
    Verdicts are cached per (answer, label): COPO's consistent groups repeat their answers, and
    each repeat then costs a dictionary look-up instead of a round trip.

    If a worker cannot start at all, the pool remembers why (``unavailable``) and answers every
    later call at once with an ``unavailable`` verdict rather than retrying a start per response.
    """

    def __init__(self, workers: int = DEFAULT_WORKERS, timeout: float = DEFAULT_TIMEOUT_S,
                 cache_size: int = CACHE_SIZE) -> None:
        self.timeout = timeout
        self.workers = max(1, workers)
        self._free: "queue.Queue[Optional[_Worker]]" = queue.Queue()
        self._all: List[_Worker] = []
        self._lock = threading.Lock()
        self._cache: "collections.OrderedDict[Tuple[Optional[str], str], Verdict]" = collections.OrderedDict()
        self._cache_size = cache_size
        self.restarts = 0
        self.unavailable: Optional[str] = None
        for _ in range(self.workers):
            self._free.put(None)  # started on first use

    def _request(self, req: dict) -> Tuple[Optional[dict], str]:
        if self.unavailable:
            return None, "unavailable"
        worker = self._free.get()
        try:
            if worker is None:
                try:
                    worker = _Worker()
                except VerifierUnavailable as e:
                    with self._lock:
                        first = self.unavailable is None
                        self.unavailable = str(e)
                    if first:
                        logger.error("openrlhf_copo: %s; every verdict of this process is flagged copo_verify_failed", e)
                    return None, "unavailable"
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
        fast = fast_verdict(pred, gold)
        if fast is not None:
            return fast
        key = (pred, gold)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        resp, status = self._request({"pred": pred, "gold": gold, "budget": self.timeout * CHILD_BUDGET})
        if resp is None or resp.get("timeout"):
            return Verdict(False, None, True, status if resp is None else "timeout")
        verdict = Verdict(bool(resp["correct"]), resp.get("canon"), bool(resp["gold_ok"]),
                          "error" if "error" in resp else "ok")
        if verdict.status == "ok":  # a failure may not repeat: ask again next time
            with self._lock:
                self._cache[key] = verdict
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return verdict

    def warm_up(self) -> None:
        """Start every worker now (instead of at the first calls); raises VerifierUnavailable if one cannot."""
        taken = [self._free.get() for _ in range(self.workers)]
        try:
            for i, worker in enumerate(taken):
                if worker is None:
                    taken[i] = _Worker()
                    with self._lock:
                        self._all.append(taken[i])
        finally:
            for worker in taken:
                self._free.put(worker)

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


def reset_pool() -> None:
    """Close the process-wide pool; the next `get_pool()` starts a fresh one (empty cache)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.close()
        _POOL = None


if __name__ == "__main__":
    _child_main()
