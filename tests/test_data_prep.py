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
    assert err.startswith(f"wrote 4 rows to {out}; skipped 1 rows: 1 with a label math-verify cannot parse "
                          f"({FIXTURES / 'math500.jsonl'}:5)")

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
                        "gsm8k.parquet row 1: no column for the question (looked for problem; found question, answer)"),
        "no_answer": ("aime25", _write(src_dir / "aime25.jsonl", json.dumps({"problem": "Find $1+1$.", "id": 1})),
                      "aime25.jsonl:1: no column for the answer (looked for answer, reward_model, solution; "
                      "found problem, id)"),
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
    assert proc.stderr == (f"prepare_data: error: {src}:1: no column for the question "
                           "(looked for problem; found question, answer)\n")
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Issue 45: whole evaluation sets, more copies accepted, one-line errors, every skip reason, streaming.

#: Real AIME 2025 problems (three of each part), as opencompass/AIME2025 ships them (`question`, `answer`).
AIME25_I = [json.loads(line) for line in (FIXTURES / "aime25_opencompass.jsonl").read_text().splitlines()]
AIME25_II = [
    {"question": "Six points $A, B, C, D, E,$ and $F$ lie in a straight line in that order. Suppose that $G$ is a "
                 "point not on the line and that $AC=26, BD=22, CE=31, DF=33, AE=17, CG=40,$ and $DG=30.$ Find the "
                 "area of $\\triangle BGE.$", "answer": "468"},
    {"question": "Find the sum of all positive integers $n$ such that $n+2$ divides the product $3(n+3)(n^2+9)$.",
     "answer": "49"},
    {"question": "Four unit squares form a $2 \\times 2$ grid. Each of the $12$ unit line segments forming the sides "
                 "of the squares is colored either red or blue in such way that each unit square has $2$ red sides "
                 "and $2$ blue sides. Find the number of such colorings.", "answer": "82"},
]


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _opencompass_aime2025(folder: Path) -> Path:
    """A local copy of opencompass/AIME2025 as the hub holds it: one jsonl per part, configurations in README.md."""
    folder.mkdir()
    _jsonl(folder / "aime2025-I.jsonl", AIME25_I)
    _jsonl(folder / "aime2025-II.jsonl", AIME25_II)
    (folder / "README.md").write_text(
        "---\nlicense: mit\nconfigs:\n- config_name: AIME2025-I\n  data_files:\n  - split: test\n"
        "    path: aime2025-I.jsonl\n- config_name: AIME2025-II\n  data_files:\n  - split: test\n"
        "    path: aime2025-II.jsonl\n---\n# AIME 2025 Dataset\n")
    return folder


OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _cli(*argv, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "openrlhf_copo.cli.prepare_data", *map(str, argv)],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, **OFFLINE}, timeout=300)


def test_aime2025_is_both_parts_from_the_hub_layout_and_from_local_files(tmp_path):
    """AIME 2025 is two configurations of opencompass/AIME2025 (15 problems each): both are read, one after the
    other, with ids that stay unique; the same from the two files given locally. prepare_data.sh asks for both."""
    hub = _opencompass_aime2025(tmp_path / "AIME2025")
    expected = [r["answer"] for r in AIME25_I + AIME25_II]
    proc = _cli("--source", "aime25", "--hf_name", hub, "--hf_config", "AIME2025-I", "AIME2025-II", "--split", "test",
                "--out", tmp_path / "hub.jsonl")
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(tmp_path / "hub.jsonl")
    assert [r["label"] for r in rows] == expected and [r["id"] for r in rows] == list(range(6))
    prepare("aime25", tmp_path / "local.jsonl", input_path=[hub / "aime2025-I.jsonl", hub / "aime2025-II.jsonl"])
    assert read_jsonl(tmp_path / "local.jsonl") == rows

    from tests.examples.test_scripts import script_runs

    [aime25] = [run for run in script_runs("prepare_data.sh") if "aime25" in run]
    assert aime25[aime25.index("--hf_config") + 1: aime25.index("--hf_config") + 3] == ["AIME2025-I", "AIME2025-II"]


