"""Easy math prompts for the CPU demo, generated offline with reasoning-gym.

Each line of the written files is one OpenRLHF prompt row::

    {"prompt": [{"role": "user", "content": "<question>\\n\\n<INSTRUCTION>"}], "label": "<answer>"}

read with ``--data.input_key prompt --data.label_key label --data.apply_chat_template``.
OpenRLHF 0.11.2's `preprocess_data` (openrlhf/datasets/prompts_dataset.py) passes a list
under the input key straight to `tokenizer.apply_chat_template` as the conversation (a string
would be wrapped into one user turn); we write the chat list, so the file says exactly what the
model sees. The label is the answer string that `openrlhf_copo/rewards/math_reward.py` compares
the boxed final answer against.

The generators are procedural: item `i` of a task depends only on (seed, i), so the same
seed always gives the same files, without downloading anything. The configurations in
`EASY_TASKS` keep the numbers small, so a 135M model gets some right and the reward is not
all zeros.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple

from openrlhf_copo.embedded import atomic_path
from openrlhf_copo.rewards.verifier import label_parses

__all__ = ["INSTRUCTION", "EASY_TASKS", "make_math_prompts", "main"]

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

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


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m openrlhf_copo.embedded.data --out DIR --train N --test N --seed S [--tasks T ...]`."""
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
