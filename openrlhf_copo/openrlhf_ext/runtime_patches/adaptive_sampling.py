"""Patch 11: Reinforce-Ada's sampling rounds (arXiv 2510.04996) in `SamplesGenerator._generate_vllm`.

Under a mode that samples adaptively (`core.Mode.adaptive_sampling`: ``reinforce_ada``, ``reinforce_ada_copo``), a
training rollout is:

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

Reinforce-Ada's selection control (``reinforce_ada_uniform``, `core.Mode.random_keep`) is one more rule of the same
steps: 2. is one round that brings every prompt to ``--copo.ada_draw_factor`` x G responses, whatever they are, and 3.
keeps G of them chosen at random (`core.ada_random_keep`), seeded by the run's seed, the prompt and the run's draw
index of the prompt's first response of the step (`keep_seed`, `first_draw_indices`): the same keep in every run of a
seed. Under --copo.seeded_rollouts and the default factor 4, its pools' draws carry the seeds of the budget control
``grpo_4xg``'s draws (the same draw indices: 4G a visit for both).

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
import hashlib
import sys
from collections import Counter
from typing import Dict, List, Optional, Sequence

import torch

from openrlhf_copo.contract import (ADA_DRAWN, ADA_DRAWN_CORRECT, ADA_DRAWN_MAX, ADA_RESOLVED, ADA_ROUNDS, ADA_TOKENS,
                                    ADA_TOKENS_FIRST_ROUND, REWARD_RANGE)
from openrlhf_copo.core import Mode, ada_keepable, ada_random_keep, ada_resolved, ada_select, mode_info
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import (DrawCounter, draw_round, prompt_key,  # noqa: F401
                                                               responses_by_prompt, reward_of)
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol

_MODULE = "openrlhf.trainer.ppo_utils.samples_generator"
#: Set on a `SamplesGenerator` once `check_first_step` has run on its first training rollout.
_FIRST_STEP_CHECKED = "_copo_ada_first_step_checked"
#: Set on a `SamplesGenerator` whose run does not seed its rollouts: its own count of the draws per prompt, for the
#: random keep's seeds (`first_draw_indices`).
_OWN_DRAWS = "_copo_ada_own_draws"


def adaptive_mode(args) -> Optional[Mode]:
    """The run's advantage mode when it draws its groups adaptively (Reinforce-Ada and its selection control), else
    None."""
    from openrlhf_copo.openrlhf_ext.config import is_copo, resolve_mode

    info = mode_info(resolve_mode(args)) if is_copo(args) else None
    return info if info is not None and info.adaptive_sampling else None


def samples_adaptively(args) -> bool:
    """Whether the run's advantage mode draws its groups adaptively (Reinforce-Ada and its selection control)."""
    return adaptive_mode(args) is not None


def tokens(experiences) -> int:
    """Response tokens generated."""
    return int(sum(int(e.response_length.sum()) for e in experiences))


class Pool:
    """One prompt's responses drawn so far, as the selection needs them: counts of every one (drawn, correct, tokens,
    the greatest reward), and the responses themselves only while the selection can still take them, at most G in all.
    Reinforce-Ada's (`core.ada_select`): the first of each kind in draw order, as many as `core.ada_keepable` allows for
    the counts so far; the random keep's (``chosen``: the draw indices it keeps, `core.ada_random_keep`): those draws.
    Why: every response drawn past those is never trained on, and keeping the whole budget per prompt until selection
    is what the memory of a step would otherwise grow with.

    ``prompt``, ``label`` and ``image`` are the first response's: what the next round sends to the engines."""

    def __init__(self, first, G: int, threshold: float, chosen: Optional[Sequence[int]] = None):
        self.prompt, self.label, self.image = first.prompts[0], first.labels[0], first.images[0]
        self.G, self.threshold = G, threshold
        self.chosen = None if chosen is None else frozenset(chosen)
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
        index = self.drawn
        self.drawn += 1
        self.correct += correct
        self.tokens += tokens([experience])
        self.greatest_reward = max(self.greatest_reward, reward)
        if self.chosen is not None:
            if index in self.chosen:
                self.kept.append((experience, correct))
            return
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
        """The G responses that train: the random keep's chosen draws, or `core.ada_select` on what was kept, with the
        whole pool's counts."""
        if self.chosen is not None:
            if len(self.kept) != self.G:
                raise RuntimeError(f"the random keep chose draws {sorted(self.chosen)} of a pool that drew "
                                   f"{self.drawn}: {len(self.kept)} of them were drawn, not G = {self.G}")
            return [e for e, _ in self.kept]
        return [self.kept[i][0] for i in ada_select([c for _, c in self.kept], self.G, self.correct, self.incorrect)]


