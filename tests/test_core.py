"""openrlhf_copo.core: the paper's worked example, an independent reading of both conventions, edge cases."""

import hashlib
import itertools
import json
import math
import random
import zlib
from pathlib import Path

import pytest
import torch

from openrlhf_copo.core import (
    KnapsackAllocation,
    knapsack_allocation,
    knapsack_dp,
    knapsack_need,
    knapsack_value,
    mode_info,
    modes,
    consistency_entropy,
    copo_advantages,
    global_advantage,
    local_advantage,
    standardize,
)


# ---------------------------------------------------------------------------------------------
# The appendix example ("Demonstrative Evaluation of COPO Framework"): 5 prompts x 6 responses,
# prompt rewards [1/6, 1/6, 2/3, 1/2, 1/2], the prompt "1 + 1 = ?" with answers [2,2,2,3,3,4] and
# rewards [1,1,1,0,0,0], gamma=3, rho=1.

def appendix_batch():
    rewards = torch.zeros(5, 6)
    rewards[0, :1] = 1  # 1/6
    rewards[1, :1] = 1  # 1/6
    rewards[2, :4] = 1  # 2/3
    rewards[3, :3] = 1  # 1/2: the "1 + 1 = ?" prompt
    rewards[4, :3] = 1  # 1/2
    answers = torch.tensor([[2, 2, 2, 3, 3, 4]] * 5)
    return rewards, answers


def test_appendix_example_exactly():
    rewards, answers = appendix_batch()
    out = copo_advantages(rewards, answers, mode="copo", gamma=3.0, rho=1.0, std="population", eps=1e-12)
    # H = -(1/2 log2 1/2 + 1/3 log2 1/3 + 1/6 log2 1/6) = 1.459
    assert out.entropy[3].item() == pytest.approx(1.4591479, abs=1e-6)
    assert round(out.entropy[3].item(), 3) == 1.459
    # w_local = sigmoid(3 * 0.459) = 0.799, w_global = 0.201
    assert round(out.w_local[3, 0].item(), 3) == 0.799
    assert round(out.w_global[3, 0].item(), 3) == 0.201
    # local advantages of the prompt: mean 0.5, population std 0.5
    assert out.local_adv[3].tolist() == pytest.approx([1, 1, 1, -1, -1, -1], abs=1e-6)
    # global: mean 0.4, population std 0.2
    assert out.global_adv[:, 0].tolist() == pytest.approx([-7 / 6, -7 / 6, 4 / 3, 0.5, 0.5], abs=1e-6)
    assert [round(v, 3) for v in out.global_adv[:, 0].tolist()] == [-1.167, -1.167, 1.333, 0.5, 0.5]
    # one global value per prompt, shared by its responses
    assert torch.equal(out.global_adv, out.global_adv[:, :1].expand(-1, 6))


def test_appendix_local_advantage_needs_population_std():
    rewards = torch.tensor([[1.0, 1, 1, 0, 0, 0]])
    unbiased = local_advantage(rewards, std="unbiased", eps=0.0)
    # unbiased std of [1,1,1,0,0,0] is sqrt(0.3) = 0.5477 -> 0.9129, not the appendix's 1
    assert unbiased[0, 0].item() == pytest.approx(0.5 / math.sqrt(0.3), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# An independent, loop-based reading of the paper and of the released code, for every mode.

def ref_std(xs, unbiased):
    m = sum(xs) / len(xs)
    d = len(xs) - 1 if unbiased else len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / d)


def ref_norm(xs, unbiased, eps):
    if max(xs) == min(xs):
        return [0.0] * len(xs)
    m = sum(xs) / len(xs)
    s = ref_std(xs, unbiased)
    return [(x - m) / (s + eps) for x in xs]


def ref_entropy(answers):
    n = len(answers)
    counts = {a: answers.count(a) for a in set(answers)}
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def ref_copo(rewards, answers, correct, mode, gamma, rho, zero_control, unbiased, eps, alpha=0.1, pools=None):
    B, G = len(rewards), len(rewards[0])
    no_std = mode == "dr_grpo"  # Dr. GRPO: r - mean, no std, in both terms

    def norm(xs):
        if no_std:
            m = sum(xs) / len(xs)
            return [0.0] * len(xs) if max(xs) == min(xs) else [x - m for x in xs]
        return ref_norm(xs, unbiased, eps)

    if mode == "ngrpo":  # one virtual response of reward 1 in every group's mean and std, not trained on
        local = [ref_norm(row + [1.0], unbiased, eps)[:G] for row in rewards]
    elif mode in ("reinforce_ada", "reinforce_ada_copo", "reinforce_ada_uniform"):
        # the pool's mean (and std, clamped at eps) of its 0/1 correctness, as their code
        local = [[(r - sum(pool) / len(pool)) / (max(ref_std(pool, unbiased), eps) + eps) for r in row]
                 for row, pool in zip(rewards, pools)]
    else:
        local = [norm(row) for row in rewards]
    glob = [[v] * G for v in norm([sum(row) / G for row in rewards])]
    if mode == "reinforce_ada_copo":  # COPO's global term of the pools' success rates, always the population std
        glob = [[v] * G for v in ref_norm([sum(pool) / len(pool) for pool in pools], False, eps)]
    wl, wg = [], []
    for b in range(B):
        h = ref_entropy(answers[b])
        soft = 1 / (1 + math.exp(-gamma * (h - rho)))
        none_right = not any(correct[b])
        flat = max(rewards[b]) == min(rewards[b])
        if mode == "rl_zvp":  # +-alpha on zero-variance prompts, carried by the second term
            glob[b] = [(alpha if all(correct[b]) else -alpha if none_right else 0.0) if flat else 0.0] * G
        row_l, row_g = [], []
        for i in range(G):
            zero = {"prompt": none_right, "response": not correct[b][i], "uniform": flat, "none": False}[zero_control]
            if mode in ("grpo", "ngrpo", "dr_grpo", "reinforce_ada", "reinforce_ada_uniform", "knapsack"):
                l, g = 1.0, 0.0
            elif mode == "go_only":
                l, g = 0.0, 1.0
            elif mode == "go_selective":
                l, g = (0.0, 1.0) if zero else (1.0, 0.0)
            elif mode == "go_blended":
                l, g = soft, 1 - soft
            elif mode == "copo_gated":  # the released only-forced: the global term alone where all rewards are equal
                l, g = (0.0, 1.0) if flat else (1.0, 0.0)
            elif mode == "copo_selective":
                l, g = (0.0, 0.0) if none_right else (soft, 1 - soft)
            elif mode in ("copo", "reinforce_ada_copo"):
                l = 0.0 if zero else soft
                g = 1 - l
            elif mode == "rl_zvp":
                l, g = (0.0, 1.0) if flat else (1.0, 0.0)
            else:
                raise NotImplementedError(f"no reference reading of mode {mode!r}: add one with the mode")
            row_l.append(l)
            row_g.append(g)
        wl.append(row_l)
        wg.append(row_g)
    return local, glob, wl, wg


def close(actual, expected, atol):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


