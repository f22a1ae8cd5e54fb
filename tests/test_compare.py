"""`openrlhf_copo.compare`: each run's command line, the prompts it trains on, and the paired report, on small
files written here (the whole tool through the real pipeline: tests/e2e/test_compare_cpu.py)."""

import collections
import json
from pathlib import Path

import pytest

from openrlhf_copo import compare
from openrlhf_copo.openrlhf_ext.config import attainable_blends
from tests_support import REPO


def test_the_rho_that_keeps_every_mixed_split():
    """(G-1)+1 is the most lopsided split: H = -(5/6 log2 5/6 + 1/6 log2 1/6) = 0.650 bits at G = 6, 0.811 at G = 4;
    w_local >= 0.99 needs H - rho >= ln(99) / 20 = 0.2298. So rho 0.42 at G = 6 and 0.58 at G = 4, and the
    benchmark's copo_selective_rho04 keeps every split of 6 responses at w_local >= 0.99."""
    assert compare.rho_keeping_every_split(6) == 0.42
    assert compare.rho_keeping_every_split(4) == 0.58
    rho = float(compare.METHODS["copo_selective_rho04"][-1])
    mixed = [w for pattern, _, w in attainable_blends(6, 20.0, rho, 2.0) if len(pattern) > 1]
    assert min(mixed) == pytest.approx(1 / (1 + 2.718281828 ** (-20 * (0.6500224 - 0.4))), rel=1e-4)
    assert min(mixed) > 0.99


def test_each_method_of_a_published_clip_runs_at_it_and_the_adaptive_ones_at_their_budget(load_args, tmp_path):
    """A method whose mode carries its paper's clip range (`core.Mode.clip`) runs at that range, so its start-up warns
    of nothing; the combination of Reinforce-Ada with COPO's global term (issue 52, part 4) is one of them, and the
    plan counts it at Reinforce-Ada's budget."""
    from openrlhf_copo.core import mode_info
    from openrlhf_copo.openrlhf_ext.config import copo_warnings, is_copo, resolve_mode

    assert compare.METHODS["reinforce_ada_copo"][:2] == ["--advantage_estimator", "reinforce_ada_copo"]
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=6, steps=2)
    published = []
    for method in compare.METHODS:
        a = load_args(compare.run_argv(s, method, 0, tmp_path / method, tmp_path / "train.jsonl", step0=False))
        info = mode_info(resolve_mode(a)) if is_copo(a) else None
        if info is not None and info.clip is not None:
            published.append(method)
            assert tuple(a.actor.eps_clip_low_high) == info.clip, method
            assert not [w for w in copo_warnings(a) if "clips the ratio" in w], method
    assert {"ngrpo", "rl_zvp", "reinforce_ada", "reinforce_ada_copo"} <= set(published)
    assert compare.sampling_budget("reinforce_ada_copo", []) == 32


def setting(tmp_path, **kw):
    return compare.Setting(model="base-model", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", **kw)


def test_each_run_is_the_method_the_paired_flags_the_setting_then_the_users_flags(load_args, tmp_path):
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=8, steps=3, lr=2e-6, eval_every=2,
                start=str(tmp_path / "plateau-start"),
                extra=["--rollout.max_new_tokens", "512", "--train.max_epochs", "2"])
    argv = compare.run_argv(s, "ngrpo", 3, tmp_path / "ngrpo-seed3", tmp_path / "train.jsonl", step0=True)
    a = load_args(argv)
    assert a.algo.advantage.estimator == "ngrpo" and tuple(a.actor.eps_clip_low_high) == (0.16, 0.24)
    assert a.copo.seeded_rollouts and a.copo.eval_after_train and a.copo.same_pipeline and a.copo.push_metrics
    assert a.copo.eval_greedy and a.copo.eval_before_train and a.train.seed == 3
    assert a.actor.model_name_or_path == str(tmp_path / "plateau-start")  # the start checkpoint, not the model
    assert (a.rollout.batch_size, a.rollout.n_samples_per_prompt, a.train.batch_size) == (8, 6, 48)
    assert a.rollout.max_new_tokens == 512 and a.train.max_epochs == 2  # the user's flags win over the defaults
    assert a.copo.metrics_file == str(tmp_path / "ngrpo-seed3" / "metrics.jsonl")
    assert a.ckpt.save_steps == 10 and a.ckpt.load_enable and Path(a.ckpt.output_dir).parent.name == "scratch"
    later = load_args(compare.run_argv(s, "dapo", 3, tmp_path / "dapo-seed3", tmp_path / "train.jsonl", step0=False))
    assert not later.copo.eval_before_train  # the seed's step-0 evaluation is made once
    # given after --, the step-0 flag is still the seed's first run's alone, and given once
    s.extra.append("--copo.eval_before_train")
    first = compare.run_argv(s, "grpo", 3, tmp_path / "grpo-seed3", tmp_path / "train.jsonl", step0=True)
    assert first.count("--copo.eval_before_train") == 1
    assert "--copo.eval_before_train" not in compare.run_argv(s, "dapo", 3, tmp_path / "dapo-seed3",
                                                              tmp_path / "train.jsonl", step0=False)
    assert later.algo.advantage.estimator == "group_norm" and later.copo.same_pipeline


