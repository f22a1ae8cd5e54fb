"""Patch 11 (`runtime_patches/adaptive_sampling.py`): which prompts get another round, and the G kept per prompt with
their pool's statistics, on OpenRLHF's own Experience objects (the rounds through vLLM: tests/e2e/test_reinforce_ada_cpu.py)."""

import types

import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience

from openrlhf_copo.contract import (ADA_DRAWN, ADA_DRAWN_CORRECT, ADA_DRAWN_MAX, ADA_RESOLVED, ADA_ROUNDS, ADA_TOKENS,
                                    ADA_TOKENS_FIRST_ROUND)
from openrlhf_copo.openrlhf_ext.runtime_patches.adaptive_sampling import keep_groups, open_prompts, pools_by_prompt


def response(prompt: str, reward: float, length: int = 5) -> Experience:
    return Experience(prompts=[prompt], labels=["1"], images=[None], rewards=torch.tensor([reward]),
                      response_length=torch.tensor([length]), info={})


def settings(**kw):
    return types.SimpleNamespace(**{"ada_exit": "balanced", "ada_round_size": 8, "ada_budget": 12,
                                    "ada_threshold": 0.7, **kw})


def test_first_round_groups_must_each_hold_one_prompt():
    first = [response("a", 1.0)] * 4 + [response("b", 0.0)] * 4
    assert [len(p) for p in pools_by_prompt(first, 4)] == [4, 4]
    with pytest.raises(RuntimeError, match="group 1 holds responses to different prompts"):
        pools_by_prompt([response("a", 1.0)] * 5 + [response("b", 0.0)] * 3, 4)
    with pytest.raises(RuntimeError, match="not a multiple of G = 4"):
        pools_by_prompt([response("a", 1.0)] * 6, 4)


def test_unresolved_prompts_get_rounds_until_the_budget():
    pools = [[response("mixed", r) for r in (1, 0, 1, 0)],  # resolved (balanced): no more rounds
             [response("hard", 0.0)] * 4,  # all wrong: 8 more, then the last 0 of its budget of 12
             [response("easy", 1.0)] * 11,  # all right, one short of the budget: a round of 1
             [response("hard", 0.5)] * 12]  # reward 0.5 is not above the threshold 0.7: wrong, and at the budget
    assert open_prompts(pools, 4, settings()) == {1: 8, 2: 1}
    assert open_prompts(pools, 4, settings(ada_exit="positive_focused")) == {1: 8}  # all right: resolved
    pools[1] += [response("hard", 0.0)] * 8
    assert open_prompts(pools, 4, settings(ada_exit="positive_focused")) == {}  # never resolves within the budget


def test_kept_groups_carry_their_pool_and_the_step_cost():
    pools = [[response("p", r, length=3) for r in (0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0)],  # resolved in round 2
             [response("q", 0.0, length=2)] * 12]  # never resolved
    kept = keep_groups(pools, 4, settings(), rounds=2)
    assert [e.rewards.item() for e in kept] == [0, 0, 1, 1, 0, 0, 0, 0]
    assert kept[2] is pools[0][5] and kept[3] is pools[0][8]  # the pool's responses themselves, in draw order
    assert [e.info[ADA_DRAWN].item() for e in kept] == [12] * 8
    assert [e.info[ADA_DRAWN_CORRECT].item() for e in kept] == [2] * 4 + [0] * 4
    assert [e.info[ADA_RESOLVED].item() for e in kept] == [1] * 4 + [0] * 4
    step = {k: kept[0].info[k].item() for k in (ADA_ROUNDS, ADA_DRAWN_MAX, ADA_TOKENS, ADA_TOKENS_FIRST_ROUND)}
    assert step == {ADA_ROUNDS: 2, ADA_DRAWN_MAX: 12, ADA_TOKENS: 12 * 3 + 12 * 2, ADA_TOKENS_FIRST_ROUND: 4 * 3 + 4 * 2}
    assert all(e.info[ADA_TOKENS].item() == 60 for e in kept)