def test_aime2024_copies_of_math_ai_and_of_dapo_are_accepted(tmp_path):
    """math-ai/aime24 gives the answer only inside `solution` as \\boxed{N}; BytedTsinghua-SIA/AIME-2024 is
    DAPO-Math-17k's layout (a chat prompt in DAPO's instruction, reward_model.ground_truth), each problem 32 times."""
    problems = [json.loads(line) for line in (FIXTURES / "aime24_h4.jsonl").read_text().splitlines()]
    math_ai = _jsonl(tmp_path / "math_ai_aime24.jsonl", [
        {"id": i, "problem": p["problem"], "solution": f"\\boxed{{{int(p['answer'])}}}", "url": p["url"]}
        for i, p in enumerate(problems)])
    prepare("aime24", tmp_path / "a.jsonl", input_path=math_ai)
    assert [(r["id"], r["label"]) for r in read_jsonl(tmp_path / "a.jsonl")] == [(0, "204"), (1, "25"), (2, "73")]

    import pyarrow as pa

    dapo = [{"data_source": "math_dapo", "prompt": [{"content": DAPO_HEAD + p["problem"] + DAPO_TAIL, "role": "user"}],
             "ability": "MATH",
             "reward_model": {"ground_truth": str(int(p["answer"])), "style": "rule-lighteval/MATH_v2"},
             "extra_info": {"index": f"{i % 3}"}} for i, p in enumerate(problems * 32)]
    pq.write_table(pa.Table.from_pylist(dapo), tmp_path / "aime-2024.parquet")
    report = prepare("aime24", tmp_path / "b.jsonl", input_path=tmp_path / "aime-2024.parquet")
    rows = read_jsonl(tmp_path / "b.jsonl")
    assert [r["label"] for r in rows] == ["204", "25", "73"] and report.duplicates == 93
    assert rows[0]["prompt"][0]["content"] == problems[0]["problem"] + BOXED