@pytest.mark.parametrize("mode", modes())
@pytest.mark.parametrize("convention", ["paper", "released"])
def test_randomized_against_independent_reading(mode, convention):
    rng = random.Random(f"{mode}-{convention}")
    unbiased = convention == "released"
    zero_controls = ["prompt", "none"] if convention == "paper" else ["response", "uniform"]
    for trial in range(40):
        B, G = rng.randint(2, 9), rng.randint(2, 8)
        kind = trial % 3
        rewards, answers = [], []
        for _ in range(B):
            p = rng.choice([0.0, 1.0, rng.random()])
            row = [float(rng.random() < p) for _ in range(G)]
            if kind == 1:  # format-style rewards 0 / 0.1 / 1
                row = [rng.choice([0.0, 0.1, 1.0]) for _ in range(G)]
            rewards.append(row)
            answers.append([rng.randint(0, 3 if kind else 1) for _ in range(G)])
        correct = [[r >= 1.0 for r in row] for row in rewards]
        gamma, rho = rng.choice([3.0, 5.0, 20.0]), rng.choice([0.5, 1.0, 1.5])
        # Reinforce-Ada's pools: the kept G and up to 20 more draws of the prompt (a mode without pools ignores them)
        pools = [[float(c) for c in row] + [float(rng.random() < 0.3) for _ in range(rng.randint(0, 20))]
                 for row in correct]
        pool = ({"pool_correct": torch.tensor([sum(p) for p in pools]), "pool_size": torch.tensor([len(p) for p in pools])}
                if mode_info(mode).adaptive_sampling else {})
        for zc in zero_controls:
            std = None if mode_info(mode).std_fixed else "unbiased" if unbiased else "population"
            out = copo_advantages(torch.tensor(rewards), torch.tensor(answers), torch.tensor(correct), mode=mode,
                                  gamma=gamma, rho=rho, zero_control=zc, std=std, eps=1e-6, **pool)
            loc, glo, wl, wg = ref_copo(rewards, answers, correct, mode, gamma, rho, zc, unbiased, 1e-6, pools=pools)
            close(out.local_adv, loc, 1e-5)
            close(out.global_adv, glo, 1e-5)
            close(out.w_local, wl, 1e-6)
            close(out.w_global, wg, 1e-6)
            assert out.entropy.tolist() == pytest.approx([ref_entropy(a) for a in answers], abs=1e-5)


# ---------------------------------------------------------------------------------------------
# What COPO is for: uniform groups keep a gradient signal.

def uniform_batch():
    rewards = torch.tensor([[1.0] * 4, [0.0] * 4, [1.0, 0, 0, 1], [0.0] * 4])
    answers = torch.tensor([[7] * 4, [3] * 4, [7, 1, 2, 7], [1, 2, 3, 4]])
    return rewards, answers


def test_uniform_groups_carry_signal_under_copo_not_grpo():
    rewards, answers = uniform_batch()
    grpo = copo_advantages(rewards, answers, mode="grpo")
    copo = copo_advantages(rewards, answers, mode="copo")
    uniform = [0, 1, 3]
    assert (grpo.weighted_local[uniform] == 0).all() and (grpo.weighted_global == 0).all()
    assert (copo.weighted_global[uniform] != 0).all()
    # all-incorrect prompts: zero control hands the whole weight to the global term
    assert copo.w_local[[1, 3]].eq(0).all() and copo.w_global[[1, 3]].eq(1).all()
    # all-correct, one answer: H = 0 -> w_global = 1 - sigmoid(20 * (0 - 1.5)) ~ 1
    assert copo.w_global[0, 0].item() == pytest.approx(1.0, abs=1e-9)
    assert (grpo.local_adv != 0).float().mean().item() == pytest.approx(4 / 16)  # GRPO: the mixed prompt only
    assert copo.has_signal.all() and grpo.has_signal.float().mean().item() == pytest.approx(4 / 16)


def test_copo_selective_silences_all_incorrect_prompts():
    rewards, answers = uniform_batch()
    out = copo_advantages(rewards, answers, mode="copo_selective")
    assert (out.w_local[[1, 3]] == 0).all() and (out.w_global[[1, 3]] == 0).all()
    close(out.w_local[[0, 2]] + out.w_global[[0, 2]], [[1.0] * 4] * 2, 1e-6)


# ---------------------------------------------------------------------------------------------
# Bad or degenerate input: no NaN, no silent fallback.

def test_batch_where_every_reward_is_equal_gives_zeros_not_nan():
    for value in (0.0, 1.0, 0.1):
        rewards = torch.full((3, 5), value)
        out = copo_advantages(rewards, torch.zeros(3, 5, dtype=torch.long), std="unbiased", eps=1e-6)
        assert torch.isfinite(out.local_adv).all() and torch.isfinite(out.global_adv).all()
        assert (out.local_adv == 0).all() and (out.global_adv == 0).all()


def test_zero_spread_is_exactly_zero_despite_rounding():
    # the float32 mean of six 0.3s (or eight 0.1s) is not the value itself; (x - mean) / (std + eps) would be about
    # 0.03, not 0 (the released code's +0.0289: tests/test_released_switches.py)
    for value, g in ((0.1, 6), (0.3, 6), (0.1, 8)):
        for std in ("population", "unbiased", "none"):
            out = standardize(torch.full((1, g), value), dim=1, std=std, eps=1e-6)
            assert (out == 0).all(), (value, g, std)


def test_single_prompt_batch_has_zero_global_advantage():
    out = copo_advantages(torch.tensor([[1.0, 0, 1]]), torch.tensor([[1, 2, 1]]), std="unbiased")
    assert (out.global_adv == 0).all()


def test_nan_reward_is_refused():
    rewards = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    with pytest.raises(ValueError, match="non-finite reward.*group\\(s\\) \\[0\\]"):
        copo_advantages(rewards, torch.zeros(2, 2, dtype=torch.long))


def test_one_response_per_prompt_is_refused():
    with pytest.raises(ValueError, match="at least 2 responses"):
        copo_advantages(torch.ones(4, 1), torch.zeros(4, 1, dtype=torch.long))


@pytest.mark.parametrize("kwargs", [{"mode": "dapo"}, {"zero_control": "sometimes"}, {"std": "sample"}])
def test_unknown_options_are_refused(kwargs):
    with pytest.raises(ValueError):
        copo_advantages(torch.ones(2, 2), torch.zeros(2, 2, dtype=torch.long), **kwargs)


def test_entropy_values_and_base():
    ids = torch.tensor([[5, 5, 5, 5], [1, 2, 3, 4], [1, 1, 2, 2]])
    assert consistency_entropy(ids).tolist() == pytest.approx([0.0, 2.0, 1.0])
    assert consistency_entropy(ids, base=math.e).tolist() == pytest.approx([0.0, math.log(4), math.log(2)])
    # the appendix in nats: 1.011, which is not the paper's 1.459
    assert consistency_entropy(torch.tensor([[2, 2, 2, 3, 3, 4]]), base=math.e).item() == pytest.approx(1.0114, abs=1e-4)


def test_large_int64_ids_are_compared_exactly():
    big = (1 << 62) + 1
    ids = torch.tensor([[big, big + 1, big, big + 1]], dtype=torch.int64)
    assert consistency_entropy(ids).item() == pytest.approx(1.0)


def test_global_advantage_uses_the_whole_batch():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    full = global_advantage(rewards)[:, 0]
    half = global_advantage(rewards[:2])[:, 0]
    assert full[0].item() != pytest.approx(half[0].item())  # a mini-batch statistic would differ


