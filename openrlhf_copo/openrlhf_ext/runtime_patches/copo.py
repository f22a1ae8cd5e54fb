"""Patches 1-3: COPO's advantage step and its two-term loss in OpenRLHF's classes.

Each is a no-op unless the run's estimator is one of COPO's:
1. `RemoteExperienceMaker.compute_advantages_and_returns` -> `advantages.copo_compute_advantages_and_returns`
   (COPO's advantages over the whole rollout batch, on the controller); and, for a probe (`--copo.probe`) only,
   `RemoteExperienceMaker.make_experience_batch` -> `probe_experience_batch` (no model forward before it);
2. `ActorPPOTrainer.__init__`: wraps the trainer's PolicyLoss in `loss.CopoPolicyLoss`;
3. `ActorPPOTrainer.training_step`: hands the micro-batch's global advantages to that loss and logs the two
   loss terms.

The glue itself is four functions that OpenRLHF's code calls (`copo_advantages_or_none`, `wrap_actor_loss`,
`before_training_step`, `after_training_step`): `patch_experience_maker` and `patch_ppo_actor` wire them in at
run time; the diffs in patches/ call the very same functions from a fork's source.
"""

from __future__ import annotations

import functools

from openrlhf_copo.contract import ID_LABELS, WEIGHTED_GLOBAL_ADV, info_tensor
from openrlhf_copo.openrlhf_ext.config import is_copo
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_openrlhf, check_symbol, check_version


def copo_advantages_or_none(maker, experiences):
    """In `RemoteExperienceMaker.compute_advantages_and_returns`: COPO's advantages, or None when the
    run's estimator is not COPO's (OpenRLHF's own code then runs unchanged, on experiences whose answer ids
    are dropped: OpenRLHF would average them into the logged metrics, as noise, when a baseline such as
    train_dapo_baseline.sh uses our reward file)."""
    from openrlhf_copo.openrlhf_ext.advantages import copo_compute_advantages_and_returns

    if not is_copo(maker.strategy.args):
        for exp in experiences:
            for label in ID_LABELS:
                exp.info.pop(label, None)
        return None

    return copo_compute_advantages_and_returns(maker, experiences)


def probing(args) -> bool:
    """A probe's run (`--copo.probe`, COPO's estimators only): it stops in its first advantage step."""
    return is_copo(args) and bool(getattr(args.copo, "probe", None))


def probe_experience_batch(maker, rollout_samples):
    """`RemoteExperienceMaker.make_experience_batch` of a probe: the batch as drawn and rewarded (the reward file ran
    in the vLLM engines' agent) goes to the advantage step as OpenRLHF groups it, which measures it and stops the run
    (`probe_step.ProbeFinished`). The models' forwards that OpenRLHF's `make_experience` would run first (the actor's
    log-probs, a reference's, a critic's values) feed training alone: skipped, they were a third of a SmolLM2 probe's
    time on the CPU (79 of 237 s)."""
    return maker.compute_advantages_and_returns(maker.split_rollout_samples(rollout_samples))


def wrap_actor_loss(trainer) -> None:
    """At the end of `ActorPPOTrainer.__init__`: the two-term COPO loss around the trainer's PolicyLoss; for a mode
    whose second term is per token (RL-ZVP), a hook on the actor that hands the forward's token entropy to it."""
    from openrlhf_copo.core import mode_info
    from openrlhf_copo.openrlhf_ext.config import resolve_mode
    from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss, capture_token_entropy

    if is_copo(trainer.args) and not isinstance(trainer.actor_loss_fn, CopoPolicyLoss):
        token_advantage = mode_info(resolve_mode(trainer.args)).token_advantage
        trainer.actor_loss_fn = CopoPolicyLoss(trainer.actor_loss_fn, token_advantage,
                                               push_metrics=bool(getattr(trainer.args.copo, "push_metrics", False)))
        if token_advantage is not None:
            capture_token_entropy(trainer.actor, trainer.actor_loss_fn)
        _check_the_loss_before_each_backward(trainer)


def _check_the_loss_before_each_backward(trainer) -> None:
    """The actor's backward (`strategy.backward(loss, trainer.actor, ...)`, which OpenRLHF's training step calls right
    before its optimizer step) first checks that this micro-batch went through the COPO loss (`_require_the_loss`): a
    step that bypassed it stops before its gradient is accumulated or any update made. Only this trainer's actor is
    checked; its strategy is this actor's own (`PolicyModelActor`)."""
    strategy = trainer.strategy
    backward = strategy.backward

    def checked_backward(loss, model, optimizer, **kwargs):
        if model is trainer.actor:
            _require_the_loss(trainer.actor_loss_fn)
        return backward(loss, model, optimizer, **kwargs)

    strategy.backward = checked_backward


def before_training_step(trainer, experience) -> None:
    """At the start of `ActorPPOTrainer.training_step`: hand the micro-batch's w_global * A_global to the loss."""
    from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss

    if isinstance(trainer.actor_loss_fn, CopoPolicyLoss):
        trainer.actor_loss_fn.last_terms = None  # this step logs its own terms or none, never the last step's
        g = experience.info.get(WEIGHTED_GLOBAL_ADV)
        if g is None:
            raise RuntimeError(f"COPO: micro-batch without info['{WEIGHTED_GLOBAL_ADV}'] (not made by the COPO advantage step)")
        trainer.actor_loss_fn.global_advantages = info_tensor(g)


