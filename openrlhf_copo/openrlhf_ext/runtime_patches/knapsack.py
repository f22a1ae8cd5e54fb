"""Patch 11 under mode ``knapsack``: Knapsack RL's allocation of a step's B x G responses over its B prompts (arXiv
2509.25849), in `SamplesGenerator._generate_vllm` (installed by `adaptive_sampling.apply_adaptive_sampling`).

A training rollout of a mode that allocates its budget (`core.Mode.budget_allocation`):

1. the pilot: OpenRLHF's own `_generate_vllm` draws `core.KNAPSACK_MIN_N` (2) responses per prompt, every prompt's
   first 2, which it keeps whatever its allocation (N_i >= 2); under `--copo.seeded_rollouts` they are the first 2
   responses a GRPO run of the same seed draws for the prompt;
2. each prompt's success rate p: the share of correct responses among its latest `core.KNAPSACK_WINDOW` of earlier
   steps (`History`, kept in this process by prompt), or, for a prompt never drawn before, among its pilot's 2;
3. N_i = `core.knapsack_allocation(p, B x G, --copo.knapsack_max_n)`: sum N_i = B x G exactly, the pilot included;
4. N_i - 2 more responses per prompt in one round, through `adaptive_sampling.draw_round` (the same dispatch, engines,
   sampling parameters and per-response seeds as Reinforce-Ada's rounds);
5. every response trains: each prompt's N_i in prompt order, each carrying its group's size (`contract.GROUP_SIZE`,
   which the advantage step reads), the step's allocation as metrics (`contract.KNAPSACK_*`) and one line on
   stderr with each prompt's p and N.

A response is correct as the advantage step counts it by default: the reward function's `copo_correct`, else a
reward above 0 (`contract.sample_correct`). The history is not saved with checkpoints: a resumed run estimates
each prompt's first p again from a pilot.
"""

from __future__ import annotations

import sys
from typing import Dict, List, Optional

import torch

from openrlhf_copo.contract import (GROUP_SIZE, KNAPSACK_MIXED, KNAPSACK_N_MAX, KNAPSACK_N_MIN, KNAPSACK_PILOTED,
                                    KNAPSACK_SURPLUS, sample_correct)
from openrlhf_copo.core import KNAPSACK_MIN_N, KNAPSACK_WINDOW, KnapsackAllocation, knapsack_allocation, mode_info
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import draw_round, prompt_key, responses_by_prompt, reward_of


def allocates_budget(args) -> bool:
    """Whether the run's advantage mode allocates each step's budget over its prompts (Knapsack RL)."""
    from openrlhf_copo.openrlhf_ext.config import is_copo, resolve_mode

    return is_copo(args) and mode_info(resolve_mode(args)).budget_allocation


class History:
    """Each prompt's latest outcomes (correct or not) in draw order, at most `core.KNAPSACK_WINDOW`, by prompt
    (`rollout.prompt_key`), across the steps of this process's `SamplesGenerator` (`of`)."""

    def __init__(self):
        self.outcomes: Dict[str, List[bool]] = {}

    @classmethod
    def of(cls, generator) -> "History":
        """The history of a `SamplesGenerator`, made on first use."""
        if getattr(generator, "_copo_knapsack_history", None) is None:
            generator._copo_knapsack_history = cls()
        return generator._copo_knapsack_history

    def rate(self, prompt) -> Optional[float]:
        """The share of correct outcomes the prompt has had; None for a prompt never drawn."""
        seen = self.outcomes.get(prompt_key(prompt))
        return sum(seen) / len(seen) if seen else None

    def add(self, prompt, outcomes: List[bool]) -> None:
        key = prompt_key(prompt)
        self.outcomes[key] = (self.outcomes.get(key, []) + list(outcomes))[-KNAPSACK_WINDOW:]


class Group:
    """One prompt's responses of the step, in draw order; ``prompt``, ``label`` and ``image`` are what
    `adaptive_sampling.draw_round` sends to the engines for more."""

    def __init__(self, responses: List):
        first = responses[0]
        self.prompt, self.label, self.image = first.prompts[0], first.labels[0], first.images[0]
        self.responses = list(responses)

    def add(self, experience) -> None:
        self.responses.append(experience)

    def outcomes(self) -> List[bool]:
        return [sample_correct(e.info, 0, reward_of(e)) for e in self.responses]


def tag(groups: List[Group], allocation: KnapsackAllocation, piloted: int) -> List:
    """Every response of the step, in prompt order, with its group's size and the step's allocation metrics
    (OpenRLHF averages `info` into its logs: a constant is logged as is)."""
    step = {KNAPSACK_N_MAX: max(allocation.sizes), KNAPSACK_N_MIN: min(allocation.sizes),
            KNAPSACK_MIXED: allocation.mixed, KNAPSACK_PILOTED: piloted, KNAPSACK_SURPLUS: allocation.surplus}
    out = []
    for group in groups:
        for e in group.responses:
            e.info[GROUP_SIZE] = torch.tensor([float(len(group.responses))])
            for key, value in step.items():
                e.info[key] = torch.tensor([float(value)])
            out.append(e)
    return out


def allocate_and_draw(generator, pilot: List, G: int, generate_kwargs) -> List:
    """Steps 2-5 of the module's docstring, for the pilot's responses (`core.KNAPSACK_MIN_N` per prompt, in runs by
    prompt as OpenRLHF's `_generate_vllm` returns them); the step's responses, B x G in all."""
    groups = [Group(run) for run in responses_by_prompt(pilot, KNAPSACK_MIN_N, "knapsack's pilot")]
    history = History.of(generator)
    rates = [history.rate(g.prompt) for g in groups]
    piloted = sum(rate is None for rate in rates)
    rates = [sum(g.outcomes()) / len(g.responses) if rate is None else rate for g, rate in zip(groups, rates)]
    allocation = knapsack_allocation(rates, G * len(groups), generator.args.copo.knapsack_max_n)
    wanted = {k: n - KNAPSACK_MIN_N for k, n in enumerate(allocation.sizes) if n > KNAPSACK_MIN_N}
    if wanted:
        draw_round(generator, groups, wanted, generate_kwargs)
    for group in groups:
        history.add(group.prompt, group.outcomes())
    print(f"openrlhf_copo: knapsack: {len(groups)} prompts, {G * len(groups)} responses; N per prompt "
          f"{list(allocation.sizes)}, p {[round(p, 3) for p in rates]} ({piloted} from a pilot of {KNAPSACK_MIN_N}); "
          f"{allocation.mixed} mixed, surplus {allocation.surplus}", file=sys.stderr, flush=True)
    return tag(groups, allocation, piloted)


def generate(generator, original, dataloader_iter, num_prompts: int, dynamic_filtering, generate_kwargs):
    """A training rollout of a mode that allocates its budget (the module's docstring): OpenRLHF's ``original``
    `_generate_vllm` draws the pilot, then `allocate_and_draw`. Returns what ``original`` returns."""
    G = generate_kwargs.get("n_samples_per_prompt", generator.args.rollout.n_samples_per_prompt)
    pilot, consumed, exhausted = original(generator, dataloader_iter, num_prompts, dynamic_filtering,
                                          **{**generate_kwargs, "n_samples_per_prompt": KNAPSACK_MIN_N})
    if pilot:
        pilot = allocate_and_draw(generator, pilot, G, generate_kwargs)
    return pilot, consumed, exhausted