def pools_by_prompt(experiences: List, G: int, threshold: float,
                    chosen: Optional[List[Sequence[int]]] = None) -> List[Pool]:
    """The first round's responses as one pool per prompt (`responses_by_prompt`); ``chosen``: per prompt, the draw
    indices its random keep takes (Reinforce-Ada's balanced keep without it)."""
    pools = []
    for k, group in enumerate(responses_by_prompt(experiences, G)):
        pool = Pool(group[0], G, threshold, None if chosen is None else chosen[k])
        for e in group:
            pool.add(e)
        pools.append(pool)
    return pools


def open_prompts(pools: List[Pool], G: int, settings, pool_size: Optional[int] = None) -> Dict[int, int]:
    """{pool index: responses to draw for it next round}: Reinforce-Ada's, every prompt not yet resolved and under the
    budget, a round of ``--copo.ada_round_size``; the random keep's (``pool_size``: its draws per prompt), every prompt
    short of them, all it lacks at once, whatever it drew."""
    if pool_size is not None:
        return {k: pool_size - pool.drawn for k, pool in enumerate(pools) if pool.drawn < pool_size}
    wanted = {}
    for k, pool in enumerate(pools):
        left = settings.ada_budget - pool.drawn
        if left > 0 and not ada_resolved(pool.correct, pool.incorrect, G, settings.ada_exit):
            wanted[k] = min(settings.ada_round_size, left)
    return wanted


def keep_seed(run_seed: int, prompt, draw: int) -> int:
    """The seed of a pool's random keep (`core.ada_random_keep`): a hash of the run's seed (--train.seed), the run's
    draw index of the prompt's first response in the pool and the prompt (`rollout.prompt_key`), as
    `rollout.seeded_sampling_params` seeds a draw, under a prefix of its own ("keep"), so that the keep and the
    draw's sampling never share a seed."""
    return int.from_bytes(hashlib.sha256(f"keep:{run_seed}:{draw}:".encode() + bytes.fromhex(prompt_key(prompt)))
                          .digest()[:8], "little")


def first_draw_indices(generator, prompts: List, G: int, pool_size: int) -> List[int]:
    """Per first-round group (its prompt), the run's draw index of its first response: the responses the run drew for
    the prompt before the step, plus G for each earlier group of the same prompt in the step (each prompt's first
    round is dispatched in batch order). Under --copo.seeded_rollouts that is the run's own count (`DrawCounter`, kept
    in its checkpoints, so a resumed run keeps as the run it resumes would have), which has counted the first round
    already. Without it this generator counts the ``pool_size`` draws of each pool itself (a resumed run starts that
    count again; its draws are not reproducible either: vLLM's unseeded draws depend on the batch)."""
    counter = DrawCounter.find(generator)
    if counter is None:
        counts = generator.__dict__.setdefault(_OWN_DRAWS, {})
        step = Counter()
    else:
        counts = counter.counts
        step = Counter(prompt_key(p) for p in prompts)  # the first round's draws, counted already
    first, seen = [], Counter()
    for prompt in prompts:
        key = prompt_key(prompt)
        first.append(counts.get(key, 0) - G * step[key] + G * seen[key])
        seen[key] += 1
    if counter is None:
        for prompt in prompts:
            counts[prompt_key(prompt)] = counts.get(prompt_key(prompt), 0) + pool_size
    return first


def random_keeps(generator, experiences: List, G: int, pool_size: int) -> List[List[int]]:
    """Per first-round group, the draw indices (0 .. ``pool_size`` - 1 within its pool) of the G its random keep
    trains on (`core.ada_random_keep`, seeded by `keep_seed`)."""
    prompts = [group[0].prompts[0] for group in responses_by_prompt(experiences, G)]
    run_seed = generator.args.train.seed
    return [ada_random_keep(pool_size, G, keep_seed(run_seed, prompt, draw))
            for prompt, draw in zip(prompts, first_draw_indices(generator, prompts, G, pool_size))]