def test_a_new_mode_is_one_registered_function():
    """verl-style registry: registering a weighting makes it a mode of copo_advantages."""
    from openrlhf_copo.core import register_mode, unregister_mode

    @register_mode("half_half_test", blended=False)
    def half_half(x):
        return torch.full_like(x.soft, 0.5), torch.full_like(x.soft, 0.5)

    try:
        r = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        out = copo_advantages(r, torch.tensor([[1, 2, 1, 2], [3, 3, 3, 3]]), mode="half_half_test")
        assert out.w_local.unique().tolist() == [0.5] and out.w_global.unique().tolist() == [0.5]
        torch.testing.assert_close(out.weighted_local[0], 0.5 * torch.tensor([1.0, -1.0, 1.0, -1.0]) / (1 + 2e-6))
        with pytest.raises(ValueError, match="registered twice"):
            register_mode("half_half_test", blended=False)(half_half)
    finally:
        unregister_mode("half_half_test")
    with pytest.raises(ValueError, match="mode must be one of"):
        copo_advantages(r, torch.zeros(2, 4, dtype=torch.long), mode="half_half_test")


def test_response_zero_control_gives_wrong_answers_of_a_good_prompt_the_full_positive_global_advantage():
    """The released code's zero control (per response): a wrong response gets w_local = 0 and so w_global = 1. In an
    above-average prompt A_global > 0, so each of its wrong responses is pushed up with the full global weight
    (the paper's per-prompt rule leaves them to the blend, where their local advantage is negative)."""
    rewards = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    answers = torch.tensor([[1, 1, 1, 2], [3, 4, 5, 6], [1, 2, 3, 4]])
    released = copo_advantages(rewards, answers, zero_control="response")
    paper = copo_advantages(rewards, answers, zero_control="prompt")
    assert released.global_adv[0, 3].item() > 0  # prompt 0 is above the batch mean
    assert released.w_local[0, 3].item() == 0 and released.w_global[0, 3].item() == 1
    assert released.weighted_global[0, 3].item() == pytest.approx(released.global_adv[0, 3].item())
    assert released.weighted_local[0, 3].item() == 0  # its negative local advantage is gone
    assert paper.weighted_local[0, 3].item() < 0  # the paper keeps it, weighted by the blend
    assert paper.w_global[0, 3].item() < 1


def test_reward_coef_scales_the_prompt_reward_by_its_consistency():
    """The released code's reward_coef: R(q) = mean_G r (1 - lambda H), lambda = (1 - 1/G) / log2 G (by hand)."""
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    answers = torch.tensor([[7, 7, 7, 7], [7, 7, 1, 2], [1, 2, 3, 4]])
    out = copo_advantages(rewards, answers, reward_coef=True)
    # H: 0, 1.5, 2 bits; lambda = (1 - 1/4) / 2 = 0.375
    assert out.prompt_reward.tolist() == pytest.approx([1.0, 0.5 * (1 - 0.375 * 1.5), 0.0])
    plain = copo_advantages(rewards, answers, mode="copo")
    assert plain.prompt_reward.tolist() == pytest.approx([1.0, 0.5, 0.0])
    torch.testing.assert_close(out.w_local, plain.w_local)  # COPO's weights, zero control included
    assert out.global_adv[1, 0].item() < plain.global_adv[1, 0].item()  # the scattered prompt counts for less
    # any entropy base gives the same R(q); any mode takes it
    out_e = copo_advantages(rewards, answers, reward_coef=True, entropy_base=math.e)
    torch.testing.assert_close(out_e.prompt_reward, out.prompt_reward)
    torch.testing.assert_close(copo_advantages(rewards, answers, mode="go_only", reward_coef=True).global_adv,
                               out.global_adv)


def test_global_coef_scales_the_global_weight_only():
    """The released only-soft-with-coef: the global term times kappa, the local weight unchanged."""
    rewards, answers = uniform_batch()
    plain = copo_advantages(rewards, answers, zero_control="none")
    scaled = copo_advantages(rewards, answers, zero_control="none", global_coef=0.1)
    torch.testing.assert_close(scaled.w_local, plain.w_local)
    torch.testing.assert_close(scaled.w_global, 0.1 * (1 - plain.w_local))


