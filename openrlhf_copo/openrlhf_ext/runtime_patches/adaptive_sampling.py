"""Patch 11: Reinforce-Ada's sampling rounds (arXiv 2510.04996) in `SamplesGenerator._generate_vllm`.

Under a mode that samples adaptively (`core.Mode.adaptive_sampling`: ``reinforce_ada``), a training rollout is:

1. the normal rollout, untouched: OpenRLHF's own `_generate_vllm` draws G responses per prompt, the reward function
   scoring each inside the vLLM engine actor (so a response's correctness is known when it comes back). Paired runs
   under `--copo.seeded_rollouts` therefore draw the same first round as a GRPO run of the same seed;
2. rounds of ``--copo.ada_round_size`` more responses for every prompt that has not met its exit rule
   (`core.ada_resolved`, ``--copo.ada_exit``), sent through the same `_dispatch_prompts_to_vllm` (and so the same
   engines, sampling parameters and per-response seeds), until every prompt is resolved or has drawn
   ``--copo.ada_budget`` responses;
3. G responses per prompt kept from its pool (`core.ada_select`), in prompt order, each carrying its pool's size and
   correct count (`contract.ADA_DRAWN`, `ADA_DRAWN_CORRECT`) for the advantage's pool baseline
   (`core.ada_local_advantage`), and the step's cost (`ADA_ROUNDS`, `ADA_DRAWN_MAX`, `ADA_TOKENS`, ...) as metrics.

A pool (`Pool`) holds counts of everything drawn for its prompt, and only the responses the selection can still take
(`core.ada_keepable`): at most G per prompt at any time, not the whole budget (at 512 prompts, budget 32 and 4k-token
responses the whole pools would be an estimated 1.6 GB in this process), with the same G kept.

At the first step this process samples, a step where no response counted as correct stops the run
(`check_first_step`): with a threshold above every reward the reward gives, every prompt would draw the whole budget
and train on its reward with no baseline. The preflight refuses such a threshold before the run when the reward file
declares its range (`preflight.check_ada_threshold`).

The official code (RLHFlow/Reinforce-Ada, verl/trainer/ppo/ray_trainer.py `_generate_multi_round_adaptive_downsampling`)
draws round_repeat responses in its first round too; here the first round is the normal rollout's G, so that the
first round is GRPO's (with G = round size the two are the same). Under a mode that allocates its budget
(``knapsack``) the patch hands the training rollout to `knapsack.generate`, which draws through `draw_round` too.
Evaluation and every other mode call the original.
"""

from __future__ import annotations

import functools
import sys
from collections import defaultdict
from typing import Dict, List

import torch

from openrlhf_copo.contract import (ADA_DRAWN, ADA_DRAWN_CORRECT, ADA_DRAWN_MAX, ADA_RESOLVED, ADA_ROUNDS, ADA_TOKENS,
                                    ADA_TOKENS_FIRST_ROUND, REWARD_RANGE)
from openrlhf_copo.core import ada_keepable, ada_resolved, ada_select, mode_info
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol

_MODULE = "openrlhf.trainer.ppo_utils.samples_generator"
#: Set on a `SamplesGenerator` once `check_first_step` has run on its first training rollout.
_FIRST_STEP_CHECKED = "_copo_ada_first_step_checked"


def samples_adaptively(args) -> bool:
    """Whether the run's advantage mode draws its groups adaptively (Reinforce-Ada)."""
    from openrlhf_copo.openrlhf_ext.config import is_copo, resolve_mode

    return is_copo(args) and mode_info(resolve_mode(args)).adaptive_sampling


def reward_of(experience) -> float:
    """A response's reward, scored in the engine as it was sampled."""
    if experience.rewards is None:
        raise RuntimeError("reinforce_ada needs each response's reward when it is sampled (a reward function, "
                           "--reward.remote_url), not a reward model scored after the rollout")
    return float(experience.rewards.reshape(-1)[0])


def tokens(experiences) -> int:
    """Response tokens generated."""
    return int(sum(int(e.response_length.sum()) for e in experiences))