def check_first_step(pools: List[Pool], settings, mode: Mode) -> None:
    """Stop the run (one line) when no response of a step counted as correct: no pool then holds both kinds, so each
    prompt trains on its reward with the baseline 0 (REINFORCE without a baseline: a threshold above every reward the
    reward function gives, as 5 with 0/1 rewards), or, where every reward is 0, trains on nothing, and the next step
    draws from the same policy; under Reinforce-Ada's rounds every prompt also drew the whole budget. Run on the first
    step only: later, a step like that is a hard batch, not a setting."""
    if any(pool.correct for pool in pools):
        return
    from openrlhf_copo.openrlhf_ext.config import CopoConfigError

    greatest = max(pool.greatest_reward for pool in pools)
    drew = "" if mode.random_keep else f"drew its whole --copo.ada_budget {settings.ada_budget} and "
    raise CopoConfigError(
        f"{mode.name}: no response of the first step had a reward above --copo.ada_threshold "
        f"{settings.ada_threshold:g} (greatest: {greatest:g}): every prompt {drew}would train on its reward with no "
        f"baseline; set the threshold within the reward's range ({REWARD_RANGE} in the reward file checks it at start)")


def keep_groups(pools: List[Pool], G: int, settings, rounds: int, first_round_tokens: int, mode: str) -> List:
    """G responses per prompt (`Pool.select`), in prompt order, each with its pool's statistics; the step's cost
    on every one (OpenRLHF averages `info` into its logs: a constant is logged as is). A pool is resolved when it
    meets the exit rule (`core.ada_resolved`; under the random keep, which has none, Reinforce-Ada's default
    rule, balanced: whether Reinforce-Ada would have stopped drawing at this pool)."""
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
    print(f"openrlhf_copo: {mode}: {rounds} round(s); responses drawn per prompt: mean "
          f"{sum(drawn) / len(drawn):.3g}, max {max(drawn)}; {resolved:g} of {len(pools)} prompts resolved; "
          f"{step[ADA_TOKENS]} tokens generated ({step[ADA_TOKENS_FIRST_ROUND]} in the first round)",
          file=sys.stderr, flush=True)
    return kept


def resample(generator, experiences: List, generate_kwargs, mode: Mode) -> List:
    """Rounds 2.. of a first round under ``mode`` (Reinforce-Ada's for the unresolved prompts, or the random keep's
    one round to ``--copo.ada_draw_factor`` x G), then G kept per prompt (the module's docstring). Takes
    ``experiences``, the first round's list, over: it is emptied once its responses are in their pools, so that those
    no pool keeps are let go of (the caller holds the list during the call)."""
    args = generator.args
    G = generate_kwargs.get("n_samples_per_prompt", args.rollout.n_samples_per_prompt)
    first_round_tokens = tokens(experiences)
    pool_size = args.copo.ada_draw_factor * G if mode.random_keep else None
    chosen = random_keeps(generator, experiences, G, pool_size) if mode.random_keep else None
    pools = pools_by_prompt(experiences, G, args.copo.ada_threshold, chosen)
    experiences.clear()
    rounds = 1
    while True:
        wanted = open_prompts(pools, G, args.copo, pool_size)
        if not wanted:
            break
        draw_round(generator, pools, wanted, generate_kwargs)
        rounds += 1
    if not getattr(generator, _FIRST_STEP_CHECKED, False):
        setattr(generator, _FIRST_STEP_CHECKED, True)
        check_first_step(pools, args.copo, mode)
    return keep_groups(pools, G, args.copo, rounds, first_round_tokens, mode.name)


def apply_adaptive_sampling() -> None:
    """Patch 11, in the PPOTrainer actor: `SamplesGenerator._generate_vllm` draws Reinforce-Ada's rounds (or its
    selection control's one round) for the training rollout of an adaptive mode, and Knapsack RL's pilot and
    allocation for a mode that allocates its budget (`knapsack.generate`); the evaluation's calls (another prompt
    iterator) and every other mode get the original's result unchanged."""
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
        mode = adaptive_mode(self.args) if training and experiences else None
        if mode is not None:
            experiences = resample(self, experiences, generate_kwargs, mode)
        return experiences, consumed, exhausted

    setattr(_generate_vllm, PATCHED_ATTR, True)
    SamplesGenerator._generate_vllm = _generate_vllm
