"""Patch 10: the training prompts' order comes from `--train.seed`.

10. `prepare_datasets` (the PPOTrainer actor's prompt and held-out loaders) hands back a prompt loader shuffled by
    `--train.seed` (`seed_prompt_order`).
"""

from __future__ import annotations

import functools

from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol


def seed_prompt_order(prompts_dataloader, seed: int) -> None:
    """Makes the training prompts' order a function of ``seed`` alone (patch 10).

    OpenRLHF 0.11.2 builds the prompt loader in the PPOTrainer actor, where torch.distributed is not initialized,
    so `setup_dataloader` returns a torchdata StatefulDataLoader whose RandomSampler seeds its own generator, when
    it is built, from the process's global torch generator: nothing seeds that one with --train.seed in that
    process, so the order depended on what the process had drawn before. (OpenRLHF's distributed branch gives
    `DistributedSampler(seed=strategy.seed)`; this gives the controller's branch the same property.) Found when
    the benchmark's COPO and GRPO runs of one seed, same flags but the estimator, drew different first batches.
    A resumed run then restores the sampler's state from its checkpoint as before."""
    generator = getattr(getattr(prompts_dataloader, "sampler", None), "generator", None)
    if generator is not None:
        generator.manual_seed(int(seed))


def apply_seeded_prompt_order() -> None:
    """Patch 10, in Ray workers only: `prepare_datasets` (the PPOTrainer actor's prompt and held-out loaders)
    hands back a prompt loader shuffled by --train.seed (`seed_prompt_order`)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    original = ppo_trainer.prepare_datasets
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol("openrlhf.trainer.ppo_trainer", "prepare_datasets")

    @functools.wraps(original)
    def prepare_datasets(strategy, tokenizer):
        prompts_dataloader, eval_dataloader, max_steps = original(strategy, tokenizer)
        seed_prompt_order(prompts_dataloader, strategy.args.train.seed)
        return prompts_dataloader, eval_dataloader, max_steps

    setattr(prepare_datasets, PATCHED_ATTR, True)
    ppo_trainer.prepare_datasets = prepare_datasets
