"""benchmarks/learning_curve.py: every method is the demo job with only its own flags changed, and the
table reads the right metric for each (DAPO's zero-std share is what its filter dropped)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from openrlhf_copo.cli.train_ppo_ray import load_args

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lc():
    spec = importlib.util.spec_from_file_location("learning_curve", REPO / "benchmarks" / "learning_curve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_methods_differ_only_in_their_own_flags(lc, tmp_path):
    parsed = {m: load_args(lc.run_argv(m, 1, 6, 3, "model", tmp_path / "train.jsonl", tmp_path / "test.jsonl",
                                       tmp_path / m)) for m in lc.METHODS}
    for m, a in parsed.items():
        assert a.train.seed == 1 and a.eval.steps == 3 and a.copo.eval_before_train and a.copo.eval_greedy
        assert a.data.max_samples >= lc.job.N_TEST  # no cap: OpenRLHF would apply it to the held-out set too
        assert a.data.prompt_dataset == str(tmp_path / "train.jsonl") and a.eval.dataset == str(tmp_path / "test.jsonl")
        assert a.ckpt.save_steps == -1 and not a.ckpt.load_enable
        assert Path(a.ckpt.output_dir).parent.name == "scratch"  # gigabytes, deleted after the run
    assert (parsed["grpo"].algo.advantage.estimator, parsed["grpo"].copo.mode) == ("copo", "grpo")
    assert (parsed["copo"].algo.advantage.estimator, parsed["copo"].copo.mode) == ("copo", None)
    assert parsed["go_only"].algo.advantage.estimator == "go_only"
    dapo = parsed["dapo"]
    assert dapo.algo.advantage.estimator == "group_norm"  # COPO refuses dynamic filtering: OpenRLHF's own
    assert dapo.algo.dynamic_filtering_enable and tuple(dapo.actor.eps_clip_low_high) == (0.2, 0.28)
    assert not parsed["grpo"].algo.dynamic_filtering_enable


def _write_run(out: Path, method: str, seed: int, evals, steps, outcomes=None):
    d = out / f"{method}-seed{seed}"
    d.mkdir(parents=True)
    rows = [{"step": s, "eval": 1.0, "eval_arith_mean2": m, "eval_arith_mean2_se": 0.01} for s, m in evals]
    if outcomes:  # the final evaluation's greedy verdicts
        rows[-1].update(eval_arith_greedy=outcomes.count("1") / len(outcomes), eval_arith_greedy_se=0.1,
                        eval_arith_greedy_outcomes=outcomes)
    rows += [{"step": i + 1, **s} for i, s in enumerate(steps)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"method": method, "seed": seed, "wall_seconds": 120.0}


def test_table_means_over_seeds_and_dapo_zero_std_from_its_filter(lc, tmp_path):
    infos = [_write_run(tmp_path, "copo", 0, [(0, 0.2), (6, 0.5)], [{"copo_zero_std": 0.25, "copo_signal_copo": 1.0}]),
             _write_run(tmp_path, "copo", 1, [(0, 0.3), (6, 0.7)], [{"copo_zero_std": 0.75, "copo_signal_copo": 1.0}]),
             _write_run(tmp_path, "dapo", 0, [(0, 0.2), (3, 0.4)],
                        # OpenRLHF's value: 100 x kept responses / consumed prompts, so 0.6 of the groups kept
                        [{"dynamic_filtering_pass_rate": 0.6 * 100 * lc.job.SAMPLES_PER_PROMPT}])]
    args = type("A", (), {"out": tmp_path, "methods": ["copo", "dapo"]})
    t = lc.summarize(args, infos)["table"]
    assert t["copo"]["heldout_final"][0] == pytest.approx(0.6)
    assert t["copo"]["heldout_final"][1] == pytest.approx(0.1)  # std(0.5, 0.7) / sqrt(2)
    assert t["copo"]["gain"][0] == pytest.approx(0.35) and t["copo"]["zero_std_share"][0] == pytest.approx(0.5)
    assert t["dapo"]["zero_std_share"][0] == pytest.approx(0.4) and t["dapo"]["signal_share"][0] == pytest.approx(0.6)
    assert t["dapo"]["seeds"] == 1 and t["dapo"]["heldout_final"][1] != t["dapo"]["heldout_final"][1]  # nan SE


def test_copo_minus_each_method_is_paired_by_prompt_and_seed(lc, tmp_path):
    """Seed 0: COPO 1101, GRPO 1001 -> d = 0 1 0 0, +0.25, SE sd(d)/2 = 0.5/2 = 0.25; seed 1: COPO 1111, GRPO 1100
    -> +0.5 (SE 0.2887). Over seeds: mean 0.375, sd 0.17678, t(1) 12.706 x 0.17678 / sqrt 2 = 1.588 half-width."""
    infos = [_write_run(tmp_path, "copo", 0, [(0, 0.2), (6, 0.5)], [], "1101"),
             _write_run(tmp_path, "grpo", 0, [(0, 0.2), (6, 0.5)], [], "1001"),
             _write_run(tmp_path, "copo", 1, [(0, 0.2), (6, 0.5)], [], "1111"),
             _write_run(tmp_path, "grpo", 1, [(0, 0.2), (6, 0.5)], [], "1100")]
    args = type("A", (), {"out": tmp_path, "methods": ["copo", "grpo"]})
    result = lc.summarize(args, infos)
    p = result["paired"]["grpo"]
    assert [(q["seed"], q["gain"], q["gained"], q["lost"]) for q in p["per_seed"]] == [(0, 0.25, 1, 0), (1, 0.5, 2, 0)]
    assert p["per_seed"][0]["se"] == pytest.approx(0.25)
    assert p["mean"] == pytest.approx(0.375)
    assert p["ci95"][1] - p["mean"] == pytest.approx(12.706 * 0.1767767 / 2 ** 0.5, rel=1e-5)
    result["settings"] = {"steps": 6, "prompts_per_step": 6, "samples_per_prompt": 4, "n_test": 4, "eval_k": 2,
                          "seeds": 2}
    result["environment"] = {"date": "d", "machine": "m", "versions": {}}
    assert "| grpo | seed 0: +0.250 +- 0.250 (1 prompts only COPO solved, 0 only grpo); seed 1: +0.500 +- 0.289 " \
           "(2 prompts only COPO solved, 0 only grpo) | +0.375 |" in lc.markdown(result)