def test_copo_gated_never_pushes_a_response_the_wrong_way():
    """3 right + 1 wrong (3+1 answers, H 0.811): COPO trains it on the global term alone and raises the wrong answer
    (R = 0.75 above the batch mean 0.375); copo_gated keeps GRPO's -1.732 there, and uses the global term only for
    the all-correct (+) and all-incorrect (-) prompts. R = .75, 1, 0, .25 -> mean .5, population std .3953."""
    rewards = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    answers = torch.tensor([[7, 7, 7, 5], [7, 7, 7, 7], [3, 3, 4, 4], [7, 5, 5, 5]])
    copo = copo_advantages(rewards, answers)
    assert (copo.weighted_local + copo.weighted_global)[0, 3] > 0  # COPO raises the wrong answer
    gated = copo_advantages(rewards, answers, mode="copo_gated")
    total = gated.weighted_local + gated.weighted_global
    sd = math.sqrt(((0.75 - .5) ** 2 + .5 ** 2 + .5 ** 2 + .25 ** 2) / 4)
    close(total[0], [1 / math.sqrt(3)] * 3 + [-math.sqrt(3)], atol=1e-5)  # GRPO's, population std
    close(total[1], [0.5 / sd] * 4, atol=1e-5)
    close(total[2], [-0.5 / sd] * 4, atol=1e-5)
    close(total[3], [math.sqrt(3)] + [-1 / math.sqrt(3)] * 3, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The zero-variance peers, pinned to their papers' numbers (shared/docs/zero-variance-peers.md's worked example:
# G = 4, Bessel std, token entropies [0.05, 0.50, 2.00, 0.20] nats, alpha 0.1), computed by hand here.

PEER_REWARDS = torch.tensor([[0.0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
PEER_ANSWERS = torch.tensor([[1, 2, 3, 4], [5, 5, 5, 5], [5, 1, 2, 3]])


def test_ngrpo_worked_example():
    """[0,0,0,0] + virtual 1: mean .2, Bessel std sqrt(.8 / 4) = .4472 -> -0.447 each; [1,1,1,1]: 0;
    [1,0,0,0] + 1: mean .4, std sqrt(1.2 / 4) = .5477 -> 1.095 / -0.730."""
    out = copo_advantages(PEER_REWARDS, PEER_ANSWERS, mode="ngrpo")
    sd0, sd2 = math.sqrt(0.8 / 4), math.sqrt(1.2 / 4)
    close(out.weighted_local, [[-0.2 / sd0] * 4, [0.0] * 4, [0.6 / sd2] + [-0.4 / sd2] * 3], atol=1e-5)
    assert out.weighted_local[0, 0].item() == pytest.approx(-0.447, abs=5e-4)
    assert out.weighted_local[2].tolist() == pytest.approx([1.095, -0.730, -0.730, -0.730], abs=5e-4)
    assert (out.weighted_global == 0).all()


def test_ngrpo_paper_check_g8():
    """The NGRPO paper's G = 8 example with one correct response: 1.76 / -0.50 (GRPO: 2.475 / -0.354)."""
    r = torch.tensor([[1.0] + [0.0] * 7])
    out = copo_advantages(r, torch.arange(8)[None], mode="ngrpo")
    assert out.local_adv[0, :2].tolist() == pytest.approx([1.764, -0.504], abs=5e-4)
    grpo = copo_advantages(r, torch.arange(8)[None], mode="grpo", std="unbiased")
    assert grpo.local_adv[0, :2].tolist() == pytest.approx([2.475, -0.354], abs=5e-4)


def test_dr_grpo_worked_example_and_its_fixed_std():
    out = copo_advantages(PEER_REWARDS, PEER_ANSWERS, mode="dr_grpo")
    close(out.weighted_local, [[0.0] * 4, [0.0] * 4, [0.75, -0.25, -0.25, -0.25]], atol=1e-6)
    assert (out.weighted_global == 0).all()
    with pytest.raises(ValueError, match="defined with std 'none'"):
        copo_advantages(PEER_REWARDS, PEER_ANSWERS, mode="dr_grpo", std="population")


def test_rl_zvp_worked_example():
    """Mixed group: GRPO (Bessel) 1.5 / -0.5 in the first term; zero-variance groups: +-alpha in the second, turned
    per token into alpha H_t (all correct) and -alpha (max H - H_t) (all wrong) by the loss."""
    from openrlhf_copo.core import rl_zvp_token_advantage

    out = copo_advantages(PEER_REWARDS, PEER_ANSWERS, mode="rl_zvp")
    close(out.weighted_local, [[0.0] * 4, [0.0] * 4, [1.5, -0.5, -0.5, -0.5]], atol=1e-5)
    close(out.weighted_global, [[-0.1] * 4, [0.1] * 4, [0.0] * 4], atol=1e-7)
    h = torch.tensor([[0.05, 0.50, 2.00, 0.20]] * 3)
    per_token = rl_zvp_token_advantage(out.weighted_global[:, 0], h, torch.ones(3, 4))
    close(per_token, [[-0.195, -0.15, 0.0, -0.18], [0.005, 0.05, 0.20, 0.02], [0.0] * 4], atol=1e-6)
    # padding: the max is over the response's own tokens (a padded 9.0 must not count), padded tokens get 0
    padded = rl_zvp_token_advantage(torch.tensor([-0.1]), torch.tensor([[0.05, 0.5, 2.0, 9.0]]),
                                    torch.tensor([[1.0, 1, 1, 0]]))
    close(padded, [[-0.195, -0.15, 0.0, 0.0]], atol=1e-6)
    # a NaN or inf entropy at a padded position (a padded logit row) is 0, not NaN, for both signs
    for coef, expected in ((-0.1, [-0.195, -0.15, 0.0, 0.0, 0.0]), (0.1, [0.005, 0.05, 0.2, 0.0, 0.0])):
        nan_padded = rl_zvp_token_advantage(torch.tensor([coef]),
                                            torch.tensor([[0.05, 0.5, 2.0, float("nan"), float("inf")]]),
                                            torch.tensor([[1.0, 1, 1, 0, 0]]))
        close(nan_padded, [expected], atol=1e-6)
    assert copo_advantages(PEER_REWARDS, PEER_ANSWERS, mode="rl_zvp", zvp_alpha=0.3).weighted_global[1, 0] == \
        pytest.approx(0.3)


def test_std_none_is_the_centered_reward():
    assert standardize(torch.tensor([1.0, 0.0, 0.0, 0.0]), std="none").tolist() == [0.75, -0.25, -0.25, -0.25]
    assert standardize(torch.tensor([0.1, 0.1, 0.1]), std="none").tolist() == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------------------------------------
# Reinforce-Ada (arXiv 2510.04996): exit rules, the G kept, the pool baseline, by hand.

def test_reinforce_ada_exit_rules():
    from openrlhf_copo.core import ada_resolved

    # balanced at G = 4: two of each kind
    assert ada_resolved(2, 2, 4) and ada_resolved(5, 9, 4)
    assert not ada_resolved(1, 7, 4) and not ada_resolved(3, 1, 4) and not ada_resolved(0, 32, 4)
    # G = 5: floor(5 / 2) = 2 correct and 3 incorrect
    assert ada_resolved(2, 3, 5) and not ada_resolved(3, 2, 5)
    # positive-focused: one correct response is enough, failures are not waited for
    assert ada_resolved(1, 7, 4, "positive_focused") and ada_resolved(4, 0, 4, "positive_focused")
    assert not ada_resolved(0, 32, 4, "positive_focused")
    with pytest.raises(ValueError, match="exit must be one of"):
        ada_resolved(1, 1, 4, "greedy")


def test_reinforce_ada_keeps_a_balanced_group_in_draw_order():
    from openrlhf_copo.core import ada_select

    # 3 correct (2, 5, 6) and 4 incorrect: the first 2 of each
    assert ada_select([0, 0, 1, 0, 0, 1, 1], 4) == [0, 1, 2, 5]
    # positive-focused exit in round 2: 4 wrong, then a round of 8 with its one correct answer at index 10
    assert ada_select([0] * 4 + [0] * 6 + [1, 0], 4) == [0, 1, 2, 10]
    # 5 correct, 1 incorrect: the one incorrect and 3 correct (the short kind is filled by the other)
    assert ada_select([1, 1, 0, 1, 1, 1], 4) == [0, 1, 2, 3]
    assert ada_select([1, 1, 1, 1, 1, 0], 4) == [0, 1, 2, 5]
    # unresolved pools (all correct / all incorrect): the first G
    assert ada_select([0] * 32, 4) == [0, 1, 2, 3] and ada_select([1] * 12, 4) == [0, 1, 2, 3]
    # odd G: floor(G / 2) correct
    assert ada_select([1, 1, 1, 0, 0, 0, 0], 5) == [0, 1, 3, 4, 5]
    with pytest.raises(ValueError, match="pool of 3 responses cannot give a group of G = 4"):
        ada_select([1, 0, 1], 4)


def test_reinforce_ada_selects_from_a_kept_part_with_the_whole_pools_counts():
    """A pool that kept only what the selection can take (`ada_keepable`) selects by its whole counts: at G = 4, after
    [0, 1, 0, 0, 0, 1, 1] (3 correct, 4 incorrect) the first 2 of each kind; after an all-incorrect first round and
    one correct answer, the 3 incorrect and the 1 correct."""
    from openrlhf_copo.core import ada_keepable, ada_kept_counts, ada_select

    assert ada_kept_counts(3, 4, 4) == (2, 2) and ada_kept_counts(5, 1, 4) == (3, 1)
    assert ada_kept_counts(0, 32, 4) == (0, 4) and ada_kept_counts(12, 0, 4) == (4, 0)
    assert ada_kept_counts(3, 4, 5) == (2, 3)
    # nothing drawn yet: G of either kind may still be kept; each kind drawn lowers what the other keeps, to half
    assert ada_keepable(0, 0, 4) == (4, 4) and ada_keepable(0, 1, 4) == (3, 4) and ada_keepable(1, 1, 4) == (3, 3)
    assert ada_keepable(2, 2, 4) == (2, 2) and ada_keepable(9, 0, 4) == (4, 2) and ada_keepable(0, 9, 5) == (2, 5)
    assert ada_keepable(3, 0, 5) == (5, 3)  # odd G: floor(5 / 2) = 2 correct, 3 incorrect at the balance
    # the kept part (first 2 of each kind of [0, 1, 0, 0, 0, 1, 1]: draws 0, 1, 2, 5) with the whole pool's 3 and 4
    assert ada_select([0, 1, 0, 1], 4, n_correct=3, n_incorrect=4) == [0, 1, 2, 3]
    assert ada_select([0, 0, 0, 1], 4, n_correct=1, n_incorrect=9) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="are its first 2 correct and 2 incorrect ones; the 4 given hold 1 and 3"):
        ada_select([0, 1, 0, 0], 4, n_correct=3, n_incorrect=4)  # a kept part missing a correct one the G hold


def test_reinforce_ada_pool_baseline_by_hand():
    from openrlhf_copo.core import ada_pool_baseline

    mean, sd = ada_pool_baseline(torch.tensor([1, 0, 12, 1]), torch.tensor([8, 28, 12, 1]))
    assert mean.tolist() == pytest.approx([0.125, 0.0, 1.0, 0.0])  # a pool of one: mean 0 (theirs)
    # 1 of 8: sqrt(8 * 1/8 * 7/8 / 7) = sqrt(1/8); flat pools: clamped at eps; a pool of one: std 1
    assert sd.tolist() == pytest.approx([math.sqrt(1 / 8), 1e-6, 1e-6, 1.0], rel=1e-5)
    _, pop = ada_pool_baseline(torch.tensor([1]), torch.tensor([8]), std="population")
    assert pop.item() == pytest.approx(math.sqrt(7 / 64), rel=1e-6)


def test_reinforce_ada_advantage_uses_the_pool_not_the_kept_group():
    rewards = torch.tensor([[1.0, 0, 0, 0], [0.0] * 4, [1.0] * 4, [1.0, 1, 0, 0]])
    ids = torch.zeros(4, 4, dtype=torch.long)
    # pools: 1 correct of 8 (positive-focused exit), 0 of 32 (never resolved), 12 of 12 (never resolved), 2 of 4
    pool = {"pool_correct": torch.tensor([1, 0, 12, 2]), "pool_size": torch.tensor([8, 32, 12, 4])}
    out = copo_advantages(rewards, ids, mode="reinforce_ada", **pool)
    expected = [[0.875, -0.125, -0.125, -0.125], [0.0] * 4, [0.0] * 4, [0.5, 0.5, -0.5, -0.5]]
    close(out.local_adv, expected, 1e-6)  # GRPO's first row would be [1.5, -0.5, -0.5, -0.5]
    assert out.w_local.eq(1).all() and out.w_global.eq(0).all()
    # with the official code's std (norm_adv_by_std_in_grpo=True: torch.std, unbiased): 0.875 / sqrt(1/8)
    out = copo_advantages(rewards, ids, mode="reinforce_ada", std="unbiased", **pool)
    assert out.local_adv[0].tolist() == pytest.approx([0.875 / math.sqrt(1 / 8), -0.125 / math.sqrt(1 / 8)
                                                       ] + [-0.125 / math.sqrt(1 / 8)] * 2, rel=1e-5)
    assert out.local_adv[1:3].eq(0).all()  # flat pools: exactly 0, not 0 / eps noise
    with pytest.raises(ValueError, match="needs each prompt's pool statistics"):
        copo_advantages(rewards, ids, mode="reinforce_ada")


# ---------------------------------------------------------------------------------------------
# Reinforce-Ada with COPO's global term (issue 52, part 4).

ADA_COPO_REWARDS = torch.tensor([[0.0] * 4, [1.0] * 4, [1.0, 1, 0, 0]])
ADA_COPO_ANSWERS = torch.tensor([[1] * 4, [5] * 4, [4, 4, 2, 3]])
#: all incorrect of 32 drawn (never resolved), all correct of 12 (never resolved), 4 correct of 16 (resolved)
ADA_COPO_POOLS = {"pool_correct": torch.tensor([0, 12, 4]), "pool_size": torch.tensor([32, 12, 16])}


def test_reinforce_ada_copo_by_hand():
    """B = 3 prompts, G = 4, the paper's gamma 20, rho 1.5, zero control `prompt`:

    pool rates p = [0/32, 12/12, 4/16] = [0, 1, 0.25]
    local, r - p (no std):   [0, 0, 0, 0], [0, 0, 0, 0], [1 - 0.25, 0.75, 0 - 0.25, -0.25]
    global, R(q) = p:        mean 1.25 / 3 = 0.41667; deviations -0.41667, 0.58333, -0.16667;
                             population var 0.54167 / 3 = 0.18056, std 0.42492
                             -> [-0.98058, 1.37281, -0.39223]   (Bessel's std 0.52042 would give -0.80064, ...;
                             the kept groups' means [0, 1, 0.5] would give [-1.22474, 1.22474, 0])
    H (bits):                0 (one answer), 0 (one answer), 2/4 log2 2 + 2 x 1/4 log2 4 = 1.5 ([4, 4, 2, 3])
    w_local:                 0 (all incorrect: zero control), sigmoid(20 (0 - 1.5)) = 9.4e-14, sigmoid(0) = 0.5
    w_global = 1 - w_local:  1, 1 - 9.4e-14, 0.5"""
    out = copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="reinforce_ada_copo", **ADA_COPO_POOLS)
    close(out.local_adv, [[0.0] * 4, [0.0] * 4, [0.75, 0.75, -0.25, -0.25]], 1e-6)
    close(out.global_adv, [[-0.98058] * 4, [1.37281] * 4, [-0.39223] * 4], 1e-5)
    close(out.w_local, [[0.0] * 4, [9.3576e-14] * 4, [0.5] * 4], 1e-6)
    close(out.w_global, [[1.0] * 4, [1.0] * 4, [0.5] * 4], 1e-6)
    assert out.w_local[1, 0].item() == pytest.approx(1 / (1 + math.exp(30)), rel=1e-4)
    assert out.prompt_reward.tolist() == pytest.approx([0.0, 1.0, 0.25])  # logged as copo_prompt_reward_mean
    # --copo.std reaches the local term alone: the official code's std-normalized variant there, the same global term
    unbiased = copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="reinforce_ada_copo", std="unbiased",
                               **ADA_COPO_POOLS)
    sd = math.sqrt(16 * 0.25 * 0.75 / 15)
    close(unbiased.local_adv[2], [0.75 / sd, 0.75 / sd, -0.25 / sd, -0.25 / sd], 1e-5)
    assert torch.equal(unbiased.global_adv, out.global_adv)
    with pytest.raises(ValueError, match="needs each prompt's pool statistics"):
        copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="reinforce_ada_copo")