def test_the_runs_train_on_exactly_their_prompts(tmp_path):
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cut, episodes = compare.train_file(setting(tmp_path, prompts_per_step=3, steps=2), tmp_path / "out")
    assert [json.loads(x)["prompt"] for x in cut.read_text().splitlines()] == ["q0", "q1", "q2", "q3", "q4", "q5"]
    assert episodes == 1
    assert compare.train_file(setting(tmp_path, prompts_per_step=5, steps=2), tmp_path / "out") == \
        (tmp_path / "train.jsonl", 1)
    with pytest.raises(SystemExit, match="10 prompts, fewer than --prompts_per_step 11"):
        compare.train_file(setting(tmp_path, prompts_per_step=11, steps=1), tmp_path / "out")


def test_whole_passes_that_use_every_prompt_stay_openrlhf_episodes_over_the_same_file(tmp_path, load_args):
    """Where whole passes use every prompt the data and the steps allow, a run is OpenRLHF episodes as before issue
    49, byte for byte: 4 steps of 5 from 10 prompts are 2 passes over the given file, 15 steps of 2 are 3; 2 steps
    of 4 from 10 are one pass over the first 8. (6 steps of 3 were 2 passes over the first 9: now all 10 are drawn.)"""
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = setting(tmp_path, prompts_per_step=5, steps=4)
    assert compare.train_file(s, tmp_path / "out") == (tmp_path / "train.jsonl", 2)
    args = load_args(compare.run_argv(s, "copo", 0, tmp_path / "copo-seed0", tmp_path / "train.jsonl", True, 2))
    assert (args.train.num_episodes, args.rollout.batch_size) == (2, 5)
    assert compare.train_file(setting(tmp_path, prompts_per_step=2, steps=15), tmp_path / "out") == \
        (tmp_path / "train.jsonl", 3)
    cut, episodes = compare.train_file(setting(tmp_path, prompts_per_step=4, steps=2), tmp_path / "out")
    assert cut.read_text() == "".join(json.dumps(r) + "\n" for r in rows[:8]) and episodes == 1
    assert compare.prompt_plan(setting(tmp_path, prompts_per_step=3, steps=6), tmp_path / "out")["distinct"] == 10


def test_more_steps_than_the_prompts_use_every_prompt_in_one_episode_of_whole_passes_and_a_partial_one(tmp_path):
    """12 steps of 3 from 10 prompts: until issue 49, 4 passes over the first 9 prompts; now one episode over 36 rows,
    every prompt 3 times and 6 of them (a fixed choice) a 4th: 10 distinct, 3.6 passes, whole steps only."""
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = setting(tmp_path, prompts_per_step=3, steps=12)
    cut, episodes = compare.train_file(s, tmp_path / "out")
    drawn = [json.loads(x)["prompt"] for x in cut.read_text().splitlines()]
    assert (len(drawn), episodes, len(set(drawn))) == (36, 1, 10)
    assert sorted(drawn.count(q) for q in set(drawn)) == [3] * 4 + [4] * 6
    plan = compare.prompt_plan(s, tmp_path / "out")
    assert {k: plan[k] for k in ("source_rows", "distinct", "drawn", "episodes")} == \
        {"source_rows": 10, "distinct": 10, "drawn": 36, "episodes": 1}
    assert plan["passes"] == pytest.approx(3.6)
    assert compare.train_file(s, tmp_path / "again")[0].read_bytes() == cut.read_bytes()  # the same for every run


@pytest.mark.parametrize("steps, old_distinct", [(60, 15_360), (35, 3_584), (61, 512)])
def test_the_issues_numbers_every_prompt_of_dapo_math_17k_is_drawn(tmp_path, steps, old_distinct):
    """Issue 49: 17,398 prompts, 512 per step. The fewest whole passes that divide the steps used 15,360 prompts at 60
    steps, 3,584 at 35 and 512 at 61 (61 passes over the first 512). Now every run draws steps x 512 rows from all
    17,398: 1.77, 1.03 and 1.80 passes, each prompt once or twice, in one episode."""
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "{n}"}}\n' for n in range(17_398)))
    s = setting(tmp_path, prompts_per_step=512, steps=steps)
    plan = compare.prompt_plan(s, tmp_path / "out")
    assert (plan["distinct"], plan["drawn"], plan["episodes"]) == (17_398, steps * 512, 1) and old_distinct < 17_398
    assert plan["passes"] == pytest.approx(steps * 512 / 17_398)
    cut, episodes = compare.train_file(s, tmp_path / "out")
    drawn = [json.loads(x)["prompt"] for x in cut.read_text().splitlines()]
    assert len(drawn) == steps * 512 and len(set(drawn)) == 17_398 and episodes == 1
    assert max(collections.Counter(drawn).values()) == 2


@pytest.mark.parametrize("rows, per_step, steps, passes", [
    (17_398, 512, 33, 1), (17_398, 512, 35, None), (17_398, 512, 60, None), (17_398, 512, 61, None),
    (17_408, 512, 34, 1), (17_408, 512, 68, 2), (17_408, 512, 102, 3), (17_408, 512, 35, None),
    (10, 5, 4, 2), (10, 5, 3, None), (10, 2, 15, 3), (10, 4, 2, 1), (10, 3, 6, None)])
def test_whole_passes_are_whole_steps_that_fill_the_run(rows, per_step, steps, passes):
    """Worked by hand: 33 x 512 = 16,896 fit in DAPO-Math-17k's 17,398 prompts, one pass; 17,398 is no multiple of
    512, so from 34 steps on no pass is whole steps. 17,408 = 34 x 512: 68 steps are 2 passes, 102 are 3, 35 are no
    whole number of them. 10 prompts of 5 a step: a pass is 2 steps, so 4 steps are 2 passes and 3 steps none."""
    assert compare.whole_passes(steps, per_step, rows) == passes


