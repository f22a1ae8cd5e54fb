"""`openrlhf_copo.compare`: each run's command line, the prompts it trains on, and the paired report, on small
files written here (the whole tool through the real pipeline: tests/e2e/test_compare_cpu.py)."""

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


def setting(tmp_path, **kw):
    return compare.Setting(model="base-model", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", **kw)


def test_each_run_is_the_method_the_paired_flags_the_setting_then_the_users_flags(load_args, tmp_path):
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=8, steps=3, lr=2e-6, eval_every=2,
                start=str(tmp_path / "plateau-start"), extra=["--rollout.max_new_tokens", "512", "--actor.adam.lr", "5e-7"])
    argv = compare.run_argv(s, "ngrpo", 3, tmp_path / "ngrpo-seed3", tmp_path / "train.jsonl", step0=True)
    a = load_args(argv)
    assert a.algo.advantage.estimator == "ngrpo" and tuple(a.actor.eps_clip_low_high) == (0.16, 0.24)
    assert a.copo.seeded_rollouts and a.copo.eval_after_train and a.copo.same_pipeline and a.copo.push_metrics
    assert a.copo.eval_greedy and a.copo.eval_before_train and a.train.seed == 3
    assert a.actor.model_name_or_path == str(tmp_path / "plateau-start")  # the start checkpoint, not the model
    assert (a.rollout.batch_size, a.rollout.n_samples_per_prompt, a.train.batch_size) == (8, 6, 48)
    assert a.rollout.max_new_tokens == 512 and a.actor.adam.lr == 5e-7  # the user's flags win
    assert a.copo.metrics_file == str(tmp_path / "ngrpo-seed3" / "metrics.jsonl")
    assert a.ckpt.save_steps == 10 and a.ckpt.load_enable and Path(a.ckpt.output_dir).parent.name == "scratch"
    later = load_args(compare.run_argv(s, "dapo", 3, tmp_path / "dapo-seed3", tmp_path / "train.jsonl", step0=False))
    assert not later.copo.eval_before_train  # the seed's step-0 evaluation is made once
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


def test_more_steps_than_one_pass_over_the_prompts_are_openrlhf_episodes(tmp_path, load_args):
    """As OpenRLHF's episodes: 12 steps x 3 prompts from 10 prompts are 4 passes (the fewest that divide the steps
    and fit: 36 / 10 -> 4) of 3 steps over the first 9 prompts; 5 steps of 3 are 5 passes of 1 step over 3 prompts."""
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = setting(tmp_path, prompts_per_step=3, steps=12)
    cut, episodes = compare.train_file(s, tmp_path / "out")
    assert (len(cut.read_text().splitlines()), episodes) == (9, 4)
    args = load_args(compare.run_argv(s, "copo", 0, tmp_path / "copo-seed0", cut, True, episodes))
    assert (args.train.num_episodes, args.rollout.batch_size) == (4, 3)
    cut, episodes = compare.train_file(setting(tmp_path, prompts_per_step=3, steps=5), tmp_path / "out5")
    assert (len(cut.read_text().splitlines()), episodes) == (3, 5)


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
    assert "| copo | 2 | 0.625 +- 0.125 | +0.250 [+0.250, +0.250] | 0.50 |" in text


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
    file that mixes `datasource`s (eval_<source>_greedy and its per-prompt outcomes)."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    row = {"step": 1, "eval": 1}
    for source, o in outcomes.items():
        row.update({f"eval_{source}_greedy": o.count("1") / len(o), f"eval_{source}_greedy_outcomes": o})
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "copo_zero_std": 0.5}) + "\n" + json.dumps(row) + "\n")
    info = {"method": method, "seed": seed, "wall_seconds": 60.0, **({"settings": settings} if settings else {})}
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

    base = {"--model": "Qwen/Qwen2.5-3B-Instruct", "--lr": 1e-06, "--steps": 60, "the flags after --": []}
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


def test_the_readme_example_fits_one_8_gpu_node_and_dapo_math_17k(tmp_path, load_args):
    """The README's command, as written there: one node of 8 GPUs shared by the actor and the vLLM engines
    (colocated), and steps x prompts per step drawn from DAPO-Math-17k's ~17.4k distinct prompts in whole passes
    (OpenRLHF episodes), not refused for having fewer prompts than 60 x 512."""
    import shlex

    from openrlhf_copo.cli import compare as cli

    text = (REPO / "README.md").read_text()
    block = text[text.index("python -m openrlhf_copo.cli.compare --model"):]
    command = " ".join(line.split("#")[0].rstrip(" \\") for line in block[:block.index("```")].splitlines())
    argv = shlex.split(command)[3:]
    i = argv.index("--")
    args = cli.parser().parse_args(argv[:i])
    rows = [{"prompt": [{"role": "user", "content": f"q{n}"}], "label": str(n)} for n in range(17_398)]
    (tmp_path / "dapo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = compare.Setting(model=args.model, train=tmp_path / "dapo.jsonl", test=tmp_path / "math500.jsonl",
                        samples_per_prompt=args.samples_per_prompt, prompts_per_step=args.prompts_per_step,
                        steps=args.steps, lr=args.lr, eval_every=args.eval_every, extra=argv[i + 1:])
    train, episodes = compare.train_file(s, tmp_path / "out")
    passes = len(train.read_text().splitlines())
    assert passes * episodes == args.steps * args.prompts_per_step and passes <= 17_398 and passes % 512 == 0
    run = load_args(compare.run_argv(s, "copo", 0, tmp_path / "out" / "copo-seed0", train, True, episodes))
    assert run.train.colocate_all and run.actor.num_nodes * run.actor.num_gpus_per_node == 8
    assert run.vllm.num_engines * run.vllm.tensor_parallel_size == 8
    assert (run.rollout.batch_size, run.rollout.n_samples_per_prompt, run.actor.adam.lr) == (512, 6, 1e-6)
