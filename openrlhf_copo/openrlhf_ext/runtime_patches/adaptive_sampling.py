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

The official code (RLHFlow/Reinforce-Ada, verl/trainer/ppo/ray_trainer.py `_generate_multi_round_adaptive_downsampling`)
draws round_repeat responses in its first round too; here the first round is the normal rollout's G, so that the
first round is GRPO's (with G = round size the two are the same). Evaluation and every other mode call the original.
"""

from __future__ import annotations

import functools
import sys
from collections import defaultdict
from typing import Dict, List

import torch

from openrlhf_copo.contract import (ADA_DRAWN, ADA_DRAWN_CORRECT, ADA_DRAWN_MAX, ADA_RESOLVED, ADA_ROUNDS, ADA_TOKENS,
                                    ADA_TOKENS_FIRST_ROUND)
from openrlhf_copo.core import ada_resolved, ada_select, mode_info
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol

_MODULE = "openrlhf.trainer.ppo_utils.samples_generator"


def samples_adaptively(args) -> bool:
    """Whether the run's advantage mode draws its groups adaptively (Reinforce-Ada)."""
    from openrlhf_copo.openrlhf_ext.config import is_copo, resolve_mode

    return is_copo(args) and mode_info(resolve_mode(args)).adaptive_sampling


def pools_by_prompt(experiences: List, G: int) -> List[List]:
    """The first round's responses as one pool per prompt: OpenRLHF's `_generate_vllm` appends each prompt's G
    responses together (one engine call per prompt), so they come in runs of G that share a prompt."""
    if len(experiences) % G:
        raise RuntimeError(f"reinforce_ada: {len(experiences)} responses in the first round, not a multiple of G = {G}")
    pools = [experiences[k:k + G] for k in range(0, len(experiences), G)]
    for k, pool in enumerate(pools):
        if len({(e.prompts[0], e.labels[0]) for e in pool}) != 1:
            raise RuntimeError(f"reinforce_ada: the first round's group {k} holds responses to different prompts")
    return pools


def is_correct(experience, threshold: float) -> bool:
    """A response is correct when its reward exceeds the threshold (the official code's positive_threshold)."""
    if experience.rewards is None:
        raise RuntimeError("reinforce_ada needs each response's reward when it is sampled (a reward function, "
                           "--reward.remote_url), not a reward model scored after the rollout")
    return float(experience.rewards.reshape(-1)[0]) > threshold


def pool_counts(pool: List, threshold: float):
    """(correct, incorrect) responses in a pool."""
    correct = sum(is_correct(e, threshold) for e in pool)
    return correct, len(pool) - correct


def open_prompts(pools: List[List], G: int, settings) -> Dict[int, int]:
    """{pool index: responses to draw for it next round}: every prompt not yet resolved and under the budget."""
    wanted = {}
    for k, pool in enumerate(pools):
        left = settings.ada_budget - len(pool)
        if left > 0 and not ada_resolved(*pool_counts(pool, settings.ada_threshold), G, settings.ada_exit):
            wanted[k] = min(settings.ada_round_size, left)
    return wanted


def draw_round(generator, pools: List[List], wanted: Dict[int, int], generate_kwargs) -> None:
    """One more round: ``wanted[k]`` responses for pool k, through OpenRLHF's dispatch (one call per round size, so
    the engines get every request of the round at once), appended to each pool in draw order."""
    import ray

    by_size = defaultdict(list)
    for k, size in wanted.items():
        by_size[size].append(k)
    calls = []
    for size, ks in by_size.items():
        first = [pools[k][0] for k in ks]
        refs = generator._dispatch_prompts_to_vllm([e.prompts[0] for e in first], [e.labels[0] for e in first],
                                                   images=[e.images[0] for e in first],
                                                   **{**generate_kwargs, "n_samples_per_prompt": size})
        calls.append((ks, refs))
    for ks, refs in calls:
        for k, responses in zip(ks, ray.get(refs)):
            pools[k].extend(generator._process_response_into_experience(r, **generate_kwargs) for r in responses)


