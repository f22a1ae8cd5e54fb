"""The reward file against a plain math-verify loop, side by side in one run, on the same responses.

    .venv/bin/python benchmarks/bench_reward.py [--responses 894] [--threads 2 4 6 8] [--repeats 3]

Three workloads of short math responses, each ending in a stop token as OpenRLHF hands them over
(`decode(..., skip_special_tokens=False)`):

- `repeated`: numeric answers (integers, decimals, fractions, `x = n`, `1,000`; DAPO-Math-17k's labels
  are all integers), every answer twice for its prompt, as COPO's consistent groups give;
- `distinct`: the same kind of answers, every (answer, label) pair once;
- `symbolic-groups`: answers only math-verify can read (radicals, pi, intervals, sets, polynomials,
  percentages), in groups of G = 6 responses per prompt that mostly agree: the path through the
  worker processes. (No target: reported as measured.)

Contenders:

- `plain loop`: one thread, for each response `verify(parse(label), parse(response))` with
  math-verify's own extraction: what a user writes first. (No deadline: math-verify's signal
  timeouts do not work in OpenRLHF's reward threads, so this loop is not usable as is.)
- `reward file, T threads`: `math_reward.py` loaded by path and called as OpenRLHF's
  `SingleTurnAgentExecutor` calls it: one response per call, through `asyncio.to_thread`, with an
  executor of T threads, every call under the hard deadline. Its verifier pool is fresh (empty
  caches) for every measurement; its worker start-up (import and one warm-up check) is paid before the
  clock starts, as the plain loop's import and warm-up check are.

Prints responses/second per contender and the ratio to the plain loop (median of --repeats), with the range
over the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import importlib.util
import multiprocessing
import random
import statistics
import time
from pathlib import Path

import openrlhf_copo.rewards as rewards_pkg
from openrlhf_copo.rewards import verifier

PROMPT = "<|im_start|>user\nSolve the problem. Put the final answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
STOP = "<|im_end|>"


def _answer_forms(rng: random.Random, value: int):
    """A few ways a model writes a number (and a few wrong numbers)."""
    num, den = value, rng.choice([1, 1, 2, 3, 4, 5, 8])
    forms = [str(num), f"{num}.0", f"\\frac{{{num * den}}}{{{den}}}", f"{num:,}", f"x = {num}",
             f"{num + rng.randint(1, 9)}", f"-{num}", f"\\frac{{{num}}}{{{den + 1}}}", f"{num / 4}"]
    return forms


def _wrap(rng: random.Random, answer: str) -> str:
    body = rng.choice(["Adding the parts gives the total.", "We multiply and simplify step by step.",
                       "First compute the sum, then check it."])
    style = rng.randrange(3)
    if style == 0:
        text = f"{body} So the answer is $\\boxed{{{answer}}}$."
    elif style == 1:
        text = f"{body}\nAnswer: {answer}"
    else:
        text = f"{body} Therefore, the final answer is $\\boxed{{{answer}}}$"
    return text + STOP


def _symbolic_answer(rng: random.Random):
    """(answer, label): answers math-verify must read (no plain number), right about half the time."""
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
    label, right, wrong = rng.choice([
        (f"\\frac{{\\sqrt{{{a}}}}}{{{b}}}", f"\\frac{{\\sqrt{{{a}}}}}{{{b}}}", f"\\frac{{\\sqrt{{{a + 1}}}}}{{{b}}}"),
        (f"{a}\\pi", f"{a}\\pi", f"{a + 1}\\pi"),
        (f"({a}, {a + b}]", f"({a}, {a + b}]", f"[{a}, {a + b}]"),
        (f"\\{{{a}, {b}\\}}", f"\\{{{b}, {a}\\}}", f"\\{{{a}, {b + 1}\\}}"),
        (f"x^{c} + {a}", f"x^{c} + {a}", f"x^{c} - {a}"),
        (f"{a}\\%", f"{a}\\%", f"{a + 1}\\%"),
        (f"{c}\\sqrt{{{a}}}", f"\\sqrt{{{c * c * a}}}", f"{c}\\sqrt{{{a + 1}}}"),
    ])
    return (right if rng.random() < 0.5 else wrong), label


def workloads(n: int, seed: int = 0):
    """(name, [(query, prompt, label, response text, answer)]) for the two workloads, n responses each."""
    rng = random.Random(seed)
    repeated, distinct = [], []
    while len(repeated) < n:
        label = str(rng.randint(2, 10**6))
        forms = _answer_forms(rng, int(label))
        answer = rng.choice(forms)
        for _ in range(2):
            text = _wrap(rng, answer)
            repeated.append((PROMPT + text, PROMPT, label, text, answer))
    seen = set()
    while len(distinct) < n:
        label = str(rng.randint(2, 10**6))
        answer = rng.choice(_answer_forms(rng, int(label)))
        if (answer, label) in seen:
            continue
        seen.add((answer, label))
        text = _wrap(rng, answer)
        distinct.append((PROMPT + text, PROMPT, label, text, answer))
    symbolic = []
    while len(symbolic) < n:  # a group of G = 6 responses per prompt, mostly agreeing
        (a, label), (b, _) = _symbolic_answer(rng), _symbolic_answer(rng)
        answers = [a] * rng.choice([6, 5, 4]) + [b] * 2
        for answer in answers[:6]:
            text = _wrap(rng, answer)
            symbolic.append((PROMPT + text, PROMPT, label, text, answer))
    return [("repeated", repeated[:n]), ("distinct", distinct), ("symbolic-groups", symbolic[:n])]


def load_reward_file():
    """Exactly how OpenRLHF's SingleTurnAgentExecutor loads --reward.remote_url."""
    path = Path(rewards_pkg.__file__).parent / "math_reward.py"
    spec = importlib.util.spec_from_file_location("reward_func", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def _plain_loop_rate(items) -> float:
    from math_verify import parse, verify

    t = time.perf_counter()
    for _query, _prompt, label, text, _answer in items:
        verify(parse(label), parse(text))
    return len(items) / (time.perf_counter() - t)


def plain_loop(items) -> float:
    """In a fresh process each time, math-verify imported and its parser warmed by one check before the clock,
    as the reward file's workers are when they start: no answer of the workload is cached on either side."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx, initializer=_import_math_verify) as ex:
        return ex.submit(_plain_loop_rate, items).result()


def _import_math_verify():
    from math_verify import parse, verify

    verify(parse("$\\frac{x^2}{2} + \\sqrt{3}$"), parse("$(1, 2]$"))  # warm, as the reward file's workers are


def reward_file(reward_func, items, threads: int) -> float:
    # A fresh pool: nothing cached from an earlier measurement; its workers started before the clock.
    verifier.reset_pool()
    pool = verifier.get_pool()
    pool.warm_up()

    async def run_all():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=threads))
        calls = [asyncio.to_thread(reward_func, [q], [p], [lab]) for q, p, lab, _, _ in items]
        return await asyncio.gather(*calls)

    t = time.perf_counter()
    asyncio.run(run_all())
    return len(items) / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--responses", type=int, default=894)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 4, 6, 8])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    import os

    reward_func = load_reward_file()
    print(f"{a.responses} responses per workload, {os.cpu_count()} CPUs, median of {a.repeats} runs, "
          f"verifier workers {verifier.DEFAULT_WORKERS}")
    for name, items in workloads(a.responses):
        pairs = len({(answer, lab) for _, _, lab, _, answer in items})
        bases = [plain_loop(items) for _ in range(a.repeats)]
        base = statistics.median(bases)
        print(f"\n[{name}] {len(items)} responses, {pairs} distinct (answer, label) pairs")
        print(f"  plain math-verify loop, 1 thread : {base:8.0f} responses/s   1.00x   "
              f"(runs {min(bases):.0f}-{max(bases):.0f})")
        for threads in a.threads:
            rates = [reward_file(reward_func, items, threads) for _ in range(a.repeats)]
            rate = statistics.median(rates)
            print(f"  reward file, {threads} threads          : {rate:8.0f} responses/s   {rate / base:.2f}x   "
                  f"(runs {min(rates):.0f}-{max(rates):.0f}, ratio {min(rates) / max(bases):.2f}-"
                  f"{max(rates) / min(bases):.2f}x)")
    verifier.reset_pool()


if __name__ == "__main__":
    main()