def test_reinforce_ada_copo_is_reinforce_ada_without_its_global_weight_and_copos_global_term_with_it():
    """rho -10 puts every w_local at 1 (no zero control): the step is Reinforce-Ada's, term for term. With pools of
    the kept G alone (pool rate = kept mean) the global term and both weights are mode copo's at the population std."""
    ada = copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="reinforce_ada", **ADA_COPO_POOLS)
    local_only = copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="reinforce_ada_copo", rho=-10.0,
                                 zero_control="none", **ADA_COPO_POOLS)
    assert torch.equal(local_only.weighted_local, ada.weighted_local) and (local_only.weighted_global == 0).all()
    kept = {"pool_correct": ADA_COPO_REWARDS.sum(dim=1), "pool_size": torch.full((3,), 4)}
    both = copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="reinforce_ada_copo", **kept)
    copo = copo_advantages(ADA_COPO_REWARDS, ADA_COPO_ANSWERS, mode="copo", std="population")
    for field in ("global_adv", "w_local", "w_global", "entropy", "prompt_reward"):
        torch.testing.assert_close(getattr(both, field), getattr(copo, field), atol=1e-6, rtol=0)
    close(both.local_adv, [[0.0] * 4, [0.0] * 4, [0.5, 0.5, -0.5, -0.5]], 1e-6)  # r - 1/2, copo's: +-1
    assert mode_info("reinforce_ada_copo").adaptive_sampling and mode_info("reinforce_ada_copo").clip == (0.2, 0.28)