def test_a_rerun_with_other_training_data_gets_its_rows_not_a_stale_cut(tmp_path):
    """The cut is named by the sha256 of its source's bytes and the layout: a rerun in the same --out with another
    --train_data (or the same path rewritten) trains on the new rows; it was reused by its row count alone."""
    for name, prefix in (("a.jsonl", "a"), ("b.jsonl", "b")):
        (tmp_path / name).write_text("".join(f'{{"prompt": "{prefix}{n}", "label": "1"}}\n' for n in range(10)))
    cut_a, _ = compare.train_file(compare.Setting(model="m", train=tmp_path / "a.jsonl", test=tmp_path / "t.jsonl",
                                                  prompts_per_step=3, steps=2), tmp_path / "out")
    cut_b, _ = compare.train_file(compare.Setting(model="m", train=tmp_path / "b.jsonl", test=tmp_path / "t.jsonl",
                                                  prompts_per_step=3, steps=2), tmp_path / "out")
    assert [json.loads(x)["prompt"] for x in cut_b.read_text().splitlines()] == [f"b{n}" for n in range(6)]
    assert cut_a != cut_b and cut_a.read_text().startswith('{"prompt": "a0"')
    (tmp_path / "a.jsonl").write_text("".join(f'{{"prompt": "c{n}", "label": "1"}}\n' for n in range(10)))
    cut_c, _ = compare.train_file(compare.Setting(model="m", train=tmp_path / "a.jsonl", test=tmp_path / "t.jsonl",
                                                  prompts_per_step=3, steps=2), tmp_path / "out")
    assert cut_c.read_text().startswith('{"prompt": "c0"')


def write_run(out: Path, method: str, seed: int, outcomes: str, first_step: dict, hours: float = 0.1) -> dict:
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": 0, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": "0101"},
            {"step": 1, **first_step},
            {"step": 1, "eval": 1, "eval_x_greedy": outcomes.count("1") / 4, "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"method": method, "seed": seed, "wall_seconds": hours * 3600}
    (d / "done.json").write_text(json.dumps(info))
    return info


def test_the_report_pairs_each_method_with_grpo_prompt_by_prompt_and_over_seeds(tmp_path):
    """Two seeds, 4 held-out prompts. COPO - GRPO per prompt: seed 0 (1100 - 1000) = [0, 1, 0, 0], gain 0.25;
    seed 1 (1110 - 0110) = [1, 0, 0, 0], gain 0.25; seed-level mean 0.25, SE 0: interval [0.25, 0.25]. NGRPO, seed 0
    only (0000 - 1000 = [-1, 0, 0, 0]): gain -0.25, std 0.5 (ddof 1), prompt-level SE 0.25, interval -0.25 +- 1.96 x
    0.25. GRPO's final accuracy: 0.25 and 0.5, mean 0.375, SE 0.125."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    infos = [write_run(tmp_path, "grpo", 0, "1000", first), write_run(tmp_path, "copo", 0, "1100", first),
             write_run(tmp_path, "ngrpo", 0, "0000", first), write_run(tmp_path, "grpo", 1, "0110", first),
             write_run(tmp_path, "copo", 1, "1110", {**first, "copo_zero_std": 0.25})]
    result = compare.report(tmp_path, infos)
    copo = result["table"]["copo"]
    assert copo["minus_baseline"]["mean"] == pytest.approx(0.25) and copo["minus_baseline"]["ci95"] == \
        pytest.approx((0.25, 0.25))
    assert [p["gain"] for p in copo["minus_baseline"]["per_seed"]] == pytest.approx([0.25, 0.25])
    assert copo["first_step"]["copo_zero_std"] == pytest.approx(0.5)  # (0.75 + 0.25) / 2
    assert copo["final"][0] == pytest.approx((0.5 + 0.75) / 2)
    ngrpo = result["table"]["ngrpo"]["minus_baseline"]
    assert ngrpo["mean"] == pytest.approx(-0.25) and ngrpo["ci95"] == pytest.approx((-0.25 - 1.96 * 0.25,
                                                                                     -0.25 + 1.96 * 0.25))
    text = compare.markdown(result)
    assert "| grpo | 2 | 0.375 +- 0.125 | (baseline) | 0.75 | 0.50 | 0.25 | 0.20 |" in text
    assert "| copo | 2 | 0.625 +- 0.125 | +0.250 [+0.250, +0.250] over seeds | 0.50 |" in text
    assert "| ngrpo | 1 | 0.000 | -0.250 [-0.740, +0.240] over prompts (one seed) |" in text


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


def test_dapos_first_step_is_read_from_its_filter(tmp_path):
    """DAPO (OpenRLHF's group_norm) logs no copo_* values; its filter logs 100 x responses kept / prompts drawn. At
    G = 6, 240 means 2.4 of 6 responses per drawn prompt kept: 0.4 of the responses carry a gradient, 0.6 of the
    groups had zero variance."""
    infos = [write_run(tmp_path, "grpo", 0, "1000", {"copo_zero_std": 0.5, "copo_signal_copo": 0.5}),
             write_run(tmp_path, "dapo", 0, "1100", {"dynamic_filtering_pass_rate": 240.0})]
    first = compare.report(tmp_path, infos, samples_per_prompt=6)["table"]["dapo"]["first_step"]
    assert first["copo_signal_copo"] == pytest.approx(0.4) and first["copo_zero_std"] == pytest.approx(0.6)
    unread = compare.report(tmp_path, infos)["table"]["dapo"]["first_step"]  # G unknown: not guessed
    assert unread["copo_signal_copo"] != unread["copo_signal_copo"]


def test_the_cli_refuses_a_comparison_without_the_baseline(tmp_path, capsys):
    from openrlhf_copo.cli import compare as cli

    with pytest.raises(SystemExit):
        cli.main(["--model", "m", "--train_data", "t", "--eval_data", "e", "--out", str(tmp_path), "--methods", "copo"])
    assert "--methods must include grpo" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Issue 45: every held-out source and the pooled result; runs made with other settings refused; --report_only.


def write_sources_run(out: Path, method: str, seed: int, outcomes: dict, settings: dict = None) -> dict:
    """A finished run whose final evaluation has one greedy evaluation per data source, as OpenRLHF logs a held-out
    file that mixes `datasource`s (eval_<source>_greedy and its per-prompt outcomes), made in this environment."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    row = {"step": 1, "eval": 1}
    for source, o in outcomes.items():
        row.update({f"eval_{source}_greedy": o.count("1") / len(o), f"eval_{source}_greedy_outcomes": o})
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "copo_zero_std": 0.5}) + "\n" + json.dumps(row) + "\n")
    info = {"method": method, "seed": seed, "wall_seconds": 60.0, **({"settings": settings} if settings else {}),
            "environment": compare.environment()}
    (d / "done.json").write_text(json.dumps(info))
    return info


