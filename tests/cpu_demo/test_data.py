"""The demo's math prompt files: layout OpenRLHF reads, disjoint deterministic splits, parseable labels."""

from __future__ import annotations

import json

import pytest

from openrlhf_copo.rewards.answers import answer_value
from math_verify import parse

from openrlhf_copo.cpu_demo.data import EASY_TASKS, INSTRUCTION, main, make_math_prompts

N_TRAIN, N_TEST = 60, 20


@pytest.fixture(scope="session")
def chat_tokenizer(smollm2_dir):
    """SmolLM2's tokenizer (the demo models' one), from the build test_models.py shares (conftest.py)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_math_prompts(tmp_path_factory.mktemp("prompts"), N_TRAIN, N_TEST, seed=0)


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _questions(path):
    return [row["prompt"][0]["content"] for row in _rows(path)]


def test_rows_have_the_exact_layout(files):
    train, test = files
    assert (train.name, test.name) == ("train.jsonl", "test.jsonl")
    for path, n in ((train, N_TRAIN), (test, N_TEST)):
        rows = _rows(path)
        assert len(rows) == n
        for row in rows:
            assert set(row) == {"prompt", "label"}
            [turn] = row["prompt"]
            assert set(turn) == {"role", "content"} and turn["role"] == "user"
            question, sep, instruction = turn["content"].rpartition("\n\n")
            assert question and sep and instruction == INSTRUCTION
            assert isinstance(row["label"], str) and row["label"]


def test_openrlhf_reads_the_files_as_chats(files, chat_tokenizer, tmp_path):
    """What `--data.input_key prompt --data.label_key label --data.apply_chat_template` does to a row."""
    from datasets import load_dataset
    from openrlhf.datasets.prompts_dataset import preprocess_data

    train, _ = files
    dataset = load_dataset("json", data_files=str(train), cache_dir=str(tmp_path))["train"]  # as blending_datasets
    assert len(dataset) == N_TRAIN
    for data, row in zip(dataset, _rows(train)):
        prompt, label = preprocess_data(data, None, "prompt", "label", chat_tokenizer.apply_chat_template)
        content = row["prompt"][0]["content"]
        assert prompt.endswith(f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n")
        assert label == row["label"]


def test_splits_are_disjoint_and_without_repeats(files):
    train, test = map(_questions, files)
    assert len(set(train)) == len(train) and len(set(test)) == len(test)
    assert not set(train) & set(test)


def test_every_task_contributes(files):
    questions = [q for f in files for q in _questions(f)]
    openings = {"basic_arithmetic": "Calculate ", "chain_sum": "State the final answer",
                "fraction_simplification": "Simplify the fraction"}
    assert set(openings) == set(EASY_TASKS)
    for task, opening in openings.items():
        assert sum(q.startswith(opening) for q in questions) >= (N_TRAIN + N_TEST) // 4, task


def test_every_label_parses_with_math_verify(files):
    for path in files:
        for row in _rows(path):
            parsed = parse("\\boxed{" + row["label"] + "}")
            assert any(not isinstance(p, str) for p in parsed), row["label"]


def test_content_is_a_function_of_the_seed(files, tmp_path):
    same = make_math_prompts(tmp_path / "same", N_TRAIN, N_TEST, seed=0)
    other = make_math_prompts(tmp_path / "other", N_TRAIN, N_TEST, seed=1)
    more_train = make_math_prompts(tmp_path / "more", 2 * N_TRAIN, N_TEST, seed=0)
    assert [p.read_bytes() for p in same] == [p.read_bytes() for p in files]
    assert _questions(other[0]) != _questions(files[0]) and _questions(other[1]) != _questions(files[1])
    assert more_train[1].read_bytes() == files[1].read_bytes()  # the test split ignores n_train


def test_rows_with_unparseable_labels_are_skipped_and_reported(tmp_path, capsys):
    # sentence_reordering answers are sentences: math-verify cannot turn most of them into math
    train, test = make_math_prompts(tmp_path, 10, 5, seed=0, tasks=("chain_sum", "sentence_reordering"))
    report = capsys.readouterr().err
    skipped = int(report.split("skipped ")[1].split()[0])
    assert skipped > 0 and "sentence_reordering" in report
    rows = _rows(train) + _rows(test)
    assert len(rows) == 15
    # the reward reads a label by its value (answers.answer_value: no delimiters, no final period, ...)
    assert all(any(not isinstance(p, str) for p in parse("\\boxed{" + answer_value(r["label"]) + "}")) for r in rows)


def test_too_few_distinct_questions_is_an_error(tmp_path):
    # the easy fraction config has about 1300 distinct questions
    with pytest.raises(ValueError, match="distinct questions"):
        make_math_prompts(tmp_path, 1400, 100, tasks=("fraction_simplification",))
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_the_same_files(files, tmp_path):
    main(["--out", str(tmp_path), "--train", str(N_TRAIN), "--test", str(N_TEST), "--seed", "0"])
    assert [(tmp_path / p.name).read_bytes() for p in files] == [p.read_bytes() for p in files]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.jsonl", "train.jsonl"]  # no scratch left


# --- the arithmetic mix (the demo's data) ---------------------------------------------------------------------

def test_arithmetic_mix_rows_answers_and_equal_task_shares(tmp_path):
    import re

    from openrlhf_copo.cpu_demo.data import ARITHMETIC_TASKS, FINAL_NUMBER_INSTRUCTION, make_arithmetic_prompts

    train, test = make_arithmetic_prompts(tmp_path, 120, 60, seed=0)
    rows = _rows(train) + _rows(test)
    assert len(_rows(train)) == 120 and len(_rows(test)) == 60
    for row in rows:
        assert set(row) == {"prompt", "label", "datasource", "task"} and row["datasource"] == "arith"
        (turn,) = row["prompt"]
        question, instruction = turn["content"].split("\n\n")
        assert instruction == FINAL_NUMBER_INSTRUCTION
        # every label is the question's answer, recomputed here from its text
        nums = [int(n) for n in re.findall(r"\d+", question)]
        expected = {"copy": lambda: nums[0], "larger": lambda: max(nums), "add": lambda: nums[0] + nums[1],
                    "subtract": lambda: nums[0] - nums[1], "multiply": lambda: nums[0] * nums[1],
                    "add_two_digit": lambda: nums[0] + nums[1]}[row["task"]]()
        assert row["label"] == str(expected), row
    for split in (_rows(train), _rows(test)):
        counts = {t: sum(r["task"] == t for r in split) for t in ARITHMETIC_TASKS}
        assert max(counts.values()) - min(counts.values()) <= 1, counts
    questions = [r["prompt"][0]["content"] for r in rows]
    assert len(set(questions)) == len(questions)


def test_arithmetic_mix_is_deterministic_and_its_test_split_does_not_depend_on_n_train(tmp_path):
    from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts

    a = make_arithmetic_prompts(tmp_path / "a", 30, 12, seed=3)
    b = make_arithmetic_prompts(tmp_path / "b", 90, 12, seed=3)
    c = make_arithmetic_prompts(tmp_path / "c", 30, 12, seed=4)
    assert a[1].read_text() == b[1].read_text()
    assert a[0].read_text() == "".join(b[0].read_text().splitlines(keepends=True)[:30])
    assert a[1].read_text() != c[1].read_text()


def test_the_hard_mix_rows_answers_and_shares(tmp_path):
    """The `hard` regime's mix (issue 37): each label recomputed from its question, the four tasks in equal shares,
    no question twice, the source named "hard"; the arithmetic mix's files do not change with it."""
    import re

    from openrlhf_copo.cpu_demo.data import HARD_ARITHMETIC_TASKS, make_arithmetic_prompts

    train, test = make_arithmetic_prompts(tmp_path / "hard", 40, 20, seed=0, tasks=HARD_ARITHMETIC_TASKS, name="hard")
    rows = _rows(train) + _rows(test)
    for row in rows:
        nums = [int(n) for n in re.findall(r"\d+", row["prompt"][0]["content"].split("\n\n")[0])]
        op = {"add_two_digit": int.__add__, "add_two_two_digit": int.__add__, "subtract_two_digit": int.__sub__,
              "multiply_two_digit": int.__mul__}[row["task"]]
        assert row["label"] == str(op(*nums)) and row["datasource"] == "hard"
    assert nums and all(int(r["label"]) >= 0 for r in rows)
    counts = {t: sum(r["task"] == t for r in _rows(train)) for t in HARD_ARITHMETIC_TASKS}
    assert set(counts.values()) == {10}
    assert len({r["prompt"][0]["content"] for r in rows}) == 60
    default = make_arithmetic_prompts(tmp_path / "a", 30, 12, seed=3)
    again = make_arithmetic_prompts(tmp_path / "b", 30, 12, seed=3, name="arith")
    assert default[0].read_text() == again[0].read_text()