# ---------------------------------------------------------------------------------------------
# Reinforce-Ada's selection control (issue 69): one uniform pool of k x G, G kept at random, the pool's baseline.

def test_the_selection_controls_keep_is_uniform_over_subsets_and_fixed_by_its_seed():
    """`ada_random_keep(n, G, seed)`: every G-subset of the n draws equally likely, whatever they are. At n = 4, G = 2
    there are C(4, 2) = 6 subsets, so 6000 seeds give each about 1000 and each draw is kept about 6000 x 2/4 = 3000
    times (a chi-square test of both against these counts). One seed keeps the same draws in every call, and the
    values below are pinned: a change of the generator would change every control run's keep."""
    from itertools import combinations

    from scipy.stats import chisquare

    from openrlhf_copo.core import ada_random_keep

    keeps = [tuple(ada_random_keep(4, 2, seed)) for seed in range(6000)]
    assert set(keeps) == set(combinations(range(4), 2))  # in draw order, each subset reached
    by_subset = [keeps.count(c) for c in combinations(range(4), 2)]
    assert chisquare(by_subset).pvalue > 0.01 and all(900 < n < 1100 for n in by_subset), by_subset
    by_draw = [sum(i in k for k in keeps) for i in range(4)]
    assert chisquare(by_draw).pvalue > 0.01 and sum(by_draw) == 12000, by_draw
    # reproducible: the same seed, the same keep (and a literal, so that it stays so across versions)
    assert ada_random_keep(24, 6, 7) == ada_random_keep(24, 6, 7) == sorted(random.Random(7).sample(range(24), 6))
    assert ada_random_keep(24, 6, 0) == [1, 8, 12, 13, 15, 16]
    assert len({tuple(ada_random_keep(24, 6, s)) for s in range(50)}) == 50  # other seeds, other keeps
    assert ada_random_keep(6, 6, 3) == list(range(6))  # a pool of G keeps all of it
    with pytest.raises(ValueError, match=r"a random keep of G = 7 from a pool of 6 responses"):
        ada_random_keep(6, 7, 0)


def test_the_selection_control_trains_on_the_pools_baseline_by_hand():
    """B = 3 prompts, G = 4 kept at random from pools of 16 (4G): r - p, p the pool's share of correct responses, no
    std, the local term alone; as reinforce_ada on the same kept groups and pools (only what is kept differs):

        pool 3 of 16 (p = 0.1875), kept [1, 0, 0, 0]:   [0.8125, -0.1875, -0.1875, -0.1875]
        pool 9 of 16 (p = 0.5625), kept [1, 1, 1, 0]:   [0.4375, 0.4375, 0.4375, -0.5625]
        pool 0 of 16 (p = 0),      kept [0, 0, 0, 0]:   [0, 0, 0, 0]
    (GRPO without std on the kept groups would give 0.75 / -0.25 and 0.25 / -0.75 for the first two.)"""
    rewards = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 1, 0], [0.0] * 4])
    ids = torch.tensor([[0, 1, 1, 2], [0, 0, 0, 1], [3] * 4])
    pool = {"pool_correct": torch.tensor([3, 9, 0]), "pool_size": torch.tensor([16, 16, 16])}
    out = copo_advantages(rewards, ids, mode="reinforce_ada_uniform", **pool)
    close(out.local_adv, [[0.8125, -0.1875, -0.1875, -0.1875], [0.4375] * 3 + [-0.5625], [0.0] * 4], 1e-6)
    assert out.w_local.eq(1).all() and out.w_global.eq(0).all()
    ada = copo_advantages(rewards, ids, mode="reinforce_ada", **pool)
    assert torch.equal(out.weighted_local, ada.weighted_local) and torch.equal(out.weighted_global, ada.weighted_global)
    info = mode_info("reinforce_ada_uniform")
    assert (info.adaptive_sampling, info.random_keep, info.std, info.clip) == (True, True, "none", (0.2, 0.28))
    assert not mode_info("reinforce_ada").random_keep
    with pytest.raises(ValueError, match=r"\(reinforce_ada, reinforce_ada_copo, reinforce_ada_uniform\) needs each "
                                         r"prompt's pool statistics"):
        copo_advantages(rewards, ids, mode="reinforce_ada_uniform")


def test_a_random_keep_without_adaptive_sampling_is_refused_at_registration():
    from openrlhf_copo.core import register_mode

    with pytest.raises(ValueError, match="mode odd: random_keep chooses the G kept of a pool"):
        register_mode("odd", blended=False, random_keep=True)(lambda x: None)
    assert "odd" not in modes()


# ---------------------------------------------------------------------------------------------
# Groups of different sizes (issue 69): equal sizes give the outputs of the code before them bit for bit; unequal
# sizes give each group's statistics over its own responses and the batch's over its prompts, checked by hand.

#: The outputs `copo_advantages` gave on `equal_size_cases` before it took groups of different sizes: per case, a
#: digest of every output tensor's dtype, shape and bytes (`outputs_digest`).
EQUAL_GROUPS_GOLDEN = Path(__file__).parent / "fixtures" / "copo_advantages_equal_groups.json"
OUTPUT_FIELDS = ("local_adv", "global_adv", "w_local", "w_global", "entropy", "prompt_reward")


def equal_size_cases(core):
    """(name, args, kwargs) of seeded random [B, G] batches for every mode of ``core``'s registry and several settings
    each: rewards 0 / 0.1 / 1 with an all-correct and an all-incorrect group, three answers, pools for the modes
    that sample adaptively. Each mode draws from its own seed, so that a mode registered later changes no other
    mode's cases."""
    cases = []
    for mode in sorted(core.modes()):
        info = core.mode_info(mode)
        gen = torch.Generator().manual_seed(zlib.crc32(mode.encode()))
        for B, G in ((5, 4), (3, 7)):
            rewards = torch.tensor([0.0, 0.1, 1.0])[torch.randint(0, 3, (B, G), generator=gen)]
            rewards[0], rewards[1] = 1.0, 0.0
            answers = torch.randint(0, 3, (B, G), generator=gen)
            correct = rewards >= 1.0
            pool = {}
            if info.adaptive_sampling:
                extra = torch.randint(0, 20, (B,), generator=gen).float()
                pool = {"pool_correct": correct.sum(1) + torch.randint(0, 5, (B,), generator=gen).float().clamp(max=extra),
                        "pool_size": G + extra}
            for std in [None] if info.std_fixed else [None, "unbiased"]:
                for reward_coef in (False, True):
                    for zc in core.ZERO_CONTROLS if info.zero_control else ["prompt"]:
                        cases.append((f"{mode}-{B}x{G}-{std}-{int(reward_coef)}-{zc}", (rewards, answers, correct),
                                      dict(mode=mode, std=std, reward_coef=reward_coef, zero_control=zc, gamma=5.0,
                                           rho=1.0, **pool)))
    return cases