class Pool:
    """One prompt's responses drawn so far, as the selection needs them: counts of every one (drawn, correct, tokens,
    the greatest reward), and the responses themselves only while `core.ada_select` can still take them: the first of
    each kind in draw order, as many as `core.ada_keepable` allows for the counts so far, which is at most G in all.
    Why: every response drawn past those is never trained on, and keeping the whole budget per prompt until selection
    is what the memory of a step would otherwise grow with.

    ``prompt``, ``label`` and ``image`` are the first response's: what the next round sends to the engines."""

    def __init__(self, first, G: int, threshold: float):
        self.prompt, self.label, self.image = first.prompts[0], first.labels[0], first.images[0]
        self.G, self.threshold = G, threshold
        self.kept: List = []  # (experience, correct), in draw order
        self.drawn = self.correct = self.tokens = 0
        self.greatest_reward = float("-inf")

    @property
    def incorrect(self) -> int:
        return self.drawn - self.correct

    def add(self, experience) -> None:
        """Count one more response (the next in draw order), keep it if the selection can still take it, and let go of
        the kept ones it no longer can. It is correct when its reward exceeds the threshold (the official code's
        positive_threshold)."""
        reward = reward_of(experience)
        correct = reward > self.threshold
        self.drawn += 1
        self.correct += correct
        self.tokens += tokens([experience])
        self.greatest_reward = max(self.greatest_reward, reward)
        self.kept.append((experience, correct))
        most = dict(zip((True, False), ada_keepable(self.correct, self.incorrect, self.G)))
        taken = {True: 0, False: 0}
        kept = []
        for e, c in self.kept:
            if taken[c] < most[c]:
                taken[c] += 1
                kept.append((e, c))
        self.kept = kept

    def select(self) -> List:
        """The G responses that train (`core.ada_select` on what was kept, with the whole pool's counts)."""
        return [self.kept[i][0] for i in ada_select([c for _, c in self.kept], self.G, self.correct, self.incorrect)]


def responses_by_prompt(experiences: List, n: int, what: str = "reinforce_ada: the first round") -> List[List]:
    """A round's responses as one run of n per prompt: OpenRLHF's `_generate_vllm` appends each prompt's n responses
    together (one engine call per prompt), so they come in runs of n that share a prompt. ``what`` names the round in
    the errors."""
    if len(experiences) % n:
        raise RuntimeError(f"{what}: {len(experiences)} responses, not a multiple of G = {n}")
    runs = [experiences[k:k + n] for k in range(0, len(experiences), n)]
    for k, run in enumerate(runs):
        if len({(e.prompts[0], e.labels[0]) for e in run}) != 1:
            raise RuntimeError(f"{what}: group {k} holds responses to different prompts")
    return runs


def pools_by_prompt(experiences: List, G: int, threshold: float) -> List[Pool]:
    """The first round's responses as one pool per prompt (`responses_by_prompt`)."""
    pools = []
    for group in responses_by_prompt(experiences, G):
        pool = Pool(group[0], G, threshold)
        for e in group:
            pool.add(e)
        pools.append(pool)
    return pools


def open_prompts(pools: List[Pool], G: int, settings) -> Dict[int, int]:
    """{pool index: responses to draw for it next round}: every prompt not yet resolved and under the budget."""
    wanted = {}
    for k, pool in enumerate(pools):
        left = settings.ada_budget - pool.drawn
        if left > 0 and not ada_resolved(pool.correct, pool.incorrect, G, settings.ada_exit):
            wanted[k] = min(settings.ada_round_size, left)
    return wanted


def draw_round(generator, pools: List, wanted: Dict[int, int], generate_kwargs) -> None:
    """One more round: ``wanted[k]`` responses for pool k, through OpenRLHF's dispatch (one call per round size, so
    the engines get every request of the round at once), added to each pool in draw order. A pool is anything with
    the ``prompt``, ``label`` and ``image`` to send and an ``add(experience)``: a `Pool`, or a group of Knapsack RL's
    (`knapsack.Group`)."""
    import ray

    by_size = defaultdict(list)
    for k, size in wanted.items():
        by_size[size].append(k)
    calls = []
    for size, ks in by_size.items():
        refs = generator._dispatch_prompts_to_vllm([pools[k].prompt for k in ks], [pools[k].label for k in ks],
                                                   images=[pools[k].image for k in ks],
                                                   **{**generate_kwargs, "n_samples_per_prompt": size})
        calls.append((ks, refs))
    for ks, refs in calls:
        for k, responses in zip(ks, ray.get(refs)):
            for r in responses:
                pools[k].add(generator._process_response_into_experience(r, **generate_kwargs))


def check_first_step(pools: List[Pool], settings) -> None:
    """Stop the run (one line) when no response of a step counted as correct: no pool then holds both kinds, so every
    prompt drew the whole budget, and each trains on its reward with the baseline 0 (REINFORCE without a baseline: a
    threshold above every reward the reward function gives, as 5 with 0/1 rewards), or, where every reward is 0,
    trains on nothing, and the next step draws from the same policy. Run on the first step only: later, a step like
    that is a hard batch, not a setting."""
    if any(pool.correct for pool in pools):
        return
    from openrlhf_copo.openrlhf_ext.config import CopoConfigError

    greatest = max(pool.greatest_reward for pool in pools)
    raise CopoConfigError(
        f"reinforce_ada: no response of the first step had a reward above --copo.ada_threshold "
        f"{settings.ada_threshold:g} (greatest: {greatest:g}): every prompt drew its whole --copo.ada_budget "
        f"{settings.ada_budget} and would train on its reward with no baseline; set the threshold within the reward's "
        f"range ({REWARD_RANGE} in the reward file checks it at start)")