def test_the_report_gives_every_held_out_source_and_the_pooled_result(tmp_path):
    """COPO +0.1 on 10 AIME prompts and -0.5 on 50 MATH-500 prompts: pooled over the 60 prompts, (1 - 25) / 60 = -0.4,
    not AIME's +0.100 (the first eval_*_greedy key in alphabetical order, all that was read before)."""
    grpo = {"aime24": "0" * 10, "math500": "1" * 25 + "0" * 25}
    copo = {"aime24": "1" + "0" * 9, "math500": "0" * 50}
    infos = [write_sources_run(tmp_path, "grpo", 0, grpo), write_sources_run(tmp_path, "copo", 0, copo)]
    result = compare.report(tmp_path, infos)
    row = result["table"]["copo"]
    assert row["minus_baseline"]["mean"] == pytest.approx(-0.4)
    assert result["sources"] == ["aime24", "math500"] and row["prompts"] == 60
    assert row["final"][0] == pytest.approx(1 / 60)
    assert row["sources"]["aime24"]["minus_baseline"]["mean"] == pytest.approx(0.1)
    assert row["sources"]["math500"]["minus_baseline"]["mean"] == pytest.approx(-0.5)
    assert row["sources"]["math500"]["prompts"] == 50
    text = compare.markdown(result)
    assert "| copo | 1 | 0.017 | -0.400 [" in text
    assert "| copo | aime24 | 10 | 0.100 | +0.100 [" in text and "| copo | math500 | 50 | 0.000 | -0.500 [" in text


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


def test_the_cli_needs_model_and_data_only_to_run(tmp_path, capsys):
    from openrlhf_copo.cli import compare as cli

    with pytest.raises(SystemExit):
        cli.main(["--out", str(tmp_path), "--model", "m"])
    assert "--train_data, --eval_data required to run (not with --report_only)" in capsys.readouterr().err


def test_the_compare_command_is_written_once():
    """One copy of the command at the paper's size (docs/gpu-recipe.md); the README and the CLI's docstring link to
    it. Three copies had drifted apart (one without the micro-batch flags)."""
    from openrlhf_copo.cli import compare as cli

    copies = {path: (REPO / path).read_text().count("openrlhf_copo.cli.compare --model")
              for path in ("README.md", "docs/gpu-recipe.md", "docs/benchmarks.md", "openrlhf_copo/cli/compare.py")}
    assert copies == {"README.md": 0, "docs/gpu-recipe.md": 1, "docs/benchmarks.md": 0, "openrlhf_copo/cli/compare.py": 0}
    assert "docs/gpu-recipe.md#comparing-methods-at-the-papers-size" in (REPO / "README.md").read_text()
    assert "docs/gpu-recipe.md" in cli.__doc__ and "Comparing methods at the paper's size" in cli.__doc__


def test_the_documented_command_fits_one_8_gpu_node_and_dapo_math_17k(tmp_path, load_args):
    """The command of docs/gpu-recipe.md, as written there: one node of 8 GPUs shared by the actor and the vLLM
    engines (colocated), and steps x prompts per step drawn from all of DAPO-Math-17k's ~17.4k distinct prompts (one
    episode of 1.94 passes), not refused for having fewer prompts than 66 x 512; none of its flags after -- redefines a
    method or a setting."""
    import shlex

    from openrlhf_copo.cli import compare as cli

    text = (REPO / "docs" / "gpu-recipe.md").read_text()
    block = text[text.index("python -m openrlhf_copo.cli.compare --model"):]
    command = " ".join(line.split("#")[0].rstrip(" \\") for line in block[:block.index("```")].splitlines())
    argv = shlex.split(command)[3:]
    i = argv.index("--")
    args = cli.parser().parse_args(argv[:i])
    rows = [{"prompt": [{"role": "user", "content": f"q{n}"}], "label": str(n)} for n in range(17_398)]
    (tmp_path / "dapo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "math500.jsonl").write_text('{"prompt": "p", "label": "1", "datasource": "math500"}\n' * 500)
    s = compare.Setting(model=args.model, train=tmp_path / "dapo.jsonl", test=tmp_path / "math500.jsonl",
                        samples_per_prompt=args.samples_per_prompt, prompts_per_step=args.prompts_per_step,
                        steps=args.steps, lr=args.lr, eval_every=args.eval_every, extra=argv[i + 1:])
    train, episodes = compare.train_file(s, tmp_path / "out")
    drawn = train.read_text().splitlines()
    assert len(drawn) * episodes == args.steps * args.prompts_per_step and len(set(drawn)) == 17_398
    run = load_args(compare.run_argv(s, "copo", 0, tmp_path / "out" / "copo-seed0", train, True, episodes))
    assert run.train.colocate_all and run.actor.num_nodes * run.actor.num_gpus_per_node == 8
    assert run.vllm.num_engines * run.vllm.tensor_parallel_size == 8
    assert (run.rollout.batch_size, run.rollout.n_samples_per_prompt, run.actor.adam.lr) == (512, 6, 1e-6)
    plan = compare.plan(s, ["grpo", "copo"], args.seeds, tmp_path / "plan")
    assert plan["cost"]["gpu_hours"] == pytest.approx(4 * 66 * 0.2) and plan["held_out"] == {"math500": 500}


# ---------------------------------------------------------------------------------------------
# Issue 49: flags after -- that redefine a method, --report_only, the intervals, --dry_run, --help.


#: What the CPU path needs of a run that OpenRLHF's defaults do not give (cpu.cpu_problems refuses nccl and
#: flash-attention); fp32 is the CPU demo's dtype.
CPU_FLAGS = ["--vllm.sync_backend", "gloo", "--ds.attn_implementation", "sdpa", "--ds.param_dtype", "fp32"]


def _data(tmp_path, rows: int = 10) -> None:
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(rows)))
    (tmp_path / "test.jsonl").write_text('{"prompt": "t", "label": "1"}\n' * 4)