def _require_the_loss(loss) -> None:
    """Raises when this micro-batch never called the COPO loss: the global advantages handed to it by
    `before_training_step` are still there, so COPO's global term would vanish from its update without a word (a
    training step that computes its loss some other way, an OpenRLHF that moved the call)."""
    if loss.global_advantages is not None or loss.last_terms is None:
        loss.global_advantages = None
        raise RuntimeError(
            "COPO: ActorPPOTrainer.training_step went on without calling the actor loss (trainer.actor_loss_fn), so "
            f"this micro-batch's global advantages (info['{WEIGHTED_GLOBAL_ADV}']) were never used and COPO's global "
            "term would vanish from the update; the training step no longer goes through the loss this package wraps "
            "(openrlhf_copo/openrlhf_ext/runtime_patches/copo.py)")


def after_training_step(trainer, status: dict) -> dict:
    """At the end of `ActorPPOTrainer.training_step`: log the two loss terms and their pushes (`CopoPolicyLoss`).

    Raises when the step never called the loss (`_require_the_loss`; the actor's backward has checked it already,
    before the update: `_check_the_loss_before_each_backward`)."""
    from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss

    loss = trainer.actor_loss_fn
    if not isinstance(loss, CopoPolicyLoss):
        return weigh_a_micro_batch_without_tokens(status)
    _require_the_loss(loss)
    # micro-batch means, each with the weight that makes ppo_train's average the step's exact mean
    for name, (value, weight) in loss.last_terms.items():
        status["metrics"][name] = value
        status["weights"][name] = weight
    return weigh_a_micro_batch_without_tokens(status)


def weigh_a_micro_batch_without_tokens(status: dict) -> dict:
    """A micro-batch whose every response `--copo.mask_zero_advantage` took out of the loss has no action token:
    its loss and gradient are 0, but OpenRLHF 0.11.2's `ppo_train` divides its token-weighted metrics by the
    micro-batch's token count (ZeroDivisionError on one rank; it happened on the CPU plateau, where most groups
    agree), and their masked means are 0/0. Such a micro-batch is logged as one token whose token-weighted metrics
    are 0: the step's logged means are diluted by that one token, the update is untouched."""
    import torch

    if int(status["num_action_tokens"]) > 0:
        return status
    status["num_action_tokens"] = 1.0
    for name, weight in status["weights"].items():
        if weight == "token" and name in status["metrics"]:
            status["metrics"][name] = torch.zeros(())
    return status


def patch_experience_maker(module) -> bool:
    """Patch 1 into a loaded `openrlhf.trainer.ppo_utils.experience_maker`. Returns True if newly applied.

    A fork carrying patches/ marks its classes as patched, so this is a no-op there."""
    cls = module.RemoteExperienceMaker
    if getattr(cls, PATCHED_ATTR, False):
        return False
    check_version()
    check_symbol(module.__name__, "RemoteExperienceMaker.compute_advantages_and_returns")
    check_symbol(module.__name__, "RemoteExperienceMaker.make_experience_batch")
    check_symbol(module.__name__, "RemoteExperienceMaker.split_rollout_samples")
    original_advantages = cls.compute_advantages_and_returns
    original_make = cls.make_experience_batch

    @functools.wraps(original_advantages)
    def compute_advantages_and_returns(self, experiences):
        result = copo_advantages_or_none(self, experiences)
        return original_advantages(self, experiences) if result is None else result

    @functools.wraps(original_make)
    def make_experience_batch(self, rollout_samples):
        if probing(self.strategy.args):
            return probe_experience_batch(self, rollout_samples)
        return original_make(self, rollout_samples)

    cls.compute_advantages_and_returns = compute_advantages_and_returns
    cls.make_experience_batch = make_experience_batch
    cls.__openrlhf_copo_patched__ = True
    return True


def patch_ppo_actor(module) -> bool:
    """Patches 2 and 3 into a loaded `openrlhf.trainer.ray.ppo_actor`. Returns True if newly applied."""
    cls = module.ActorPPOTrainer
    if getattr(cls, PATCHED_ATTR, False):
        return False
    check_version()
    check_symbol(module.__name__, "ActorPPOTrainer.training_step")
    check_symbol("openrlhf.models", "PolicyLoss.forward")
    original_init = cls.__init__
    original_step = cls.training_step

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        wrap_actor_loss(self)

    @functools.wraps(original_step)
    def training_step(self, experience, kl_ctl, step, loss_batch_info=None):
        before_training_step(self, experience)
        return after_training_step(self, original_step(self, experience, kl_ctl, step, loss_batch_info))

    cls.__init__ = __init__
    cls.training_step = training_step
    cls.__openrlhf_copo_patched__ = True
    return True


def apply() -> bool:
    """Install patches 1-3 into this process's openrlhf classes (idempotent). Returns True if newly applied.

    The driver (to fail early on an unsupported openrlhf) and tests call this; Ray workers get the same
    patches from `worker_hook`, module by module as the actor imports them."""
    import openrlhf.trainer.ppo_utils.experience_maker as experience_maker
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    check_openrlhf()
    newly = patch_experience_maker(experience_maker)
    return patch_ppo_actor(ppo_actor) or newly


def is_applied() -> bool:
    """Whether this process's openrlhf classes carry the COPO patches."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    return bool(getattr(RemoteExperienceMaker, PATCHED_ATTR, False) and getattr(ActorPPOTrainer, PATCHED_ATTR, False))
