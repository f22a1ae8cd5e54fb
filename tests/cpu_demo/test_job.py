"""The CPU demo job's flags and its report: held-out accuracy with its standard error, and the gain."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from openrlhf_copo.cpu_demo import job


def test_default_flags_are_ordinary_train_ppo_ray_flags_and_parse(tmp_path):
    from openrlhf_copo.cli.train_ppo_ray import load_args

    argv = job.default_argv("m", tmp_path / "train.jsonl", tmp_path / "test.jsonl", tmp_path / "run")
    args = load_args(argv)
    assert args.rollout.n_samples_per_prompt == job.SAMPLES_PER_PROMPT == 6  # the paper's G
    # one optimizer step per rollout, in whole micro-batches (DeepSpeed refuses a batch they do not divide)
    assert args.train.batch_size == job.PROMPTS_PER_STEP * job.SAMPLES_PER_PROMPT
    assert args.train.batch_size % args.train.micro_batch_size == 0
    # w_local can pass 1/2 only if the highest possible entropy, log2 G, is above rho
    assert math.log2(args.rollout.n_samples_per_prompt) > args.copo.rho
    assert args.ds.param_dtype == "fp32" and args.copo.eval_before_train
    # one rank: ZeRO-0 (ZeRO-2's partitioning only adds copies there); no "best" checkpoint copy of the last one
    assert args.ds.zero_stage == 0 and args.ckpt.best_metric_key == "none"
    # greedy over the whole held-out file it is given, sampled mean@k over its first `sampled` (the benchmarks'
    # 96 by default, the demo's N_SAMPLED of its N_TEST); no --data.max_samples, which OpenRLHF also applies to the
    # held-out set
    assert args.copo.eval_greedy and args.copo.eval_sampled_prompts == job.BENCHMARK_SAMPLED < job.HELD_OUT_ROWS
    assert args.data.max_samples >= job.HELD_OUT_ROWS
    demo = load_args(job.default_argv("m", tmp_path / "train.jsonl", tmp_path / "test.jsonl", tmp_path / "run",
                                      sampled=job.N_SAMPLED))
    assert demo.copo.eval_sampled_prompts == job.N_SAMPLED < job.N_TEST < job.HELD_OUT_ROWS
    assert args.eval.dataset == str(tmp_path / "test.jsonl") and args.eval.steps == job.STEPS
    assert Path(args.reward.remote_url[0]).name == "math_last_number_reward.py"
    assert Path(args.reward.remote_url[0]).is_file()


def _eval_row(step, mean, se, k=4):
    return {"step": step, "eval": 1.0, f"eval_arith_pass{k}": 0.9, f"eval_arith_mean{k}": mean,
            f"eval_arith_mean{k}_se": se, f"eval_arith_maj{k}": 0.5}


def test_heldout_reads_mean_at_k_and_its_standard_error_not_pass_or_maj():
    assert job.heldout(_eval_row(0, 0.25, 0.03)) == (0.25, 0.03, 4)
    assert math.isnan(job.heldout({"step": 1, "eval": 1.0})[0])


def test_heldout_gain_and_its_standard_error():
    # gain 0.35 - 0.25 = 0.10; SE sqrt(0.03^2 + 0.04^2) = 0.05; 0.10 is not more than 2 x 0.05
    g = job.heldout_gain([_eval_row(0, 0.25, 0.03), _eval_row(5, 0.3, 0.01), _eval_row(10, 0.35, 0.04)])
    assert (g["step_before"], g["step_after"]) == (0, 10)
    assert g["gain"] == pytest.approx(0.10) and g["gain_se"] == pytest.approx(0.05)
    assert g["gain_over_2se"] is False
    assert job.heldout_gain([_eval_row(0, 0.2, 0.02), _eval_row(10, 0.35, 0.03)])["gain_over_2se"] is True
    assert job.heldout_gain([_eval_row(0, 0.2, 0.02)]) is None


def _greedy_row(step, outcomes, k=4):
    acc = outcomes.count("1") / len(outcomes)
    return {**_eval_row(step, 0.3, 0.05, k), "eval_arith_greedy": acc, "eval_arith_greedy_se": 0.1,
            "eval_arith_greedy_outcomes": outcomes}


def test_greedy_gain_is_paired_prompt_by_prompt():
    """before 1100100000, after 1011100100 (10 prompts): d = 0 -1 1 1 0 0 0 1 0 0; three gained (prompts 3, 4, 8),
    one lost (prompt 2); mean 0.2, squared deviations 0.04 x 6 + 1.44 + 0.64 x 3 = 3.6, / 9 = 0.4, sqrt 0.632,
    / sqrt(10) = 0.2."""
    g = job.heldout_gain([_greedy_row(0, "1100100000"), _greedy_row(6, "1011100100")])["greedy"]
    assert (g["before"], g["after"], g["n"]) == (0.3, 0.5, 10)
    assert g["gain"] == pytest.approx(0.2) and g["gain_se"] == pytest.approx(0.2)
    assert (g["gained"], g["lost"]) == (3, 1) and g["gain_over_2se"] is False
    text = job.format_summary(job.summarize([_greedy_row(0, "1100100000"), _greedy_row(6, "1011100100")], 1.0),
                              Path("/r"))
    assert ("held-out greedy accuracy over 10 prompts: 0.300 (step 0) -> 0.500 (step 6); paired gain +0.200 +- 0.200 "
            "(3 prompts gained, 1 lost; within 2 standard errors of no change)") in text
    assert job.eval_line(_greedy_row(6, "1011100100")).startswith(
        "held-out at step   6: greedy 0.500 +- 0.100 (10 prompts), mean@4 0.300 +- 0.050")


def test_summary_separates_step_rows_from_eval_rows_and_reports_the_gain():
    rows = [_eval_row(0, 0.2, 0.02),
            {"step": 1, "reward": 0.2, "copo_correct": 0.2, "copo_entropy": 1.5, "copo_w_local": 0.5,
             "copo_w_local_mid": 0.25, "copo_all_incorrect": 0.25, "copo_all_correct": 0.125},
            {"step": 2, "reward": 0.4, "copo_correct": 0.4, "copo_entropy": 1.0, "copo_w_local": 0.1,
             "copo_w_local_mid": 0.75, "copo_all_incorrect": 0.125, "copo_all_correct": 0.25},
            _eval_row(2, 0.35, 0.03)]
    s = job.summarize(rows, 61.0)
    assert s["steps"] == 2 and s["accuracy_first"] == 0.2 and s["accuracy_last"] == 0.4
    assert s["w_local_mid_share_mean"] == pytest.approx(0.5) and s["entropy_mean"] == pytest.approx(1.25)
    assert s["heldout"]["gain"] == pytest.approx(0.15)
    text = job.format_summary(s, Path("/r"))
    assert "held-out mean@4: 0.200 +- 0.020 (step 0) -> 0.350 +- 0.030 (step 2); gain +0.150 +- 0.036 (a rise of more than 2" \
           in text
    assert "share strictly between 0.05 and 0.95: 0.50" in text


def test_curves_png_is_written_with_eval_rows(tmp_path):
    rows = [_eval_row(0, 0.2, 0.02), {"step": 1, "reward": 0.2, "copo_correct": 0.2, "copo_all_incorrect": 0.5,
                                      "copo_all_correct": 0.0}, _eval_row(1, 0.3, 0.02)]
    job.plot_curves(rows, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_a_loss_beyond_2_standard_errors_is_called_a_fall():
    """A fresh demo run went 0.506 -> 0.338 (paired -0.169 +- 0.027); its summary said "not more than 2 standard
    errors", which reads as no change. before 1111100000, after 0000000000: d has five -1s, mean -0.5, squared
    deviations 0.25 x 10 = 2.5, / 9, sqrt 0.527, / sqrt(10) = 0.167: -0.5 < -0.333."""
    text = job.format_summary(job.summarize([_greedy_row(0, "1111100000"), _greedy_row(6, "0000000000")], 1.0),
                              Path("/r"))
    assert "paired gain -0.500 +- 0.167 (0 prompts gained, 5 lost; a FALL of more than 2 standard errors)" in text
    assert job.verdict(0.01, 0.02) == "within 2 standard errors of no change"


def test_the_demo_evaluates_a_prefix_of_the_held_out_file_and_trains_on_the_same_prompts(tmp_path):
    """The demo evaluates the first N_TEST of the HELD_OUT_ROWS held-out rows (issue 70: its two evaluations were a
    third of a run), so its training prompts are the ones the whole file leaves, as before: the train file made with
    N_TEST held-out rows would be another."""
    from openrlhf_copo.cpu_demo.data import held_out_prefix, make_arithmetic_prompts

    train, test = make_arithmetic_prompts(tmp_path / "all", n_train=36, n_test=job.HELD_OUT_ROWS, seed=0)
    prefix = held_out_prefix(test, job.N_TEST)
    rows = test.read_text().splitlines()
    assert prefix.read_text().splitlines() == rows[:job.N_TEST] and len(rows) == job.HELD_OUT_ROWS
    assert prefix.name == f"test-first{job.N_TEST}.jsonl" and held_out_prefix(test, job.N_TEST) == prefix
    fewer_train, _ = make_arithmetic_prompts(tmp_path / "fewer", n_train=36, n_test=job.N_TEST, seed=0)
    assert fewer_train.read_text() != train.read_text()  # why a prefix, not a smaller file
    with pytest.raises(ValueError, match="480 held-out rows, fewer than the 481 asked for"):
        held_out_prefix(test, job.HELD_OUT_ROWS + 1)