def test_flags_after_the_separator_may_not_redefine_a_method_the_tool_or_another_methods_run(tmp_path):
    """`copo_selective_rho04 -- --copo.rho 1.5` trained at rho 1.5 and reported rho 0.4. Refused, naming both, in
    any spelling train_ppo_ray reads (--flag=value, an alias, several values; an abbreviation, which train_ppo_ray
    refuses, is refused as an unknown flag); the same value the
    method or the tool sets is harmless and kept; a flag of one method reaches the others' runs: refused."""
    _data(tmp_path)

    def conflicts(methods, *extra, seeds=(0,)):
        s = setting(tmp_path, prompts_per_step=3, steps=2, extra=list(extra))
        return compare.extra_conflicts(s, methods, list(seeds), tmp_path / "out")

    assert conflicts(["copo_selective_rho04"], "--copo.rho", "1.5") == \
        ["--copo.rho 1.5 would override method copo_selective_rho04, which sets --copo.rho 0.4"]
    assert conflicts(["copo_selective_rho04"], "--copo.rho=1.5") == \
        ["--copo.rho=1.5 would override method copo_selective_rho04, which sets --copo.rho 0.4"]
    assert conflicts(["copo_selective_rho04"], "--copo.rho", "0.4") == []  # what the method sets anyway
    for method, sets in (("ngrpo", "0.16 0.24"), ("rl_zvp", "0.2 0.28"), ("dapo", "0.2 0.28")):
        assert conflicts([method], "--actor.eps_clip_low_high", "0.1", "0.3") == \
            [f"--actor.eps_clip_low_high 0.1 0.3 would override method {method}, which sets "
             f"--actor.eps_clip_low_high {sets}"]
    assert conflicts(["grpo"], "--algo.advantage.estimator=group_norm") == \
        ["--algo.advantage.estimator=group_norm would override method grpo, which sets --advantage_estimator copo"]
    assert conflicts(["grpo", "copo"], "--copo.mode", "grpo") == \
        ["--copo.mode grpo is method grpo's flag (--copo.mode grpo): after -- it would reach the copo runs too"]
    # an abbreviation is no flag of train_ppo_ray's, which takes whole flags only: named, as the run would refuse it
    assert conflicts(["grpo"], "--rollout.n_samples_per", "8") == \
        ["train_ppo_ray does not know --rollout.n_samples_per (misspelt, or abbreviated: it takes whole flags only; "
         "`python -m openrlhf_copo.cli.train_ppo_ray --help` lists them)"]
    assert conflicts(["grpo"], "--train.seed", "0", seeds=(0, 1)) == \
        ["--train.seed 0 would override the tool's --seeds, which sets --train.seed 1"]
    assert conflicts(["grpo"], "--data.max_samples", "6") == \
        ["--data.max_samples 6 would override the tool's --steps x --prompts_per_step (the prompt file the tool "
         "writes)"]
    # the tool's defaults may change, and what every run has anyway is kept
    assert conflicts(["grpo", "copo"], "--algo.kl.init_coef", "0.01", "--train.num_episodes", "1",
                     "--copo.seeded_rollouts", "--copo.rho", "1.0") == []


def test_the_cli_refuses_a_redefining_flag_before_any_run_starts(tmp_path):
    from openrlhf_copo.cli import compare as cli

    _data(tmp_path)
    with pytest.raises(SystemExit, match=r"--copo.rho 1.5 would override method copo_selective_rho04, which sets "
                                         r"--copo.rho 0.4"):
        cli.main(["--model", "m", "--train_data", str(tmp_path / "train.jsonl"), "--eval_data",
                  str(tmp_path / "test.jsonl"), "--methods", "grpo", "copo_selective_rho04", "--seeds", "0",
                  "--prompts_per_step", "3", "--steps", "2", "--out", str(tmp_path / "out"), "--", "--copo.rho",
                  "1.5"])
    assert not list((tmp_path / "out").glob("*-seed*"))  # no run began