def tokens(experiences) -> int:
    """Response tokens generated."""
    return int(sum(int(e.response_length.sum()) for e in experiences))


def keep_groups(pools: List[List], G: int, settings, rounds: int) -> List:
    """G responses per prompt (`core.ada_select`), in prompt order, each with its pool's statistics; the step's cost
    on every one (OpenRLHF averages `info` into its logs: a constant is logged as is)."""
    first_round = [e for pool in pools for e in pool[:G]]
    step = {ADA_ROUNDS: rounds, ADA_DRAWN_MAX: max(len(p) for p in pools),
            ADA_TOKENS: sum(tokens(p) for p in pools), ADA_TOKENS_FIRST_ROUND: tokens(first_round)}
    kept = []
    for pool in pools:
        correct = [is_correct(e, settings.ada_threshold) for e in pool]
        resolved = ada_resolved(sum(correct), len(pool) - sum(correct), G, settings.ada_exit)
        for i in ada_select(correct, G):
            e = pool[i]
            e.info[ADA_DRAWN] = torch.tensor([float(len(pool))])
            e.info[ADA_DRAWN_CORRECT] = torch.tensor([float(sum(correct))])
            e.info[ADA_RESOLVED] = torch.tensor([float(resolved)])
            for key, value in step.items():
                e.info[key] = torch.tensor([float(value)])
            kept.append(e)
    drawn = [len(p) for p in pools]
    resolved = sum(float(e.info[ADA_RESOLVED]) for e in kept) / G
    print(f"openrlhf_copo: reinforce_ada: {rounds} round(s); responses drawn per prompt: mean "
          f"{sum(drawn) / len(drawn):.3g}, max {max(drawn)}; {resolved:g} of {len(pools)} prompts resolved; {step[ADA_TOKENS]} tokens generated "
          f"({step[ADA_TOKENS_FIRST_ROUND]} in the first round)", file=sys.stderr, flush=True)
    return kept


def resample(generator, experiences: List, generate_kwargs) -> List:
    """Rounds 2.. for the unresolved prompts of a first round, then G kept per prompt (the module's docstring)."""
    args = generator.args
    G = generate_kwargs.get("n_samples_per_prompt", args.rollout.n_samples_per_prompt)
    pools = pools_by_prompt(experiences, G)
    rounds = 1
    while True:
        wanted = open_prompts(pools, G, args.copo)
        if not wanted:
            break
        draw_round(generator, pools, wanted, generate_kwargs)
        rounds += 1
    return keep_groups(pools, G, args.copo, rounds)


def apply_adaptive_sampling() -> None:
    """Patch 11, in the PPOTrainer actor: `SamplesGenerator._generate_vllm` draws Reinforce-Ada's rounds for the
    training rollout of an adaptive mode; the evaluation's calls (another prompt iterator) and every other mode
    get the original's result unchanged."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = SamplesGenerator._generate_vllm
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol(_MODULE, "SamplesGenerator._generate_vllm")
    check_symbol(_MODULE, "SamplesGenerator._dispatch_prompts_to_vllm")
    check_symbol(_MODULE, "SamplesGenerator._process_response_into_experience")

    @functools.wraps(original)
    def _generate_vllm(self, dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs):
        experiences, consumed, exhausted = original(self, dataloader_iter, num_prompts, dynamic_filtering,
                                                    **generate_kwargs)
        training = dataloader_iter is getattr(self, "_dataloader_iter", None)
        if training and experiences and samples_adaptively(self.args):
            experiences = resample(self, experiences, generate_kwargs)
        return experiences, consumed, exhausted

    setattr(_generate_vllm, PATCHED_ATTR, True)
    SamplesGenerator._generate_vllm = _generate_vllm
