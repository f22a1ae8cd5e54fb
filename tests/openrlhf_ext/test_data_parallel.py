"""Sharding does not change COPO's update: one rollout, trained by OpenRLHF's own PolicyModelActor group on one
DeepSpeed rank and on two (ZeRO-2, gloo, Ray actors on the CPU path's logical GPU slots), gives the same parameters.

The rollout goes the way the PPO controller sends it: advantages over the whole batch on the controller (the
patched `compute_advantages_and_returns`), then OpenRLHF's `async_run_method_batch("append")` splits it over the
ranks, each rank runs `fit` (its replay buffer, micro-batches, COPO's two-term loss), DeepSpeed averages the
gradients. The old log-probabilities are the actor's own, from its `forward` (as the experience maker gets them)."""

import pytest
import torch

from tests_support import copo_argv, make_rollout

pytestmark = pytest.mark.usefixtures("copo_patched")

# 4 prompts x 4: all correct, all wrong (two answers), mixed, all wrong (one answer): every COPO regime.
REWARDS = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
IDS = [[7, 7, 7, 7], [3, 3, 4, 4], [7, 5, 7, 6], [2, 2, 2, 2]]
#: fp32 on both sides; what differs is only the order of float sums (per-rank partial sums, gloo's all-reduce).
TOLERANCE = 1e-6


def _parameters(actor):
    return {n: p.detach().float().clone() for n, p in actor.actor.model.named_parameters()}


@pytest.fixture(scope="module")
def ray_cpu(load_args):
    import ray

    from openrlhf_copo.openrlhf_ext import cpu, driver

    cpu.prepare_driver()
    args = load_args(copo_argv())
    kwargs = driver.ray_init_kwargs(args, {}, cpu_path=True)
    kwargs["num_gpus"] = 2
    ray.init(**kwargs)
    yield
    ray.shutdown()


def train_one_step(load_args, model: str, world: int, experiences=None):
    """A PolicyModelActor group of ``world`` ranks; returns (parameters before, after, the experiences)."""
    import ray
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ray.launcher import RayActorGroup
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
    from openrlhf.utils import get_strategy

    # One optimizer step over the whole rollout (16 responses), micro-batches of 2 on every rank.
    args = load_args(copo_argv("--ds.zero_stage", "2", "--ds.param_dtype", "fp32", "--train.micro_batch_size", "2",
                               "--actor.num_gpus_per_node", str(world), "--actor.adam.lr", "1e-3", model=model))
    strategy = get_strategy(args)
    group = RayActorGroup(1, world, PolicyModelActor, pg=None, num_gpus_per_actor=1)
    try:
        ray.get(group.async_init_model_from_pretrained(strategy, model, max_steps=1))
        rank0 = group._actor_handlers[0]
        before = ray.get(rank0.__ray_call__.remote(_parameters))
        if experiences is None:
            class _Tokenizer:
                pad_token_id = 0

            maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy,
                                          tokenizer=_Tokenizer())
            experiences = maker.split_rollout_samples(make_rollout(REWARDS, IDS))
            for exp in experiences:  # the current policy's log-probs: the first PPO epoch is on-policy
                exp.action_log_probs = ray.get(rank0.forward.remote(exp.sequences, exp.action_mask,
                                                                    exp.attention_mask))
                exp.base_action_log_probs = None
                exp.kl = torch.zeros_like(exp.action_log_probs)
            experiences = maker.compute_advantages_and_returns(experiences)  # the whole batch, as the controller
        ray.get(group.async_run_method_batch(method_name="append", experience=experiences))
        status = ray.get(group.async_run_method(method_name="fit", kl_ctl=0))
        after = ray.get([h.__ray_call__.remote(_parameters) for h in group._actor_handlers])
    finally:
        for h in group._actor_handlers:
            ray.kill(h)
    return before, after, experiences, status


@pytest.mark.usefixtures("ray_cpu")
def test_two_ranks_give_the_parameters_of_one(load_args, tmp_path):
    from openrlhf_copo.embedded.models import tiny_qwen2

    model = tiny_qwen2(tmp_path / "tiny-model")  # with a tokenizer, which PolicyModelActor loads
    before, (single,), experiences, status = train_one_step(load_args, model, 1)
    before2, (rank0, rank1), _, _ = train_one_step(load_args, model, 2, experiences)
    assert status[0]["copo_loss_global"] != 0  # the global term did contribute
    names = sorted(before)
    assert all(torch.equal(before[n], before2[n]) for n in names)
    update = {n: single[n] - before[n] for n in names}
    assert max(update[n].abs().max().item() for n in names) > 1e-4  # the step did move the weights
    for n in names:
        assert torch.equal(rank0[n], rank1[n]), n  # ranks agree after DeepSpeed's all-reduce
        gap = (rank0[n] - single[n]).abs().max().item()
        assert gap <= TOLERANCE, (n, gap)