def test_the_cpu_presets_pass_no_flag_that_redefines_a_method(tmp_path):
    """The benchmark's presets (`job.compare_setting`: the demo's flags less the tool's) repeat only what the tool
    sets anyway (--train.num_episodes 1): every method of the regimes' screen and of the learning curve runs."""
    from openrlhf_copo.cpu_demo import job

    _data(tmp_path, rows=12)
    for G, overrides in ((6, {"--copo.eval_sampled_prompts": "48"}),
                         (4, {"--ds.zero_stage": "2", "--train.micro_batch_size": "8"})):
        s = job.compare_setting("model", tmp_path / "train.jsonl", tmp_path / "test.jsonl", 2, 2, G, overrides)
        assert compare.extra_conflicts(s, list(compare.METHODS), [0, 1], tmp_path / "out") == []


def write_recorded(out: Path, method: str, seed: int, outcomes: str, first: dict, settings: dict) -> None:
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": 1, **first}, {"step": 1, "eval": 1, "eval_x_greedy": outcomes.count("1") / len(outcomes),
                                   "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "done.json").write_text(json.dumps({"method": method, "seed": seed, "wall_seconds": 60.0,
                                             "settings": settings}))


def test_report_only_reports_every_run_there_at_its_recorded_g_and_names_what_a_filter_leaves_out(tmp_path):
    """3 methods x 3 seeds made at G = 16: --report_only alone reported grpo and copo of seeds 0 and 1 (the run
    defaults) and read DAPO's filter at G = 6 (a share of 1.33). Now all 9 runs at G = 16: 480 / (100 x 16) = 0.3;
    --methods / --seeds filter and the report names the runs they left out."""
    from openrlhf_copo.cli import compare as cli

    settings = {"--samples_per_prompt": 16, "--steps": 1, "the flags after --": []}
    for seed in range(3):
        write_recorded(tmp_path, "grpo", seed, "1000", {"copo_zero_std": 0.5}, settings)
        write_recorded(tmp_path, "copo", seed, "1100", {"copo_zero_std": 0.5}, settings)
        write_recorded(tmp_path, "dapo", seed, "1010", {"dynamic_filtering_pass_rate": 480.0}, settings)
    assert cli.main(["--report_only", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert {m: row["seeds"] for m, row in saved["table"].items()} == {m: [0, 1, 2] for m in ("grpo", "copo", "dapo")}
    assert saved["samples_per_prompt"] == 16 and saved["left_out"] == []
    assert saved["table"]["dapo"]["first_step"]["copo_signal_copo"] == pytest.approx(0.3)
    assert cli.main(["--report_only", "--out", str(tmp_path), "--methods", "grpo", "copo", "--seeds", "0", "1"]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert list(saved["table"]) == ["grpo", "copo"] and saved["table"]["copo"]["seeds"] == [0, 1]
    assert sorted(saved["left_out"]) == ["copo-seed2", "dapo-seed0", "dapo-seed1", "dapo-seed2", "grpo-seed2"]
    assert "Left out by --methods / --seeds: " in (tmp_path / "report.md").read_text()
    with pytest.raises(SystemExit, match="--samples_per_prompt 6, but the runs there were made with 16"):
        cli.main(["--report_only", "--out", str(tmp_path), "--samples_per_prompt", "6"])


@pytest.mark.parametrize("dof, quantile", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (10, 2.2281), (11, 2.2010),
                                           (50, 2.0086), (1000, 1.9623)])
def test_the_t_quantiles_are_exact_for_any_number_of_seeds(dof, quantile):
    """Student's t, two-sided 95% (the 0.975 quantile), against the published tables; the old table stopped at 10 dof
    and used 1.96 beyond (11 dof: 2.201, the interval 11% too narrow). And the 0.8 quantile (power): 0.8791 at 10."""
    assert compare.t_quantile(0.975, dof) == pytest.approx(quantile, abs=1e-4)
    assert compare.t_quantile(0.8, 10) == pytest.approx(0.8791, abs=1e-4)


def test_twelve_seeds_get_the_exact_interval_and_the_report_says_what_each_interval_is_over(tmp_path):
    """12 seeds of 4 held-out prompts, COPO minus GRPO +0.25 on 6 seeds and 0 on 6: mean 0.125, SD 0.1306 (ddof 1),
    SE 0.0377; the interval is 0.125 +- 2.201 x SE (11 dof), not 1.96 x SE."""
    infos = []
    for seed in range(12):
        infos.append(write_run(tmp_path, "grpo", seed, "1000", {"copo_zero_std": 0.5}))
        infos.append(write_run(tmp_path, "copo", seed, "1100" if seed < 6 else "1000", {"copo_zero_std": 0.5}))
    d = compare.report(tmp_path, infos)["table"]["copo"]["minus_baseline"]
    se = (sum((g - 0.125) ** 2 for g in [0.25] * 6 + [0.0] * 6) / 11 / 12) ** 0.5
    assert d["ci95"][1] - d["mean"] == pytest.approx(2.20099 * se, rel=1e-5) and d["over"] == "seeds"


def test_the_report_states_what_the_seeds_could_detect_and_the_seeds_a_difference_needs(tmp_path):
    """Per-seed differences with SD 0.1 (two seeds: 0.05 and 0.05 + 0.1 x sqrt 2): the 95% half-width is
    12.706 x 0.1 / sqrt 2; at 80% power they detect (12.706 + 1.376) x 0.1 / sqrt 2 = 0.996; a true difference of
    0.1 (one SD) needs 10 seeds and 0.05 needs 34, as G*Power's paired t-test gives (d = 1 and 0.5, 80%, 5%)."""
    d = compare.detectable([0.05, 0.05 + 0.1 * 2 ** 0.5], targets=(0.1, 0.05))
    assert d["sd"] == pytest.approx(0.1) and d["half_width95"] == pytest.approx(12.7062 * 0.1 / 2 ** 0.5, rel=1e-4)
    assert d["detectable"] == pytest.approx((12.7062 + 1.3764) * 0.1 / 2 ** 0.5, rel=1e-4)
    assert d["seeds_for"] == {"0.1": 10, "0.05": 34}
    assert compare.detectable([0.1])["detectable"] is None  # one seed: no spread over seeds

    infos = [write_run(tmp_path, m, seed, o, {"copo_zero_std": 0.5})
             for seed, (g, c) in enumerate([("1000", "1100"), ("0000", "1100")]) for m, o in (("grpo", g), ("copo", c))]
    result = compare.report(tmp_path, infos, targets=(0.02, 0.05))
    assert result["table"]["copo"]["minus_baseline"]["detectable"]["seeds"] == 2
    text = compare.markdown(result)
    assert "smallest true difference they detect with 80% power" in text
    assert "| seeds for 0.02 | seeds for 0.05 |" in text
    sd = 0.25 / 2 ** 0.5
    assert f"| copo | 2 | {sd:.3f} | {12.7062 * 0.125:.3f} | {(12.7062 + 1.3764) * 0.125:.3f} |" in text


def test_a_dry_run_prints_every_command_the_prompts_the_held_out_sources_and_the_cost_and_writes_nothing(
        tmp_path, capsys, load_args):
    """12 steps of 3 prompts x G 6 from 10 prompts, 2 methods x 2 seeds, a held-out file of 3 MATH-500, 2 AIME and 1
    unlabelled rows: 36 drawn from 10 distinct (3.60 passes, 1 episode); each of the 4 commands is the run's own
    (parsed, the same arguments as `run_argv`'s); 216 responses a run, 4 x 216 x 0.2 / 3072 = 0.06 GPU-hours; --out
    is never made."""
    import shlex

    from openrlhf_copo.cli import compare as cli

    _data(tmp_path)
    rows = [{"datasource": "math500"}] * 3 + [{"datasource": "aime24"}] * 2 + [{}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"prompt": "t", "label": "1", **r}) + "\n" for r in rows))
    out = tmp_path / "out"
    assert cli.main(["--model", "m", "--train_data", str(tmp_path / "train.jsonl"), "--eval_data",
                     str(tmp_path / "test.jsonl"), "--prompts_per_step", "3", "--steps", "12", "--eval_every", "5",
                     "--out", str(out), "--device", "cpu", "--dry_run", "--", "--rollout.max_new_tokens", "64",
                     *CPU_FLAGS]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    assert "36 drawn (steps x prompts per step), 10 distinct of the 10 in the file, 3.60 passes in 1 OpenRLHF " \
           "episode" in text
    assert "math500: 3, aime24: 2, default: 1" in text
    assert "216 sampled responses a run" in text and "about 0.1 GPU-hours for the 4 runs to make" in text
    commands = [shlex.split(line) for line in text.splitlines() if "openrlhf_copo.cli.train_ppo_ray" in line]
    assert len(commands) == 4
    plan = compare.prompt_plan(setting(tmp_path, prompts_per_step=3, steps=12), out)
    s = setting(tmp_path, prompts_per_step=3, steps=12, eval_every=5, device="cpu",
                extra=["--rollout.max_new_tokens", "64", *CPU_FLAGS])
    s.model = "m"
    for command, (method, seed, step0) in zip(commands, [("grpo", 0, True), ("copo", 0, False), ("grpo", 1, True),
                                                         ("copo", 1, False)]):
        assert command[3:] == compare.run_argv(s, method, seed, compare.run_dir(out, method, seed),
                                               Path(plan["file"]), step0, plan["episodes"])
    assert load_args(commands[0][3:]).rollout.max_new_tokens == 64
    assert "[grpo seed 0] evaluates at steps 0, 5, 10, 12" in text
    assert "[copo seed 0] evaluates at steps 5, 10, 12" in text
    assert "Every command checked with train_ppo_ray's parser" in text and "would be refused" not in text


def test_help_states_every_flags_default():
    """`compare --help` showed no default and six flags without help text (issue 51)."""
    import re

    from openrlhf_copo.cli import compare as cli

    text = cli.parser().format_help()
    blocks = re.split(r"\n  (?=-)", text.split("options:", 1)[1])
    flags = {block.split()[0].rstrip(","): " ".join(block.split()) for block in blocks if block.strip()}
    expected = {"--prompts_per_step": "(default: 8)", "--steps": "(default: 10)", "--lr": "(default: 1e-06)",
                "--eval_every": "(default: 5)", "--input_key": "(default: prompt)", "--label_key": "(default: label)",
                "--device": "(default: auto)", "--samples_per_prompt": "(default: 6 when running",
                "--methods": "(default: grpo copo when running", "--seeds": "(default: 0 1 when running",
                "--target_difference": "(default: 0.02 0.05)", "--report_only": "(default: False)",
                "--dry_run": "(default: False)", "--start_checkpoint": "(default: --model)"}
    for flag, default in expected.items():
        assert default in flags[flag], flag
    for flag, block in flags.items():
        if flag not in ("-h",):
            assert "default:" in block and len(block.split()) > 4, block  # a default and a help text


def test_the_plan_counts_an_adaptive_method_at_its_budget(tmp_path):
    """Reinforce-Ada draws G responses per prompt, then up to --copo.ada_budget for the prompts it has not resolved:
    the plan's cost counts its runs at the budget (an upper bound), and says so; GRPO's at G."""
    _data(tmp_path)
    s = setting(tmp_path, prompts_per_step=3, steps=2)
    base = compare.plan(s, ["grpo"], [0], tmp_path / "a")["cost"]
    assert compare.sampling_budget("grpo", []) is None and compare.sampling_budget("reinforce_ada", []) == 32
    assert compare.sampling_budget("reinforce_ada", ["--copo.ada_budget", "12"]) == 12
    both = compare.plan(s, ["grpo", "reinforce_ada"], [0], tmp_path / "b")
    G = s.samples_per_prompt
    assert both["cost"]["adaptive_budgets"] == {"reinforce_ada": 32}
    assert both["cost"]["gpu_hours"] == pytest.approx(base["gpu_hours"] * (1 + 32 / G))
    assert "reinforce_ada draws G, then more for the prompts it has not resolved, up to 32 per prompt: counted at " \
           "32 (an upper bound)." in compare.plan_text(both)


# ---------------------------------------------------------------------------------------------
# Issue 52: GRPO at Reinforce-Ada's generation budget (`grpo_4xg`, `compare.SAMPLE_FACTOR`).


def test_grpo_4xg_is_grpos_run_drawing_4g_per_prompt_in_one_optimizer_step(load_args, tmp_path):
    """8 prompts x G 6: GRPO draws 6 per prompt and trains on 48 in one optimizer step; grpo_4xg draws 24 and trains
    on 192, in one step too, and its command line is GRPO's with those two values alone changed (a METHODS entry
    could not say it: the tool's G and train batch come after the method's flags and win)."""
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=8, steps=3,
                extra=["--train.micro_batch_size", "12"])
    run = tmp_path / "run"  # one folder for both, so the paths in the two command lines agree
    grpo = compare.run_argv(s, "grpo", 3, run, tmp_path / "train.jsonl", step0=False)
    wide = compare.run_argv(s, "grpo_4xg", 3, run, tmp_path / "train.jsonl", step0=False)
    a = load_args(wide)
    assert a.algo.advantage.estimator == "copo" and a.copo.mode == "grpo"
    assert (a.rollout.batch_size, a.rollout.n_samples_per_prompt, a.train.batch_size) == (8, 24, 192)
    expected = list(grpo)
    expected[grpo.index("--rollout.n_samples_per_prompt") + 1] = "24"
    expected[grpo.index("--train.batch_size") + 1] = "192"
    assert wide == expected
    assert a.train.micro_batch_size == 12  # responses per micro-batch: the same as GRPO's
    assert a.actor.adam.lr == load_args(grpo).actor.adam.lr
    assert compare.samples_per_prompt(s, "grpo_4xg") == 24 and compare.samples_per_prompt(s, "grpo") == 6


