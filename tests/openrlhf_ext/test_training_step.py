"""The actor's real training step (OpenRLHF ActorPPOTrainer + DeepSpeed on the CPU + a tiny Qwen2) under COPO."""

import pytest
import torch

from openrlhf.models import Actor
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
from openrlhf.utils import get_strategy

from openrlhf_copo.core import copo_advantages
from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss
from tests_support import copo_argv, make_rollout

pytestmark = pytest.mark.usefixtures("copo_patched", "gloo_world", "cpu_path")

EPS_CLIP = 0.2


class _PadTokenizer:
    pad_token_id = 0


def build_trainer(args):
    """What PolicyModelActor.init_model_from_pretrained does, minus Ray: a real Actor in a real DeepSpeed engine."""
    strategy = get_strategy(args)
    strategy.setup_distributed()
    actor = Actor(args.actor.model_name_or_path, attn_implementation=args.ds.attn_implementation,
                  param_dtype=args.ds.param_dtype, ds_config=strategy.get_ds_train_config())
    cfg = dict(optim=args.actor.optim, muon=vars(args.actor.muon), adam=vars(args.actor.adam),
               lr_scheduler=args.actor.lr_scheduler, lr_warmup_ratio=args.actor.lr_warmup_ratio,
               min_lr_ratio=args.actor.min_lr_ratio, max_norm=args.actor.max_norm, scheduler_steps=10)
    model, optim, scheduler = strategy.prepare((actor, cfg))
    trainer = ActorPPOTrainer(strategy, model, ema_model=None, actor_optim=optim, actor_scheduler=scheduler,
                              micro_train_batch_size=args.train.micro_batch_size, tokenizer=None,
                              eps_clip=args.actor.eps_clip, vllm_engines=None)
    return strategy, trainer


def micro_batch(args, trainer, rewards, ids, old_logprob_shift):
    """Rollout -> patched advantages -> OpenRLHF's replay buffer -> one collated micro-batch."""
    maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), trainer.strategy,
                                  tokenizer=_PadTokenizer())
    experiences = maker.split_rollout_samples(make_rollout(rewards, ids))
    with torch.no_grad():
        for exp in experiences:
            logp = trainer.actor(exp.sequences, exp.action_mask, attention_mask=exp.attention_mask)
            # an "old policy" that differs from the current one, so that some ratios get clipped
            shift = old_logprob_shift * torch.sin(torch.arange(logp.numel(), dtype=torch.float32)).view_as(logp)
            exp.action_log_probs = (logp.float() + shift) * exp.action_mask
            exp.base_action_log_probs = None
            exp.kl = torch.zeros_like(exp.action_log_probs)
    experiences = maker.compute_advantages_and_returns(experiences)
    for exp in experiences:
        trainer.replay_buffer.append(exp)
    items = list(trainer.replay_buffer.items)
    trainer.replay_buffer.clear()
    return trainer.replay_buffer.collate_fn(items)


def clipped_term(logp, old, adv, mask):
    """-min(r A, clip(r) A), token-mean over the micro-batch: written out, not OpenRLHF's code."""
    ratio = torch.exp(logp - old)
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - EPS_CLIP, 1 + EPS_CLIP) * adv)
    return -(surr * mask).sum() / mask.sum()


def params_snapshot(trainer):
    return [p.detach().float().clone() for p in trainer.actor.model.parameters()]


MIXED_REWARDS = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 0]]
MIXED_IDS = [[7, 7, 7, 7], [3, 3, 4, 4], [7, 5, 7, 6], [7, 1, 2, 3]]


def test_loss_equals_the_explicit_two_term_formula(load_args, tiny_model_dir):
    args = load_args(copo_argv(model=tiny_model_dir))
    _, trainer = build_trainer(args)
    assert isinstance(trainer.actor_loss_fn, CopoPolicyLoss)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    mask = exp.action_mask.float()
    with torch.no_grad():
        logp = trainer.actor(exp.sequences, exp.action_mask, attention_mask=exp.attention_mask).float()

    # expected advantages straight from the core, matched to the shuffled micro-batch by prompt/answer
    adv = copo_advantages(torch.tensor(MIXED_REWARDS, dtype=torch.float32), torch.tensor(MIXED_IDS))
    a_local = exp.advantages.float()
    a_global = torch.stack(list(exp.info["copo_weighted_global_adv"])).float().view(-1, 1) * mask
    assert sorted(a_global.amax(1).add(a_global.amin(1)).tolist()) == pytest.approx(
        sorted(adv.weighted_global.reshape(-1).tolist()), abs=1e-6)

    expected = (clipped_term(logp, exp.action_log_probs.float(), a_local, mask)
                + clipped_term(logp, exp.action_log_probs.float(), a_global, mask))
    blended = clipped_term(logp, exp.action_log_probs.float(), a_local + a_global, mask)

    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    loss = status["metrics"]["policy_loss"].item()
    assert loss == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert abs(expected.item() - blended.item()) > 1e-4  # the two-term loss is not one blended advantage
    assert status["metrics"]["copo_loss_local"].item() + status["metrics"]["copo_loss_global"].item() == \
        pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert status["metrics"]["ppo_clip_ratio"].item() > 0  # the shift made clipping matter


@pytest.mark.parametrize("mode, expect_gradient", [("copo", True), ("grpo", False)])
def test_uniform_groups_train_under_copo_not_grpo(load_args, tiny_model_dir, mode, expect_gradient):
    """A batch made only of all-correct and all-incorrect prompts: GRPO has nothing to learn, COPO does."""
    args = load_args(copo_argv("--copo.mode", mode, model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, [[1] * 4, [0] * 4, [1] * 4, [0] * 4], [[5] * 4, [2, 3, 2, 3], [9] * 4, [1] * 4],
                      old_logprob_shift=0.0)
    before = params_snapshot(trainer)
    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    moved = max((a - b).abs().max().item() for a, b in zip(before, params_snapshot(trainer)))
    grad_norm = status["metrics"]["actor_grad_norm"]
    if expect_gradient:
        assert grad_norm > 0 and moved > 0
        assert status["metrics"]["copo_loss_global"].item() != 0
    else:
        assert grad_norm == 0 and moved == 0
        assert status["metrics"]["policy_loss"].item() == 0


def test_missing_global_advantages_fail_loudly(load_args, tiny_model_dir):
    args = load_args(copo_argv(model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.0)
    exp.info.pop("copo_weighted_global_adv")
    with pytest.raises(RuntimeError, match="copo_weighted_global_adv"):
        trainer.training_step(exp, kl_ctl=0.0, step=0)
