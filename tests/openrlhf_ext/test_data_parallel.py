"""Sharding does not change COPO's update: one rollout, trained by OpenRLHF's own PolicyModelActor group on one
DeepSpeed rank and on two (ZeRO-2, gloo, Ray actors on the CPU path's logical GPU slots), gives the same parameters.

The rollout goes the way the PPO controller sends it: advantages over the whole batch on the controller (the
patched `compute_advantages_and_returns`), then OpenRLHF's `async_run_method_batch("append")` splits it over the
ranks, each rank runs `fit` (its replay buffer, micro-batches, COPO's two-term loss), DeepSpeed averages the
gradients. The old log-probabilities are the actor's own, from its `forward` (as the experience maker gets them)."""

import pytest
import torch

from openrlhf_copo.contract import WEIGHTED_GLOBAL_ADV
from tests_support import copo_argv, experience_maker, make_rollout

pytestmark = [pytest.mark.usefixtures("copo_patched"), pytest.mark.heavy(group=2)]  # local Ray, DeepSpeed ranks

# 4 prompts x 4: all correct, all wrong (two answers), mixed, all wrong (one answer): every COPO regime.
REWARDS = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
IDS = [[7, 7, 7, 7], [3, 3, 4, 4], [7, 5, 7, 6], [2, 2, 2, 2]]
LR = 1e-3


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from openrlhf_copo.cpu_demo.models import tiny_qwen2

    return tiny_qwen2(tmp_path_factory.mktemp("dp") / "tiny-model")  # with a tokenizer, which PolicyModelActor loads


@pytest.fixture(scope="module")
def ray_cpu(load_args, model):
    """A local Ray cluster as the CLI's CPU path starts it (worker hook, CPU environment, logical GPU slots)."""
    import ray

    from openrlhf_copo.openrlhf_ext import cpu, device, driver

    cpu.prepare_driver()
    args = load_args(copo_argv(model=model))
    kwargs = driver.ray_init_kwargs(args, {}, device.DeviceDecision(device.CPU, "the test's CPU path"))
    kwargs["num_gpus"] = 2
    ray.init(**kwargs)
    yield
    ray.shutdown()


def train_one_step(load_args, model: str, world: int, experiences=None, zero_stage: int = 2):
    """A PolicyModelActor group of ``world`` ranks; returns (parameters before, after, the experiences, status,
    the L2 norm of rank 0's Adam first moment after the step)."""
    import ray
    from openrlhf.trainer.ray.launcher import RayActorGroup
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
    from openrlhf.utils import get_strategy
    from ray.util.placement_group import placement_group, remove_placement_group

    # One optimizer step over the whole rollout (16 responses), micro-batches of 2 on every rank.
    args = load_args(copo_argv("--ds.zero_stage", str(zero_stage), "--ds.param_dtype", "fp32",
                               "--train.micro_batch_size", "2", "--actor.num_gpus_per_node", str(world),
                               "--actor.adam.lr", str(LR), model=model))
    strategy = get_strategy(args)

    def parameters(actor):  # runs inside the actor (defined here, so that Ray ships it by value)
        return {n: p.detach().float().clone() for n, p in actor.actor.model.named_parameters()}

    def first_moment_norm(actor):  # the base optimizer's exp_avg: per parameter (ZeRO-0) or ZeRO's flat partition
        optim = actor.actor.model.optimizer
        optim = getattr(optim, "optimizer", optim)
        return sum(s["exp_avg"].double().pow(2).sum().item() for s in optim.state.values()) ** 0.5

    # Our own placement group, removed after the step: the one OpenRLHF makes for several ranks is never released,
    # and would hold the cluster's GPU slots from every later test of the module.
    pg = placement_group([{"GPU": 1, "CPU": 1}] * world, strategy="PACK")
    ray.get(pg.ready())
    group = RayActorGroup(1, world, PolicyModelActor, pg=pg, num_gpus_per_actor=1)
    try:
        ray.get(group.async_init_model_from_pretrained(strategy, model, max_steps=1))
        rank0 = group._actor_handlers[0]
        before = ray.get(rank0.__ray_call__.remote(parameters))
        if experiences is None:
            maker = experience_maker(strategy)
            experiences = maker.split_rollout_samples(make_rollout(REWARDS, IDS))
            for exp in experiences:  # the current policy's log-probs: the first PPO epoch is on-policy
                exp.action_log_probs = ray.get(rank0.forward.remote(exp.sequences, exp.action_mask,
                                                                    exp.attention_mask))
                exp.base_action_log_probs = None
                exp.kl = torch.zeros_like(exp.action_log_probs)
            experiences = maker.compute_advantages_and_returns(experiences)  # the whole batch, as the controller
        ray.get(group.async_run_method_batch(method_name="append", experience=experiences))
        status = ray.get(group.async_run_method(method_name="fit", kl_ctl=0))
        after = ray.get([h.__ray_call__.remote(parameters) for h in group._actor_handlers])
        moment = ray.get(rank0.__ray_call__.remote(first_moment_norm))
    finally:
        for h in group._actor_handlers:
            ray.kill(h)
        remove_placement_group(pg)
    return before, after, experiences, status, moment