def test_the_plan_counts_grpo_4xg_at_4g_and_a_users_flag_cannot_redefine_its_g(tmp_path):
    """2 steps x 3 prompts: GRPO's runs draw 36 responses, grpo_4xg's 144, so the two cost 5 x GRPO's alone; its
    command draws 24 per prompt. After --, --rollout.n_samples_per_prompt (any value but the run's own) and
    --train.batch_size (which would split its 4G responses into several optimizer steps) are refused."""
    _data(tmp_path)
    s = setting(tmp_path, prompts_per_step=3, steps=2)
    base = compare.plan(s, ["grpo"], [0], tmp_path / "a")["cost"]
    both = compare.plan(s, ["grpo", "grpo_4xg"], [0], tmp_path / "b")
    assert both["cost"]["sample_factors"] == {"grpo_4xg": 4} and both["cost"]["responses_per_run"] == 36
    assert both["cost"]["gpu_hours"] == pytest.approx(base["gpu_hours"] * 5)
    wide = both["runs"][1]["argv"]
    assert wide[wide.index("--rollout.n_samples_per_prompt") + 1] == "24"
    assert wide[wide.index("--train.batch_size") + 1] == "72"
    assert "grpo_4xg draws 4 x G responses per prompt and trains on all of them: counted at 4 x G." in \
        compare.plan_text(both)

    def conflicts(methods, *extra):
        return compare.extra_conflicts(setting(tmp_path, prompts_per_step=3, steps=2, extra=list(extra)), methods,
                                       [0], tmp_path / "out")

    assert conflicts(["grpo", "grpo_4xg"], "--rollout.n_samples_per_prompt", "6") == \
        ["--rollout.n_samples_per_prompt 6 would override the tool's --samples_per_prompt, which sets "
         "--rollout.n_samples_per_prompt 24"]
    assert conflicts(["grpo_4xg"], "--rollout.n_samples_per_prompt", "8") == \
        ["--rollout.n_samples_per_prompt 8 would override the tool's --samples_per_prompt, which sets "
         "--rollout.n_samples_per_prompt 24"]
    assert conflicts(["grpo", "grpo_4xg"], "--train.batch_size", "18") == \
        ["--train.batch_size 18 would change method grpo_4xg's optimizer steps per rollout batch: it trains on 4 x G "
         "responses per prompt in one step (--train.batch_size 72)"]
    assert conflicts(["grpo"], "--train.batch_size", "9") == []  # GRPO alone: the tool's default, as before
    with pytest.raises(SystemExit, match="would change method grpo_4xg's optimizer steps"):
        compare.plan(setting(tmp_path, prompts_per_step=3, steps=2, extra=["--train.batch_size", "18"]),
                     ["grpo", "grpo_4xg"], [0], tmp_path / "c")