def outputs_digest(out) -> str:
    """16 hex digits of the sha256 of every output tensor's name, dtype, shape and bytes: equal only bit for bit."""
    h = hashlib.sha256()
    for field in OUTPUT_FIELDS:
        t = getattr(out, field).contiguous()
        h.update(f"{field} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def test_equal_groups_give_the_outputs_of_the_code_before_groups_bit_for_bit():
    import openrlhf_copo.core as core

    golden = json.loads(EQUAL_GROUPS_GOLDEN.read_text())
    if torch.__version__ != golden["torch"]:
        pytest.skip(f"the golden digests are torch {golden['torch']}'s bytes, this is torch {torch.__version__}")
    cases = {name: (args, kwargs) for name, args, kwargs in equal_size_cases(core)}
    assert set(golden["digests"]) <= set(cases), "a mode of the golden file is no longer registered"
    for name, digest in golden["digests"].items():
        args, kwargs = cases[name]
        assert outputs_digest(copo_advantages(*args, **kwargs)) == digest, name


@pytest.mark.parametrize("mode", modes())
def test_equal_sizes_given_as_group_sizes_are_the_batch_call_bit_for_bit(mode):
    import openrlhf_copo.core as core

    for name, (rewards, answers, correct), kwargs in equal_size_cases(core):
        if kwargs["mode"] != mode:
            continue
        B, G = rewards.shape
        dense = copo_advantages(rewards, answers, correct, **kwargs)
        flat = copo_advantages(rewards.reshape(-1), answers.reshape(-1), correct.reshape(-1), group_sizes=[G] * B,
                               **kwargs)
        for field in OUTPUT_FIELDS:
            expected = getattr(dense, field)
            assert torch.equal(getattr(flat, field), expected.reshape(-1) if expected.dim() == 2 else expected), \
                (name, field)


@pytest.mark.parametrize("mode", modes())
def test_each_group_of_a_mixed_batch_gets_what_its_own_size_gives(mode):
    """Every per-group output of a batch of sizes 2, 5, 3, 5, 2 is what the [B, G] call gives for the groups of that
    size alone: the mode saw each group with its own size. (The global advantage is the batch's: tested by hand.)"""
    rng = torch.Generator().manual_seed(7)
    sizes = [2, 5, 3, 5, 2]
    rewards = torch.tensor([0.0, 0.1, 1.0])[torch.randint(0, 3, (sum(sizes),), generator=rng)]
    answers = torch.randint(0, 3, (sum(sizes),), generator=rng)
    pool = ({"pool_correct": torch.tensor([1.0, 3, 0, 8, 2]), "pool_size": torch.tensor([4.0, 9, 3, 20, 2])}
            if mode_info(mode).adaptive_sampling else {})
    out = copo_advantages(rewards, answers, rewards >= 1, group_sizes=sizes, mode=mode, gamma=5.0, rho=1.0, **pool)
    starts = [0, 2, 7, 10, 15]
    for size in set(sizes):
        rows = [b for b, s in enumerate(sizes) if s == size]
        take = torch.cat([torch.arange(starts[b], starts[b] + size) for b in rows])
        alone = copo_advantages(rewards[take].reshape(len(rows), size), answers[take].reshape(len(rows), size),
                                (rewards[take] >= 1).reshape(len(rows), size), mode=mode, gamma=5.0, rho=1.0,
                                **{k: v[rows] for k, v in pool.items()})
        for field in ("local_adv", "w_local", "w_global"):
            assert torch.equal(getattr(out, field)[take], getattr(alone, field).reshape(-1)), (size, field)
        assert torch.equal(out.entropy[rows], alone.entropy), size


def test_unequal_groups_by_hand():
    """Groups of 2, 5 and 3 responses, written out (eps 1e-6 aside):

        A: rewards [1, 0],          answers [3, 4]          mean 1/2, population std 1/2, H = 1 bit
        B: rewards [1, 1, 0, 0, 0], answers [7, 7, 7, 2, 5] mean 2/5, population std sqrt(6)/5 = 0.489898,
                                                            H = -(0.6 log2 0.6 + 2 x 0.2 log2 0.2) = 1.370951 bits
        C: rewards [1, 1, 1],       answers [9, 9, 9]       mean 1, std 0 (A_local exactly 0), H = 0

    GRPO: A [1, -1]; B 0.6 / 0.489898 = 1.224745, -0.4 / 0.489898 = -0.816497; C 0. With the unbiased std (n - 1 of
    the group's own n): A 0.5 / 0.707107 = 0.707107; B 0.6 / 0.547723 = 1.095445, -0.4 / 0.547723 = -0.730297.
    COPO's global term: R = [0.5, 0.4, 1.0] over the 3 prompts (each once, whatever its size): mean 0.633333,
    population std sqrt(((-2/15)^2 + (-7/30)^2 + (11/30)^2) / 3) = sqrt(62) / 30 = 0.262467, so A_global =
    (R - mean) / (std + 1e-6) = -0.507999 (A), -0.888998 (B), 1.396996 (C) on every response of the group.
    w_local = sigmoid(20 (H - 1.5)): A sigmoid(-10) = 4.5398e-5, B sigmoid(-2.580988) = 0.070373, C sigmoid(-30) =
    9.4e-14; no group is all incorrect.
    NGRPO (unbiased std, a virtual 1 joining each group): A [1, 0, 1]: mean 2/3, std sqrt(1/3), so 0.577350 and
    -1.154701; C [1, 1, 1, 1] stays 0. Dr. GRPO: A [0.5, -0.5], B [0.6, 0.6, -0.4, -0.4, -0.4]."""
    rewards = torch.tensor([1.0, 0, 1, 1, 0, 0, 0, 1, 1, 1])
    answers = torch.tensor([3, 4, 7, 7, 7, 2, 5, 9, 9, 9])
    sizes = [2, 5, 3]
    atol = dict(atol=5e-6, rtol=0)  # eps 1e-6 in the std's denominator moves the values by up to 3e-6

    def run(mode, **kw):
        return copo_advantages(rewards, answers, group_sizes=sizes, mode=mode, gamma=20.0, rho=1.5, **kw)

    grpo = run("grpo")
    torch.testing.assert_close(grpo.local_adv, torch.tensor([1.0, -1, 1.224745, 1.224745, -0.816497, -0.816497,
                                                             -0.816497, 0, 0, 0]), **atol)
    assert grpo.local_adv[7:].tolist() == [0.0, 0.0, 0.0] and grpo.w_global.tolist() == [0.0] * 10
    torch.testing.assert_close(run("grpo", std="unbiased").local_adv[:5],
                               torch.tensor([0.707107, -0.707107, 1.095445, 1.095445, -0.730297]), **atol)
    copo = run("copo")
    torch.testing.assert_close(copo.prompt_reward, torch.tensor([0.5, 0.4, 1.0]))
    torch.testing.assert_close(copo.global_adv, torch.tensor([-0.507999] * 2 + [-0.888998] * 5 + [1.396996] * 3),
                               **atol)
    torch.testing.assert_close(copo.entropy, torch.tensor([1.0, 1.370951, 0.0]), **atol)
    torch.testing.assert_close(copo.w_local, torch.tensor([4.5398e-5] * 2 + [0.070373] * 5 + [9.4e-14] * 3),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(copo.w_global, 1 - copo.w_local)
    torch.testing.assert_close(run("ngrpo").local_adv[[0, 1, 7]], torch.tensor([0.577350, -1.154701, 0.0]), **atol)
    assert run("dr_grpo").local_adv.tolist()[:7] == pytest.approx([0.5, -0.5, 0.6, 0.6, -0.4, -0.4, -0.4])


def test_group_sizes_that_do_not_fit_are_refused():
    r = torch.tensor([1.0, 0, 1, 0, 0])
    with pytest.raises(ValueError, match=r"sum\(group_sizes\) = 6"):
        copo_advantages(r, torch.zeros(5, dtype=torch.long), group_sizes=[2, 4])
    with pytest.raises(ValueError, match=r"at least 2 responses per prompt \(G=1\)"):
        copo_advantages(r, torch.zeros(5, dtype=torch.long), group_sizes=[2, 2, 1])
    with pytest.raises(ValueError, match=r"prompt group\(s\) \[1\]"):
        copo_advantages(torch.tensor([1.0, 0, 1, math.nan, 0]), torch.zeros(5, dtype=torch.long), group_sizes=[2, 3])


# ---------------------------------------------------------------------------------------------
# Knapsack RL's allocation (issue 69, item 3): value and dynamic program against values computed by hand from the
# published formulas (arXiv 2509.25849: value(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2; cost ln(1 - 0.9) / ln max(p,
# 1 - p)), the dynamic program against brute force, the budget exact.

def test_knapsack_value_by_hand():
    # p = 1/2: (1 - 2 / 2^N) / 8;  p = 1/4: (1 - 4^-N - 0.75^N) x 0.25 x 0.5625 = ... x 0.140625
    assert knapsack_value(4, 0.5) == pytest.approx(0.109375)
    assert knapsack_value(7, 0.5) == pytest.approx(0.123046875)
    assert knapsack_value(5, 0.25) == pytest.approx((1 - 0.25 ** 5 - 0.75 ** 5) * 0.140625)
    assert knapsack_value(5, 0.25) == pytest.approx(0.10711670)
    assert knapsack_value(8, 0.0) == knapsack_value(8, 1.0) == 0.0


def test_knapsack_need_is_their_probability_cost_rounded_up():
    # ln 0.1 / ln 0.5 = 3.32 -> 4; ln 0.1 / ln 0.75 = 8.004 -> 9; p = 0.1 and 0.9 alike: ln 0.1 / ln 0.9 = 21.85 -> 22
    assert [knapsack_need(p, 128) for p in (0.5, 0.25, 0.75, 0.1, 0.9)] == [4, 9, 9, 22, 22]
    assert knapsack_need(0.1, 8) == 8  # the cap


def test_knapsack_dp_finds_the_best_allocation_of_brute_force():
    rng = random.Random(69)
    for _ in range(30):
        rates = [rng.choice([rng.random(), 0.5, 0.05, 0.95]) for _ in range(rng.randint(1, 4))]
        n_min, n_max = 2, rng.randint(2, 7)
        budget = rng.randint(n_min * len(rates), n_max * len(rates))
        feasible = [a for a in itertools.product(range(n_min, n_max + 1), repeat=len(rates)) if sum(a) == budget]
        best = max(sum(knapsack_value(n, p) for n, p in zip(a, rates)) for a in feasible)
        sizes = knapsack_dp(rates, budget, n_min, n_max)
        assert sum(sizes) == budget and all(n_min <= n <= n_max for n in sizes)
        assert sum(knapsack_value(n, p) for n, p in zip(sizes, rates)) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_knapsack_allocation_by_hand():
    """B = 4 prompts x G = 4: a budget of 16, at most 8 each. p = 0.5, 0.25, 0, 1: every prompt 2; the mixed two need
    4 and min(8, 9) = 8 (2 + 6 more, all of the 8 left: no surplus); the 8 over p = 0.5 and 0.25 with N1 + N2 = 12:
    value(N1, 0.5) + value(N2, 0.25) =
        (4, 8) 0.109375 + 0.126545 = 0.235920     (5, 7) 0.117188 + 0.121845 = 0.239033
        (6, 6) 0.121094 + 0.115563 = 0.236657     (7, 5) 0.123047 + 0.107117 = 0.230164     (8, 4) 0.219604
    so (5, 7): [5, 7, 2, 2]."""
    assert knapsack_allocation([0.5, 0.25, 0.0, 1.0], 16, 8) == KnapsackAllocation((5, 7, 2, 2), mixed=2, surplus=0)
    # p = 0.5, 0, 0, 1: the mixed prompt needs 4 (2 more), the other 6 of the 8 left are the surplus, 3 to each
    # unsolved prompt (their fallback to p = 0 prompts); the solved one keeps 2
    assert knapsack_allocation([0.5, 0.0, 0.0, 1.0], 16, 8) == KnapsackAllocation((4, 5, 5, 2), mixed=1, surplus=6)
    # every prompt mixed, 12 for 2 at p = 0.5: each needs 4, the 4 left have no unsolved or solved prompt to go to, so
    # the mixed prompts take them by value: value(6) x 2 = 0.2421875 > value(5) + value(7) = 0.2402344
    assert knapsack_allocation([0.5, 0.5], 12, 8) == KnapsackAllocation((6, 6), mixed=2, surplus=4)


def test_knapsack_allocation_of_the_all_solved_and_all_unsolved_batches():
    # no prompt has a value: every response beyond the minima is surplus, spread evenly, as their code's uniform n
    assert knapsack_allocation([1.0, 1.0, 1.0], 12, 128) == KnapsackAllocation((4, 4, 4), mixed=0, surplus=6)
    assert knapsack_allocation([0.0, 0.0, 0.0], 12, 128) == KnapsackAllocation((4, 4, 4), mixed=0, surplus=6)
    # the unsolved take the surplus before the solved: 6 over two, 3 each; with 5 to spread over 2, the first gets 3
    assert knapsack_allocation([1.0, 0.0, 0.0], 12, 128).sizes == (2, 5, 5)
    assert knapsack_allocation([0.0, 1.0, 0.0], 11, 128).sizes == (5, 2, 4)
    # the cap: 4 over one unsolved prompt capped at 4 (2 more), the other 2 to the solved one (their code: 6 and 2)
    assert knapsack_allocation([0.0, 1.0], 8, 4).sizes == (4, 4)
    assert knapsack_allocation([0.0, 1.0], 8, 128).sizes == (6, 2)


def test_knapsack_allocation_spends_exactly_the_budget():
    rng = random.Random(3)
    for _ in range(200):
        B, G = rng.randint(1, 12), rng.randint(2, 8)
        rates = [rng.choice([0.0, 1.0, 0.5, rng.random()]) for _ in range(B)]
        n_max = rng.randint(G, 3 * G)
        sizes = knapsack_allocation(rates, B * G, n_max).sizes
        assert sum(sizes) == B * G and all(2 <= n <= n_max for n in sizes), (rates, G, n_max, sizes)
    with pytest.raises(ValueError, match="cannot give 2 prompts 2 to 3 each"):
        knapsack_allocation([0.5, 0.5], 8, 3)
