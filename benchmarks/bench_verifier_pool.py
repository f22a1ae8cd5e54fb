"""The verifier's own process pool against pebble's ProcessPool, side by side in one run (issue 18: adopt the
library if it keeps the speed and the bounded pathological behaviour).

    .venv/bin/python benchmarks/bench_verifier_pool.py [--repeats 3] [--timeout 10]

Both run the same `verifier.judge` on the same (answer, label) pairs from 2 threads with 2 worker processes and
the same deadline, cold (workers started before the clock, no verdict cache):

- `symbolic`: answers only math-verify can read (radicals, trig, polynomials, intervals, sets, matrices);
- `pathological`: answers whose check never ends in time (a power tower's numeric value, a 100,000-character
  line), each followed by 8 ordinary answers: the cost of a deadline, including what it costs the next answers.

Prints answers/second (symbolic) and seconds (pathological) per contender and the ratios. Needs `pebble`
(`pip install pebble`; not a dependency of the package).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import time

from openrlhf_copo.rewards import verifier

SYMBOLIC = [
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"), ("2\\sqrt{3}+\\sqrt{12}", "4\\sqrt{3}"), ("(x+1)^3", "x^3+3x^2+3x+1"),
    ("\\frac{x^2-1}{x-1}", "x+1"), ("[-2, 7]", "[-2,7]"), ("\\{1, 2, 3\\}", "\\{3,2,1\\}"), ("\\sin^2 x + \\cos^2 x", "1"),
    ("\\frac{\\pi}{6} + \\frac{\\pi}{3}", "\\frac{\\pi}{2}"), ("\\log_2 1024", "10"), ("y = 2x + 3", "y=3+2x"),
    ("\\binom{10}{3}", "120"), ("x^2 + 2xy + y^2", "(x+y)^2"), ("\\sqrt{5+2\\sqrt{6}}", "\\sqrt{2}+\\sqrt{3}"),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}"),
]
PATHOLOGICAL = [("9^{9^{9^{9^{9^{9}}}}}", "3"), ("(1+" * 20000 + "1" + ")" * 20000, "3")]


def _judge(pred: str, gold: str):
    return verifier.judge(pred, gold)


class Ours:
    name = "verifier.VerifierPool"

    def __init__(self, timeout: float) -> None:
        self.pool = verifier.VerifierPool(workers=2, timeout=timeout, cache_size=0)
        self.pool.warm_up()

    def verify(self, pred: str, gold: str) -> str:
        return self.pool.verify(pred, gold).status

    def close(self) -> None:
        self.pool.close()


class Pebble:
    name = "pebble.ProcessPool"

    def __init__(self, timeout: float) -> None:
        import pebble

        self.timeout = timeout
        self.pool = pebble.ProcessPool(max_workers=2)
        concurrent.futures.wait([self.pool.schedule(_judge, args=("\\sqrt{4}", "2")) for _ in range(4)])  # warm

    def verify(self, pred: str, gold: str) -> str:
        try:
            self.pool.schedule(_judge, args=(pred, gold), timeout=self.timeout).result()
            return "ok"
        except concurrent.futures.TimeoutError:
            return "timeout"

    def close(self) -> None:
        self.pool.stop()
        self.pool.join()


def run(contender, pairs) -> float:
    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        t = time.perf_counter()
        statuses = list(threads.map(lambda p: contender.verify(*p), pairs))
        return time.perf_counter() - t, statuses


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args(argv)
    rates, patho = {}, {}
    for cls in (Ours, Pebble):
        r, p = [], []
        for _ in range(a.repeats):
            c = cls(a.timeout)
            try:
                seconds, statuses = run(c, SYMBOLIC * 2)
                assert statuses == ["ok"] * len(statuses), statuses
                r.append(len(statuses) / seconds)
                seconds, statuses = run(c, [q for bad in PATHOLOGICAL for q in [bad] + SYMBOLIC[:8]])
                assert statuses.count("timeout") == len(PATHOLOGICAL), statuses
                p.append(seconds)
            finally:
                c.close()
        rates[cls.name], patho[cls.name] = r, p
    base = Ours.name
    print(f"2 workers, 2 threads, deadline {a.timeout:g} s, median of {a.repeats}")
    med = statistics.median
    for name in rates:
        print(f"  {name:24s} symbolic {med(rates[name]):7.1f} answers/s (runs {min(rates[name]):.1f}-"
              f"{max(rates[name]):.1f}; {med(rates[name]) / med(rates[base]):.2f}x)   pathological + 16 ordinary "
              f"{med(patho[name]):6.1f} s (runs {min(patho[name]):.1f}-{max(patho[name]):.1f}; "
              f"{med(patho[name]) / med(patho[base]):.2f}x)")


if __name__ == "__main__":
    main()
