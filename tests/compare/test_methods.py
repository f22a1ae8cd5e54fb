"""`compare.methods`: the methods' flags, their published clips (the selection control's too), the budget control's
4 x G."""

import pytest

from compare_support import setting
from openrlhf_copo import compare
from openrlhf_copo.openrlhf_ext.config import attainable_blends


def test_the_rho_that_keeps_every_mixed_split():
    """(G-1)+1 is the most lopsided split: H = -(5/6 log2 5/6 + 1/6 log2 1/6) = 0.650 bits at G = 6, 0.811 at G = 4;
    w_local >= 0.99 needs H - rho >= ln(99) / 20 = 0.2298. So rho 0.42 at G = 6 and 0.58 at G = 4, and the
    benchmark's copo_selective_rho04 keeps every split of 6 responses at w_local >= 0.99."""
    assert compare.rho_keeping_every_split(6) == 0.42
    assert compare.rho_keeping_every_split(4) == 0.58
    rho = float(compare.METHODS["copo_selective_rho04"][-1])
    mixed = [w for pattern, _, w in attainable_blends(6, 20.0, rho, 2.0) if len(pattern) > 1]
    assert min(mixed) == pytest.approx(1 / (1 + 2.718281828 ** (-20 * (0.6500224 - 0.4))), rel=1e-4)
    assert min(mixed) > 0.99


def test_each_method_of_a_published_clip_runs_at_it_and_the_adaptive_ones_at_their_budget(load_args, tmp_path):
    """A method whose mode carries its paper's clip range (`core.Mode.clip`) runs at that range, so its start-up warns
    of nothing; the combination of Reinforce-Ada with COPO's global term (issue 52, part 4) is one of them, and the
    plan counts it at Reinforce-Ada's budget."""
    from openrlhf_copo.core import mode_info
    from openrlhf_copo.openrlhf_ext.config import copo_warnings, is_copo, resolve_mode

    assert compare.METHODS["reinforce_ada_copo"][:2] == ["--advantage_estimator", "reinforce_ada_copo"]
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=6, steps=2)
    published = []
    for method in compare.METHODS:
        a = load_args(compare.run_argv(s, method, 0, tmp_path / method, tmp_path / "train.jsonl", step0=False))
        info = mode_info(resolve_mode(a)) if is_copo(a) else None
        if info is not None and info.clip is not None:
            published.append(method)
            assert tuple(a.actor.eps_clip_low_high) == info.clip, method
            assert not [w for w in copo_warnings(a) if "clips the ratio" in w], method
    assert {"ngrpo", "rl_zvp", "reinforce_ada", "reinforce_ada_copo", "reinforce_ada_uniform"} <= set(published)
    assert compare.sampling_budget("reinforce_ada_copo", []) == 32


def test_grpo_4xg_is_grpos_run_drawing_4g_per_prompt_in_one_optimizer_step(load_args, tmp_path):
    """8 prompts x G 6: GRPO draws 6 per prompt and trains on 48 in one optimizer step; grpo_4xg draws 24 and trains
    on 192, in one step too, and its command line is GRPO's with those two values alone changed (a METHODS entry
    could not say it: the tool's G and train batch come after the method's flags and win)."""
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=8, steps=3,
                extra=["--train.micro_batch_size", "12"])
    run = tmp_path / "run"  # one folder for both, so the paths in the two command lines agree
    grpo = compare.run_argv(s, "grpo", 3, run, tmp_path / "train.jsonl", step0=False)
    wide = compare.run_argv(s, "grpo_4xg", 3, run, tmp_path / "train.jsonl", step0=False)
    a = load_args(wide)
    assert a.algo.advantage.estimator == "copo" and a.copo.mode == "grpo"
    assert (a.rollout.batch_size, a.rollout.n_samples_per_prompt, a.train.batch_size) == (8, 24, 192)
    expected = list(grpo)
    expected[grpo.index("--rollout.n_samples_per_prompt") + 1] = "24"
    expected[grpo.index("--train.batch_size") + 1] = "192"
    assert wide == expected
    assert a.train.micro_batch_size == 12  # responses per micro-batch: the same as GRPO's
    assert a.actor.adam.lr == load_args(grpo).actor.adam.lr
    assert compare.samples_per_prompt(s, "grpo_4xg") == 24 and compare.samples_per_prompt(s, "grpo") == 6


def test_knapsack_runs_grpos_budget_and_clip_with_its_allocation(load_args, tmp_path):
    """`knapsack` through the tool: the mode that allocates its budget (run-time patch 11), GRPO's G, train batch and
    clip, a plan at GRPO's cost (it draws P x G a step, as GRPO), and its cap refused below G."""
    from openrlhf_copo.openrlhf_ext.config import copo_problems
    from openrlhf_copo.openrlhf_ext.runtime_patches import ADAPTIVE_SAMPLING_PATCH, patches_for

    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=8, steps=3)
    run = tmp_path / "run"
    knapsack = compare.run_argv(s, "knapsack", 0, run, tmp_path / "train.jsonl", step0=False)
    grpo = compare.run_argv(s, "grpo", 0, run, tmp_path / "train.jsonl", step0=False)
    a, g = load_args(knapsack), load_args(grpo)
    assert a.algo.advantage.estimator == "knapsack" and ADAPTIVE_SAMPLING_PATCH in patches_for(a)
    assert ADAPTIVE_SAMPLING_PATCH not in patches_for(g)
    assert (a.rollout.batch_size, a.rollout.n_samples_per_prompt, a.train.batch_size) == (8, 6, 48)
    assert tuple(a.actor.eps_clip_low_high) == tuple(g.actor.eps_clip_low_high)
    assert compare.sampling_budget("knapsack", []) is None and copo_problems(a) == []
    a.copo.knapsack_max_n, g.copo.knapsack_max_n = 5, 12
    assert copo_problems(a)[0].startswith("--copo.knapsack_max_n 5 < --rollout.n_samples_per_prompt 6: mode knapsack")
    assert copo_problems(g)[0].startswith("--copo.knapsack_max_n 12 is read by the modes that allocate each step's "
                                          "budget over its prompts (knapsack) only")