def keep_groups(pools: List[Pool], G: int, settings, rounds: int, first_round_tokens: int) -> List:
    """G responses per prompt (`Pool.select`), in prompt order, each with its pool's statistics; the step's cost
    on every one (OpenRLHF averages `info` into its logs: a constant is logged as is)."""
    step = {ADA_ROUNDS: rounds, ADA_DRAWN_MAX: max(p.drawn for p in pools),
            ADA_TOKENS: sum(p.tokens for p in pools), ADA_TOKENS_FIRST_ROUND: first_round_tokens}
    kept = []
    for pool in pools:
        resolved = ada_resolved(pool.correct, pool.incorrect, G, settings.ada_exit)
        for e in pool.select():
            e.info[ADA_DRAWN] = torch.tensor([float(pool.drawn)])
            e.info[ADA_DRAWN_CORRECT] = torch.tensor([float(pool.correct)])
            e.info[ADA_RESOLVED] = torch.tensor([float(resolved)])
            for key, value in step.items():
                e.info[key] = torch.tensor([float(value)])
            kept.append(e)
    drawn = [p.drawn for p in pools]
    resolved = sum(float(e.info[ADA_RESOLVED]) for e in kept) / G
    print(f"openrlhf_copo: reinforce_ada: {rounds} round(s); responses drawn per prompt: mean "
          f"{sum(drawn) / len(drawn):.3g}, max {max(drawn)}; {resolved:g} of {len(pools)} prompts resolved; "
          f"{step[ADA_TOKENS]} tokens generated ({step[ADA_TOKENS_FIRST_ROUND]} in the first round)",
          file=sys.stderr, flush=True)
    return kept


def resample(generator, experiences: List, generate_kwargs) -> List:
    """Rounds 2.. for the unresolved prompts of a first round, then G kept per prompt (the module's docstring).
    Takes ``experiences``, the first round's list, over: it is emptied once its responses are in their pools, so that
    those no pool keeps are let go of (the caller holds the list during the call)."""
    args = generator.args
    G = generate_kwargs.get("n_samples_per_prompt", args.rollout.n_samples_per_prompt)
    first_round_tokens = tokens(experiences)
    pools = pools_by_prompt(experiences, G, args.copo.ada_threshold)
    experiences.clear()
    rounds = 1
    while True:
        wanted = open_prompts(pools, G, args.copo)
        if not wanted:
            break
        draw_round(generator, pools, wanted, generate_kwargs)
        rounds += 1
    if not getattr(generator, _FIRST_STEP_CHECKED, False):
        setattr(generator, _FIRST_STEP_CHECKED, True)
        check_first_step(pools, args.copo)
    return keep_groups(pools, G, args.copo, rounds, first_round_tokens)


def apply_adaptive_sampling() -> None:
    """Patch 11, in the PPOTrainer actor: `SamplesGenerator._generate_vllm` draws Reinforce-Ada's rounds for the
    training rollout of an adaptive mode, and Knapsack RL's pilot and allocation for a mode that allocates its budget
    (`knapsack.generate`); the evaluation's calls (another prompt iterator) and every other mode get the original's
    result unchanged."""
    from openrlhf_copo.openrlhf_ext.runtime_patches import knapsack
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = SamplesGenerator._generate_vllm
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol(_MODULE, "SamplesGenerator._generate_vllm")
    check_symbol(_MODULE, "SamplesGenerator._dispatch_prompts_to_vllm")
    check_symbol(_MODULE, "SamplesGenerator._process_response_into_experience")

    @functools.wraps(original)
    def _generate_vllm(self, dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs):
        training = dataloader_iter is getattr(self, "_dataloader_iter", None)
        if training and knapsack.allocates_budget(self.args):
            return knapsack.generate(self, original, dataloader_iter, num_prompts, dynamic_filtering, generate_kwargs)
        experiences, consumed, exhausted = original(self, dataloader_iter, num_prompts, dynamic_filtering,
                                                    **generate_kwargs)
        if training and experiences and samples_adaptively(self.args):
            experiences = resample(self, experiences, generate_kwargs)
        return experiences, consumed, exhausted

    setattr(_generate_vllm, PATCHED_ATTR, True)
    SamplesGenerator._generate_vllm = _generate_vllm
