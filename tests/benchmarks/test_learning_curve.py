"""benchmarks/learning_curve.py: every method is the demo job with only its own flags changed, and the
table reads the right metric for each (DAPO's zero-std share is what its filter dropped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openrlhf_copo import compare
from openrlhf_copo.cli.train_ppo_ray import load_args

def test_methods_differ_only_in_their_own_flags(lc, tmp_path):
    parsed = {m: load_args(lc.run_argv(m, 1, 6, 3, "model", tmp_path / "train.jsonl", tmp_path / "test.jsonl",
                                       tmp_path / m)) for m in lc.METHODS}
    for m, a in parsed.items():
        # a step control (grpo_4xsteps) trains 4 passes over the file, evaluated at each multiple of the 6 steps
        k = compare.STEP_FACTOR.get(m, 1)
        assert a.train.seed == 1 and a.eval.steps == (3 if k == 1 else 6) and a.train.num_episodes == k
        assert a.copo.eval_greedy
        assert a.copo.seeded_rollouts and a.copo.eval_after_train  # same draws; every run ends evaluated
        # the step-0 evaluation (same model, same prompts) is made once per seed, by COPO's run
        assert a.copo.eval_before_train == (m == "copo")
        assert a.data.max_samples >= lc.job.HELD_OUT_ROWS  # no cap: OpenRLHF would apply it to the held-out set too
        assert a.data.prompt_dataset == str(tmp_path / "train.jsonl") and a.eval.dataset == str(tmp_path / "test.jsonl")
        # the tool's checkpoints (issue 49): every save_every steps, loaded by a rerun of a run that stopped
        assert a.ckpt.save_steps == compare.Setting.save_every and a.ckpt.load_enable
        assert a.ds.zero_stage == 2  # the committed runs' settings, whatever the demo's
        G = lc.SAMPLES_PER_PROMPT * compare.SAMPLE_FACTOR.get(m, 1)  # grpo_4xg: 4 x G, in one optimizer step too
        assert lc.SAMPLES_PER_PROMPT == 4 and a.rollout.n_samples_per_prompt == G
        assert (a.train.batch_size, a.train.micro_batch_size) == (lc.job.PROMPTS_PER_STEP * G, 8)
        assert Path(a.ckpt.output_dir).parent.name == "scratch"  # gigabytes, deleted after the run
    assert (parsed["grpo"].algo.advantage.estimator, parsed["grpo"].copo.mode) == ("copo", "grpo")
    assert (parsed["copo"].algo.advantage.estimator, parsed["copo"].copo.mode) == ("copo", None)
    assert parsed["go_only"].algo.advantage.estimator == "go_only"
    assert parsed["copo_selective"].algo.advantage.estimator == "copo_selective"  # issue 31's controlled changes
    assert parsed["go_selective"].algo.advantage.estimator == "go_selective"
    assert parsed["copo_gated"].algo.advantage.estimator == "copo_gated"
    rho05 = parsed["copo_selective_rho05"]
    assert (rho05.algo.advantage.estimator, rho05.copo.rho, rho05.copo.gamma) == ("copo_selective", 0.5, 20.0)
    for m in ("copo_seqmean", "grpo_seqmean"):  # the released code's aggregation, COPO and its GRPO control
        assert parsed[m].actor.loss_agg_mode == "seq-mean-token-mean"
        assert parsed[m].copo.mode == parsed[m.replace("_seqmean", "")].copo.mode
    assert {a.actor.loss_agg_mode for m, a in parsed.items()
            if not m.endswith("_seqmean") and m != "copo_released"} == {"token-mean"}
    # issue 32: the zero-variance peers with their papers' clips, and the released code's COPO with its conventions
    assert (parsed["ngrpo"].algo.advantage.estimator, tuple(parsed["ngrpo"].actor.eps_clip_low_high)) == \
        ("ngrpo", (0.16, 0.24))
    assert parsed["rl_zvp"].actor.entropy_coef == 0 and tuple(parsed["rl_zvp"].actor.eps_clip_low_high) == (0.2, 0.28)
    assert parsed["dr_grpo"].copo.mode == "dr_grpo"
    released = parsed["copo_released"]
    assert (released.copo.gamma, released.copo.rho, released.copo.zero_control, released.copo.std,
            released.copo.answer_buckets, released.actor.loss_agg_mode, released.actor.dual_clip) == \
        (5.0, 1.0, "response", "unbiased", "string", "seq-mean-token-mean", 3.0)
    dapo = parsed["dapo"]
    assert dapo.algo.advantage.estimator == "group_norm"  # COPO refuses dynamic filtering: OpenRLHF's own
    assert dapo.algo.dynamic_filtering_enable and tuple(dapo.actor.eps_clip_low_high) == (0.2, 0.28)
    assert not parsed["grpo"].algo.dynamic_filtering_enable


def test_the_mixed_preset_trains_as_the_committed_runs_did(lc, tmp_path):
    """The benchmark's runs now come from the comparison tool (`openrlhf_copo.compare`, the `mixed` preset). Parsed,
    each method's command line gives OpenRLHF and COPO exactly the arguments of the command line the committed runs
    were made with (the demo's job at G = 4, ZeRO-2, micro-batch 8, checkpoints and tensorboard in a scratch folder,
    that line's paired flags; written out here as it was), but for the tensorboard folder, which the tool does not
    set, and for the checkpoints the tool has saved since issue 49 (every save_every steps, loaded by a rerun of a
    run that stopped), which change what is written, not what is trained. The flags added since
    (--copo.same_pipeline, --copo.push_metrics) restore what every run had then."""
    def committed(method, seed, run_dir):
        argv = lc.job.default_argv("model", tmp_path / "train.jsonl", tmp_path / "test.jsonl", run_dir, "copo")[2:]
        if method != "copo":
            argv.remove("--copo.eval_before_train")
        scratch = run_dir / "scratch"
        for flag, value in {"--eval.steps": "3", "--ds.zero_stage": "2", "--rollout.n_samples_per_prompt": "4",
                            "--train.batch_size": str(lc.job.PROMPTS_PER_STEP * 4), "--train.micro_batch_size": "8",
                            "--ckpt.save_steps": "-1", "--ckpt.path": str(scratch / "ckpt"),
                            "--ckpt.output_dir": str(scratch / "model"),
                            "--logger.tensorboard_dir": str(scratch / "tensorboard")}.items():
            argv[argv.index(flag) + 1] = value
        argv.remove("--ckpt.load_enable")
        return lc.METHODS[method] + ["--copo.seeded_rollouts", "--copo.eval_after_train", "--copo.same_pipeline",
                                     "--copo.push_metrics"] + argv + ["--train.seed", str(seed)]

    def flat(args, prefix=""):
        out = {}
        for k, v in vars(args).items():
            out.update(flat(v, f"{prefix}{k}.") if hasattr(v, "__dict__") else {f"{prefix}{k}": v})
        return out

    for method in ("copo", "grpo", "dapo", "rl_zvp"):
        run_dir = tmp_path / f"{method}-seed2"
        old = flat(load_args(committed(method, 2, run_dir)))
        new = flat(load_args(lc.run_argv(method, 2, 6, 3, "model", tmp_path / "train.jsonl", tmp_path / "test.jsonl",
                                         run_dir)))
        differ = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        checkpoints = {"ckpt.save_steps", "ckpt.max_num", "ckpt.load_enable"}
        assert differ - checkpoints == {"logger.tensorboard_dir"}, {k: (old.get(k), new.get(k)) for k in differ}


def _write_run(out: Path, method: str, seed: int, evals, steps, outcomes=None):
    """A run's metrics file: ``evals`` as (step, greedy accuracy, mean@2), ``steps`` as step rows, ``outcomes``
    the final evaluation's greedy verdicts."""
    d = out / f"{method}-seed{seed}"
    d.mkdir(parents=True)
    rows = [{"step": s, "eval": 1.0, "eval_arith_greedy": g, "eval_arith_greedy_se": 0.02,
             "eval_arith_mean2": m, "eval_arith_mean2_se": 0.05} for s, g, m in evals]
    if outcomes:
        rows[-1].update(eval_arith_greedy=outcomes.count("1") / len(outcomes), eval_arith_greedy_outcomes=outcomes)
    rows += [{"step": i + 1, **s} for i, s in enumerate(steps)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"method": method, "seed": seed, "wall_seconds": 120.0}


def test_table_shares_step0_counts_generated_samples_and_reads_dapo_zero_std_from_its_filter(lc, tmp_path):
    G = lc.SAMPLES_PER_PROMPT
    infos = [_write_run(tmp_path, "copo", 0, [(0, 0.5, 0.2), (2, 0.6, 0.5)],
                        [{"copo_zero_std": 0.25, "copo_signal_copo": 1.0, "prompts_consumed": 6},
                         {"copo_zero_std": 0.25, "copo_signal_copo": 1.0, "prompts_consumed": 12}]),
             _write_run(tmp_path, "copo", 1, [(0, 0.5, 0.3), (2, 0.8, 0.7)],
                        [{"copo_zero_std": 0.75, "copo_signal_copo": 1.0, "prompts_consumed": 6},
                         {"copo_zero_std": 0.75, "copo_signal_copo": 1.0, "prompts_consumed": 12}]),
             # DAPO of seed 0: no step-0 evaluation of its own; one step drew all 12 prompts (6 refills)
             _write_run(tmp_path, "dapo", 0, [(1, 0.4, 0.4)],
                        # OpenRLHF's value: 100 x kept responses / consumed prompts, so 0.6 of the groups kept
                        [{"dynamic_filtering_pass_rate": 0.6 * 100 * G, "prompts_consumed": 12}])]
    args = type("A", (), {"out": tmp_path, "methods": ["copo", "dapo"]})
    result = lc.summarize(args, infos)
    t = result["table"]
    assert t["copo"]["heldout_final"][0] == pytest.approx(0.7)
    assert t["copo"]["heldout_final"][1] == pytest.approx(0.1)  # std(0.6, 0.8) / sqrt(2)
    assert t["copo"]["gain"][0] == pytest.approx(0.2) and t["copo"]["zero_std_share"][0] == pytest.approx(0.5)
    assert t["copo"]["mean_k_final"][0] == pytest.approx(0.6)
    assert t["copo"]["generated"] == 12 * G and t["dapo"]["generated"] == 12 * G  # equal samples, 2 steps vs 1
    dapo = next(r for r in result["runs"] if r["method"] == "dapo")
    assert [(e["step"], e["greedy"], e.get("shared", False)) for e in dapo["evals"]] == [(0, 0.5, True), (1, 0.4, False)]
    assert t["dapo"]["gain"][0] == pytest.approx(-0.1)  # from COPO seed 0's step 0, shared
    assert t["dapo"]["zero_std_share"][0] == pytest.approx(0.4) and t["dapo"]["signal_share"][0] == pytest.approx(0.6)
    assert t["dapo"]["seeds"] == 1 and t["dapo"]["heldout_final"][1] != t["dapo"]["heldout_final"][1]  # nan SE
    lc.plot(result, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_first_batch_agreement_compares_step_one_of_the_methods_that_log_it(lc, tmp_path):
    step1 = {"copo_correct": 0.375, "copo_entropy": 1.25}
    infos = [_write_run(tmp_path, "copo", 0, [(0, 0.5, 0.5)], [step1]),
             _write_run(tmp_path, "grpo", 0, [(1, 0.5, 0.5)], [step1]),
             _write_run(tmp_path, "dapo", 0, [(1, 0.5, 0.5)], [{"copo_correct": 0.5, "copo_entropy": 1.0}]),
             _write_run(tmp_path, "copo", 1, [(0, 0.5, 0.5)], [step1]),
             _write_run(tmp_path, "grpo", 1, [(1, 0.5, 0.5)], [{**step1, "copo_correct": 0.4166}]),
             _write_run(tmp_path, "copo", 2, [(0, 0.5, 0.5)], [step1])]  # nothing to compare with
    runs = lc.summarize(type("A", (), {"out": tmp_path, "methods": ["copo", "grpo", "dapo"]}), infos)["runs"]
    assert lc.first_batch_agreement(runs) == {0: True, 1: False}


def test_copo_minus_each_method_is_paired_by_prompt_and_seed(lc, tmp_path):
    """Seed 0: COPO 1101, GRPO 1001 -> d = 0 1 0 0, +0.25, SE sd(d)/2 = 0.5/2 = 0.25; seed 1: COPO 1111, GRPO 1100
    -> +0.5 (SE 0.2887). Over seeds: mean 0.375, sd 0.17678, t(1) 12.706 x 0.17678 / sqrt 2 = 1.588 half-width."""
    infos = [_write_run(tmp_path, "copo", 0, [(0, 0.2, 0.2), (6, 0.5, 0.5)], [], "1101"),
             _write_run(tmp_path, "grpo", 0, [(6, 0.5, 0.5)], [], "1001"),
             _write_run(tmp_path, "copo", 1, [(0, 0.2, 0.2), (6, 0.5, 0.5)], [], "1111"),
             _write_run(tmp_path, "grpo", 1, [(6, 0.5, 0.5)], [], "1100")]
    args = type("A", (), {"out": tmp_path, "methods": ["copo", "grpo"]})
    result = lc.summarize(args, infos)
    p = result["paired"]["grpo"]
    assert [(q["seed"], q["gain"], q["gained"], q["lost"]) for q in p["per_seed"]] == [(0, 0.25, 1, 0), (1, 0.5, 2, 0)]
    assert p["per_seed"][0]["se"] == pytest.approx(0.25)
    assert p["mean"] == pytest.approx(0.375)
    assert p["ci95"][1] - p["mean"] == pytest.approx(12.7062 * 0.1767767 / 2 ** 0.5, rel=1e-5)  # t at 1 dof
    result["settings"] = {"steps": 6, "prompts_per_step": 6, "samples_per_prompt": 4, "n_test": 4, "n_sampled": 2,
                          "eval_k": 2, "seeds_run": [0, 1], "machine_hours": 0.1}
    result["environment"] = {"date": "d", "machine": "m", "versions": {}}
    assert "| grpo | seed 0: +0.250 +- 0.250 (1 prompts only COPO solved, 0 only grpo); seed 1: +0.500 +- 0.289 " \
           "(2 prompts only COPO solved, 0 only grpo) | +0.375 |" in lc.markdown(result)


def test_the_report_covers_every_finished_run_whatever_methods_ran(lc, tmp_path):
    """`--methods go_only` picks what to run; the report still has COPO (and its step-0 evaluation, shared): a run
    of GO-Only alone once rewrote the committed report with GO-Only only, its "before" its own step-6 value."""
    out = tmp_path / "runs"
    six = [{"rollout/num_samples": 24.0, "rollout/response_length_mean": 10.0}] * 6  # runs of 6 steps
    for info in (_write_run(out, "copo", 0, [(0, 0.5, 0.2), (6, 0.7, 0.5)], six, "1101"),
                 _write_run(out, "go_only", 0, [(6, 0.25, 0.1)], six, "0001"),
                 _write_run(out, "grpo", 0, [(6, 0.5, 0.5)], six)):  # unfinished: no marker
        if info["method"] != "grpo":
            (out / f"{info['method']}-seed{info['seed']}" / "done.json").write_text(json.dumps(info))
    assert lc.main(["--report_only", "--methods", "go_only", "--seeds", "1", "--out", str(out)]) == 0
    result = json.loads((tmp_path / "learning_curve.json").read_text())
    assert set(result["table"]) == {"copo", "go_only"}
    assert result["table"]["go_only"]["heldout_before"][0] == pytest.approx(0.5)  # COPO's step 0, shared
    assert result["table"]["go_only"]["gain"][0] == pytest.approx(-0.25)
    assert [p for p in result["paired"]] == ["go_only"]
    # no finished GRPO run: no row has seeds to read its tokens over, so no table of tokens
    assert result["tokens"]["table"]["go_only"]["seeds"] == []
    assert "Generated tokens of the training rollouts" not in (tmp_path / "learning_curve.md").read_text()


def test_the_report_adds_the_tokens_each_method_generated_beside_grpos(lc, tmp_path):
    """The report's table of generated tokens (the comparison tool's): 6 steps of 24 responses, GRPO's of 10 tokens,
    COPO's of 12: 1,440 and 1,728 tokens, x1.20, beyond the 10% within which a method draws GRPO's tokens, and no
    uniform GRPO run at 1,728 (GRPO's own evaluations reach 1,440 x 1.25 = 1,800: step 6 at x1.20 is within)."""
    out = tmp_path / "runs"
    for method, length, outcomes in (("grpo", 10.0, "1001"), ("copo", 12.0, "1101")):
        steps = [{"rollout/num_samples": 24.0, "rollout/response_length_mean": length}] * 6
        info = _write_run(out, method, 0, [(0, 0.5, 0.2)] * (method == "copo") + [(6, 0.7, 0.5)], steps, outcomes)
        (out / f"{method}-seed0" / "done.json").write_text(json.dumps(info))
    assert lc.main(["--report_only", "--seeds", "1", "--out", str(out)]) == 0
    tokens = json.loads((tmp_path / "learning_curve.json").read_text())["tokens"]["table"]
    assert tokens["copo"]["tokens"]["final"] == 6 * 24 * 12 and tokens["copo"]["tokens"]["ratio"][0] == 1.2
    assert [(p["step"], p["tokens"]) for p in tokens["copo"]["token_curve"]] == [(0, 0), (6, 1728)]
    text = (tmp_path / "learning_curve.md").read_text()
    assert "| grpo | 1 | 1,440 | (baseline) | rollout |" in text and "| copo | 1 | 1,728 | x1.20 | rollout |" in text
    assert (tmp_path / lc.TOKENS_PLOT).stat().st_size > 10_000


def test_contrasts_and_mechanism_isolate_one_departure_from_grpo_at_a_time(lc, tmp_path):
    """COPO minus COPO-Selective, GO-Selective minus GRPO, COPO-Selective minus GRPO, paired by prompt and seed.
    Seed 0: copo 1100, copo_selective 1110 -> -0.25; go_selective 0100, grpo 1100 -> -0.25; copo_selective 1110
    minus grpo 1100 -> +0.25. The mechanism table: the sampled evaluation's final truncation and length, and over
    the second half of training (steps 2-3 of 3) the global share of the push: (1 + 3) / 2 = 2 global^2 against
    (1 + 1) / 2 = 1 local^2 -> 2 / 3; pushed the wrong way over all three steps: (0.25 + 0.125 + 0) / 3."""
    steps = [{"copo_push_global_sq": 9.0, "copo_push_local_sq": 0.0, "copo_has_answer": 0.5,
              "copo_incorrect_reinforced": 0.25, "copo_correct_penalized": 0.0},
             {"copo_push_global_sq": 1.0, "copo_push_local_sq": 1.0, "copo_has_answer": 1.0,
              "copo_incorrect_reinforced": 0.0, "copo_correct_penalized": 0.125},
             {"copo_push_global_sq": 3.0, "copo_push_local_sq": 1.0, "copo_has_answer": 0.8,
              "copo_incorrect_reinforced": 0.0, "copo_correct_penalized": 0.0}]
    infos = [_write_run(tmp_path, "copo", 0, [(0, 0.5, 0.5), (3, 0.5, 0.5)], steps, "1100"),
             _write_run(tmp_path, "copo_selective", 0, [(3, 0.5, 0.5)], [], "1110"),
             _write_run(tmp_path, "go_selective", 0, [(3, 0.5, 0.5)], [], "0100"),
             _write_run(tmp_path, "grpo", 0, [(3, 0.5, 0.5)], [], "1100")]
    metrics = tmp_path / "copo-seed0" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[1].update(eval_truncated_rate=0.25, eval_response_length_mean=30.0)  # the final evaluation
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    selective = tmp_path / "copo_selective-seed0" / "metrics.jsonl"  # none truncated: a value, not a missing one
    rows = [json.loads(line) for line in selective.read_text().splitlines()]
    rows[-1].update(eval_truncated_rate=0.0)
    selective.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = lc.summarize(type("A", (), {"out": tmp_path, "methods": list(lc.METHODS)}), infos)
    got = {(c["a"], c["b"]): c["mean"] for c in result["contrasts"]}
    assert got == pytest.approx({("copo", "copo_selective"): -0.25, ("go_selective", "grpo"): -0.25,
                                 ("copo_selective", "grpo"): 0.25})
    m = result["mechanism"]["copo"]
    assert m["final_truncated"][0] == 0.25 and m["final_length"][0] == 30.0
    assert result["mechanism"]["copo_selective"]["final_truncated"][0] == 0.0
    assert m["late_push_global_share"][0] == pytest.approx(2 / 3) and m["late_has_answer"][0] == pytest.approx(0.9)
    assert m["late_surprisal"][0] != m["late_surprisal"][0]  # not logged: nan, shown blank
    result["settings"] = {"steps": 3, "prompts_per_step": 6, "samples_per_prompt": 4, "n_test": 4, "n_sampled": 2,
                          "eval_k": 2, "seeds_run": [0], "machine_hours": 0.1}
    result["environment"] = {"date": "d", "machine": "m", "versions": {}}
    text = lc.markdown(result)
    assert "| go_selective - grpo | the same term added to GRPO (GO-Selective minus GRPO) | seed 0: -0.250" in text
    assert m["pushed_wrong_way"][0] == pytest.approx((0.25 + 0.125) / 3)
    assert "| copo | 0.250 | 30.000 | 0.900 |  | 0.667 | 0.125 |" in text


def test_seed_order_must_name_seeds_of_the_run(lc, tmp_path):
    with pytest.raises(SystemExit):
        lc.main(["--seeds", "2", "--seed_order", "2", "--out", str(tmp_path)])
