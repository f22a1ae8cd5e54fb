"""`openrlhf_copo.data_prep` / `python -m openrlhf_copo.cli.prepare_data` on small copies of the real layouts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from openrlhf_copo.cli.prepare_data import main as cli_main
from openrlhf_copo.data_prep import DataPrepError, prepare

FIXTURES = Path(__file__).parent / "fixtures" / "data"
REPO = Path(__file__).resolve().parents[1]

BOXED = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
DAPO_HEAD = ("Solve the following math problem step by step. The last line of your response should be of the form "
             "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_TAIL = '\n\nRemember to put your answer on its own line after "Answer:".'

AIME24_ROWS = [("2024-I-1", "204"), ("2024-I-2", "25"), ("2024-II-1", "73")]
AIME25_ROWS = [(0, "70"), (1, "16"), (2, "117")]

#: fixture -> (source, [(id, label), ...] expected in the output, in order)
EXPECTED = {
    "dapo_math_17k.parquet": ("dapo_math_17k", [("9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079", "34"),
                                                ("b426d104-244d-4831-a2c4-cd756b61700a", "113"),
                                                ("6ff0b17f-7e5c-4ae9-b5e9-63ebecd2b9f7", "38")]),
    "math500.jsonl": ("math500", [("test/precalculus/807.json", "\\left( 3, \\frac{\\pi}{2} \\right)"),
                                  ("test/algebra/2584.json", "\\frac{14}{3}"),
                                  ("test/number_theory/572.json", "9"),
                                  ("test/number_theory/515.json", "27")]),
    "aime24_maxwell.parquet": ("aime24", AIME24_ROWS),
    "aime24_h4.jsonl": ("aime24", [(60, "204"), (61, "25"), (75, "73")]),  # "025" / "073" lose the zero
    "aime25_opencompass.jsonl": ("aime25", AIME25_ROWS),
    "aime25_problem.json": ("aime25", AIME25_ROWS),
    "gsm8k.parquet": ("gsm8k", [(0, "18"), (1, "3"), (2, "70000"), (3, "1000")]),  # "#### 1,000" -> "1000"
}


def read_jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_becomes_prompt_label_jsonl(fixture, tmp_path):
    source, expected = EXPECTED[fixture]
    out = tmp_path / "out.jsonl"
    report = prepare(source, out, input_path=FIXTURES / fixture)

    rows = read_jsonl(out)
    assert [(r["id"], r["label"]) for r in rows] == expected
    assert report.written == len(expected)
    for row in rows:
        assert set(row) == {"prompt", "label", "datasource", "id"}
        assert row["datasource"] == source
        [turn] = row["prompt"]
        assert set(turn) == {"role", "content"} and turn["role"] == "user"
        question = turn["content"][: -len(BOXED)]
        assert turn["content"] == question + BOXED and question.strip() == question and question
        assert "Answer:" not in question and "####" not in question
    # what the evaluation reads
    from openrlhf_copo.evaluation.evaluate import load_rows

    assert [r["label"] for r in load_rows(out)] == [label for _, label in expected]


def test_dapo_question_is_recovered_from_the_wrapped_prompt(tmp_path):
    out = tmp_path / "dapo.jsonl"
    report = prepare("dapo_math_17k", out, input_path=FIXTURES / "dapo_math_17k.parquet")
    rows = read_jsonl(out)
    assert rows[2]["prompt"][0]["content"] == (
        "Find the sum of all positive integers $n$ such that $n^2 - 19n + 99$ is a perfect square." + BOXED)
    assert rows[0]["prompt"][0]["content"].startswith("In triangle $ABC$, $\\sin \\angle A = \\frac{4}{5}$")
    assert report.duplicates == 1  # row 4 repeats row 1 (own uuid): written once

    # the dapo template rebuilds exactly the content the data set ships
    prepare("dapo_math_17k", out, input_path=FIXTURES / "dapo_math_17k.parquet", template="dapo")
    shipped = [r["prompt"][0]["content"] for r in pq.read_table(FIXTURES / "dapo_math_17k.parquet").to_pylist()]
    assert [r["prompt"][0]["content"] for r in read_jsonl(out)] == shipped[:3]


def test_templates_on_math500(tmp_path):
    question = "How many positive whole-number divisors does 196 have?"
    for template, expected in [("dapo", DAPO_HEAD + question + DAPO_TAIL), ("boxed", question + BOXED)]:
        out = tmp_path / f"{template}.jsonl"
        prepare("math500", out, input_path=FIXTURES / "math500.jsonl", template=template)
        assert read_jsonl(out)[2]["prompt"][0]["content"] == expected


def test_unparseable_label_is_reported_not_written(tmp_path, capsys):
    out = tmp_path / "math500.jsonl"
    assert cli_main(["--source", "math500", "--input", str(FIXTURES / "math500.jsonl"), "--out", str(out)]) == 0

    assert "test/algebra/corrupted-label.json" not in [r["id"] for r in read_jsonl(out)]
    [rejected] = read_jsonl(tmp_path / "math500.jsonl.rejected.jsonl")
    assert rejected["id"] == "test/algebra/corrupted-label.json" and rejected["label"] == "\\boxed{}"
    assert "math-verify cannot parse" in rejected["reason"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"wrote 4 rows to {out}; skipped 1 rows whose label math-verify cannot parse: "
                          "ids test/algebra/corrupted-label.json")

    # a later clean run of the same output drops the stale list
    prepare("math500", out, input_path=FIXTURES / "math500.jsonl", limit=2)
    assert len(read_jsonl(out)) == 2
    assert not (tmp_path / "math500.jsonl.rejected.jsonl").exists()


def test_gsm8k_solution_without_answer_line_is_rejected(tmp_path):
    src = tmp_path / "gsm8k.json"  # a plain JSON list
    src.write_text(json.dumps([{"question": "What is 2 + 2?", "answer": "2 + 2 = <<2+2=4>>4\n#### 4"},
                               {"question": "What is 3 + 3?", "answer": "3 + 3 = 6"}]))
    report = prepare("gsm8k", tmp_path / "out.jsonl", input_path=src)
    assert [(r["id"], r["label"]) for r in read_jsonl(tmp_path / "out.jsonl")] == [(0, "4")]
    assert [(r["id"], r["reason"]) for r in report.rejected] == [
        (1, "answer (answer): no '#### <answer>' line in the solution")]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", ["extension", "no_question", "no_answer", "empty_jsonl", "empty_json"])
def test_bad_input_gives_one_line_reason_and_no_output(case, tmp_path):
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    source, path, expected = {
        "extension": ("math500", _write(src_dir / "math500.csv", "problem,answer\n1+1,2\n"),
                      "math500.csv: unknown file extension '.csv' (expected .parquet, .json or .jsonl)"),
        "no_question": ("math500", FIXTURES / "gsm8k.parquet",
                        "gsm8k.parquet: no column for the question (looked for problem; found question, answer)"),
        "no_answer": ("aime25", _write(src_dir / "aime25.jsonl", json.dumps({"problem": "Find $1+1$.", "id": 1})),
                      "aime25.jsonl: no column for the answer (looked for answer; found problem, id)"),
        "empty_jsonl": ("gsm8k", _write(src_dir / "gsm8k.jsonl", "\n"), "gsm8k.jsonl has no rows"),
        "empty_json": ("aime24", _write(src_dir / "aime24.json", '{"data": []}'), "aime24.json has no rows"),
    }[case]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(DataPrepError) as e:
        prepare(source, out_dir / "out.jsonl", input_path=path)
    assert "\n" not in str(e.value)
    assert str(e.value) == f"{path.parent}/{expected}"
    assert leftovers(out_dir) == []  # no output, no temp file, no rejected list


def test_cli_bad_input_exits_2_without_traceback(tmp_path):
    out = tmp_path / "math500.jsonl"
    src = FIXTURES / "aime25_opencompass.jsonl"  # question/answer: not MATH-500's problem/answer
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "openrlhf_copo.cli.prepare_data", "--source", "math500",
                           "--input", str(src), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == (f"prepare_data: error: {src}: no column for the question "
                           "(looked for problem; found question, answer)\n")
    assert leftovers(tmp_path) == []