@pytest.fixture(scope="module")
def one_rank(ray_cpu, load_args, model):
    """The step on one rank under ZeRO-2, which both tests below compare with: with two ranks, and with ZeRO-0."""
    return train_one_step(load_args, model, 1)


def test_two_ranks_give_the_parameters_of_one(load_args, model, one_rank):
    before, (single,), experiences, status, _ = one_rank
    before2, (rank0, rank1), _, status2, _ = train_one_step(load_args, model, 2, experiences)
    assert status[0]["copo_loss_global"] != 0  # the global term did contribute
    names = sorted(before)
    assert all(torch.equal(before[n], before2[n]) for n in names)
    for n in names:
        assert torch.equal(rank0[n], rank1[n]), n  # ranks agree after DeepSpeed's all-reduce
    # The gradient is the same: its norm to float precision (measured 3.7180145 and 3.7180147).
    assert status2[0]["actor_grad_norm"] == pytest.approx(status[0]["actor_grad_norm"], rel=1e-6)
    one = torch.cat([(single[n] - before[n]).flatten() for n in names])
    two = torch.cat([(rank0[n] - before[n]).flatten() for n in names])
    assert one.abs().max().item() > 0.5 * LR  # Adam's first step moves each weight by about lr
    # So is the update. Adam's first step is lr * g / (|g| + eps): where a gradient entry is near 0 (sums that
    # cancel), float rounding in the per-rank partial sums is amplified up to lr / eps. Measured: relative L2
    # difference 2.2e-5, max 3.4e-5 (12 of 6.6M weights above 1e-6). Any change to the loss or the advantages
    # (half the batch's loss, per-shard global statistics) moves every weight by up to lr instead.
    assert ((two - one).norm() / one.norm()).item() < 1e-4
    assert (two - one).abs().max().item() < 0.1 * LR
    # The logged COPO terms are the step's exact token means (ratio 1 on the first, on-policy step, so a term is
    # the token mean of minus its advantage) on one rank and on two, whatever pairs the shuffle makes. OpenRLHF's
    # own policy_loss is not such a mean: it logged 0.051 on one rank and 0.0003 on two for this same update.
    tokens, local_sum, global_sum = 0.0, 0.0, 0.0
    for exp in experiences:
        mask = exp.action_mask.float()
        weighted_global = torch.stack(list(exp.info[WEIGHTED_GLOBAL_ADV])).float().view(-1, 1)
        tokens += mask.sum().item()
        local_sum -= (exp.advantages.float() * mask).sum().item()
        global_sum -= (weighted_global * mask).sum().item()
    for s in (status[0], status2[0], status2[1]):
        assert s["copo_loss_local"] == pytest.approx(local_sum / tokens, rel=1e-4)
        assert s["copo_loss_global"] == pytest.approx(global_sum / tokens, rel=1e-4)


def test_zero_stage_0_gives_the_update_of_zero_2_on_one_rank(load_args, model, one_rank):
    """The CPU demo trains on one rank with ZeRO-0 (ZeRO-2's partitioning only adds gradient copies there): the same
    step, the same gradient and the same update as ZeRO-2, to float rounding (the bounds of the two-rank test)."""
    before, (zero2,), experiences, status, moment2 = one_rank
    before0, (zero0,), _, status0, moment0 = train_one_step(load_args, model, 1, experiences, zero_stage=0)
    names = sorted(before)
    assert all(torch.equal(before[n], before0[n]) for n in names)
    # DeepSpeed drops the fp32 norm without ZeRO: OpenRLHF logged 0 until the CPU path kept it (cpu.py). Summed per
    # tensor rather than over ZeRO's flat buffer: measured 3.7179961 against 3.7180145.
    assert status0[0]["actor_grad_norm"] == pytest.approx(status[0]["actor_grad_norm"], rel=1e-5)
    two = torch.cat([(zero2[n] - before[n]).flatten() for n in names])
    zero = torch.cat([(zero0[n] - before[n]).flatten() for n in names])
    assert two.abs().max().item() > 0.5 * LR and zero.abs().max().item() > 0.5 * LR
    assert ((zero - two).norm() / two.norm()).item() < 1e-4
    assert (zero - two).abs().max().item() < 0.1 * LR
    # Adam's first step is blind to the gradient's scale, so the update above cannot show the clipping. Its first
    # moment can: (1 - beta1) x the clipped gradient, whose norm is OpenRLHF's max_norm 1.0 when the norm exceeds it
    # (0.1 x 1.0 with beta1 0.9; 0.37 unclipped). Both stages must clip, or later steps would differ.
    assert status[0]["actor_grad_norm"] > 1.0
    assert moment2 == pytest.approx(0.1, rel=1e-4)
    assert moment0 == pytest.approx(0.1, rel=1e-4)