@pytest.mark.parametrize("case", ["no_such_dataset", "missing_config", "wrong_split"])
def test_a_hub_failure_is_one_line_naming_the_dataset_config_and_split(case, tmp_path):
    """Offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE: nothing is fetched): a name the hub cannot give, a config
    the data set lacks and a split it lacks each end in one `prepare_data: error:` line, exit code 2, no output."""
    hub = _opencompass_aime2025(tmp_path / "AIME2025")
    args, named = {
        "no_such_dataset": (["--hf_name", "copo-tests/no-such-dataset", "--split", "test"],
                            "copo-tests/no-such-dataset (config default, split test)"),
        "missing_config": (["--hf_name", hub, "--hf_config", "AIME2025-III", "--split", "test"],
                           f"{hub} (config AIME2025-III, split test)"),
        "wrong_split": (["--hf_name", hub, "--hf_config", "AIME2025-I", "--split", "train"],
                        f"{hub} (config AIME2025-I, split train)"),
    }[case]
    proc = _cli("--source", "aime25", *args, "--out", tmp_path / "out" / "aime25.jsonl")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"prepare_data: error: cannot load {named}: ") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_json_lines_written_by_datasets_to_json_are_read(tmp_path):
    """`datasets.Dataset.to_json` writes JSON lines under whatever name it is given, .json included."""
    import datasets

    path = tmp_path / "gsm8k.json"
    rows = pq.read_table(FIXTURES / "gsm8k.parquet").to_pylist()
    datasets.Dataset.from_list(rows).to_json(str(path))
    assert len(path.read_text().splitlines()) == len(rows)  # JSON lines, not one document
    prepare("gsm8k", tmp_path / "out.jsonl", input_path=path)
    assert [r["label"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["18", "3", "70000", "1000"]


def test_the_summary_gives_each_reason_with_its_count_and_rows_by_file_and_line(tmp_path, capsys):
    good = {"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}
    src = _jsonl(tmp_path / "gsm8k.jsonl", [
        good, {"question": "  ", "answer": "#### 5"}, {"question": "What is 3 + 3?", "answer": None},
        {"question": "What is 4 + 4?", "answer": "4 + 4 = 8"}, {"question": "What is 5 + 5?", "answer": "#### )("},
        {"question": "What is 6 + 6?", "answer": "6 + 6 = 12"}, {"question": "What is 7 + 7?", "answer": "14"},
        {"question": "What is 8 + 8?", "answer": "16"}, {"question": "What is 9 + 9?", "answer": "18"}])
    out = tmp_path / "out.jsonl"
    assert cli_main(["--source", "gsm8k", "--input", str(src), "--out", str(out)]) == 0
    assert capsys.readouterr().err == (
        f"wrote 1 rows to {out}; skipped 8 rows: 1 with an empty or missing question ({src}:2); "
        f"1 with an empty or null answer ({src}:3); "
        f"5 with a GSM8K solution without '#### <answer>' ({src}:4, {src}:6, {src}:7, ... (+2 more)); "
        f"1 with a label math-verify cannot parse ({src}:5) (each in {out}.rejected.jsonl)\n")
    rejected = read_jsonl(tmp_path / "out.jsonl.rejected.jsonl")
    assert [r["where"] for r in rejected] == [f"{src}:{n}" for n in (2, 3, 4, 5, 6, 7, 8, 9)]


def test_every_row_is_checked_against_the_layout_of_the_first(tmp_path):
    """A row in another layout is an error naming its file and line, not a row silently skipped as 'empty'."""
    rows = [json.loads(line) for line in (FIXTURES / "math500.jsonl").read_text().splitlines()]
    rows[2] = {"question": rows[2]["problem"], "answer": rows[2]["answer"]}
    src = _jsonl(tmp_path / "math500.jsonl", rows)
    with pytest.raises(DataPrepError) as e:
        prepare("math500", tmp_path / "out.jsonl", input_path=src)
    assert str(e.value) == (f"{src}:3: no column problem, which the layout of {src}:1 has (found question, answer)")
    assert not (tmp_path / "out.jsonl").exists()


def test_the_dapo_file_is_streamed_and_deduplicated(tmp_path):
    """The published DAPO-Math-17k holds about 1.79M rows, mostly repeats, and was loaded whole (about 6 GB). Here
    60,000 rows of its layout (20 problems, each 3,000 times) are read in batches: the Python memory peak stays a
    few MB (6 MB measured; loading the table whole as Python rows peaked at 90 MB), and each problem is written
    once."""
    import tracemalloc

    import pyarrow as pa

    shipped = pq.read_table(FIXTURES / "dapo_math_17k.parquet").to_pylist()[0]
    rows = [{**shipped, "prompt": [{"content": DAPO_HEAD + f"What is {k} times 7?" + DAPO_TAIL, "role": "user"}],
             "reward_model": {"ground_truth": str(7 * k), "style": "rule-lapped"}, "extra_info": {"index": str(i)}}
            for i, k in enumerate(list(range(20)) * 3000)]
    path = tmp_path / "dapo-math-17k.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=10_000)
    del rows
    prepare("dapo_math_17k", tmp_path / "warm.jsonl", input_path=path, limit=1)  # lazy imports: not the reading's
    tracemalloc.start()
    try:
        report = prepare("dapo_math_17k", tmp_path / "out.jsonl", input_path=path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 25e6, f"peak {peak / 1e6:.0f} MB"
    assert (report.written, report.duplicates) == (20, 59_980)
    from openrlhf_copo.data_prep import load_records

    assert not isinstance(load_records([path])[1], (list, tuple))  # an iterator: one batch at a time
