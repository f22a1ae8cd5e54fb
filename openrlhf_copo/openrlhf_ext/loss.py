"""The COPO actor loss as two calls of OpenRLHF's own PolicyLoss (paper eq. copo).

    loss = PolicyLoss(w_local * A_local) + PolicyLoss(w_global * A_global)

Why two calls and not one blended advantage: min(r A, clip(r) A) is not linear in A across a
sign change, so PolicyLoss(w_l A_l + w_g A_g) is a different objective. It is positively
homogeneous, though (w >= 0: w min(r A, clip(r) A) = min(r wA, clip(r) wA), dual clip
included), so each weighted term is exactly PolicyLoss of the weighted advantage. Both calls
share the ratio, mask, loss aggregation and importance-sampling correction, because they are
the same PolicyLoss object with the same arguments.

With `--copo.push_metrics`, what each term does to the update is logged as its *push* on the sampled tokens: the gradient of
the term with respect to each token's log-prob, times the term's normalizer (tokens, or samples
under sequence-mean), so that a token's push is -A r where the clip is inactive. The logged token
means of push_local^2, push_global^2 and push_local * push_global give, per step, each term's
share of the push (push_global^2 / (push_local^2 + push_global^2)) and their cosine
(push_local * push_global / sqrt(push_local^2 push_global^2)): whether the global term adds to
GRPO's signal, fights it, or replaces it. Computed on a detached copy of the log-probs (one
elementwise backward, no second pass through the model). Off by default: it costs two more PolicyLoss evaluations
and two backwards per micro-batch, and three more logged values, each a host sync and an all-reduce in OpenRLHF's
`ppo_train` (benchmarks/bench_loss.py measures the loss step with and without).

A mode with a per-token second term (RL-ZVP: `core.rl_zvp_token_advantage`) gets the micro-batch's per-response
coefficient as above and the policy's token entropy from OpenRLHF's own training forward (`capture_token_entropy`
stores it on the loss as the actor returns it); the loss turns the two into the second term's per-token advantage.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch

from openrlhf_copo.contract import CLIP_RATIO_GLOBAL, LOSS_GLOBAL, LOSS_LOCAL, PUSH_DOT, PUSH_GLOBAL_SQ, PUSH_LOCAL_SQ

# What OpenRLHF's training step passes to the loss to normalize it over the optimizer step (and all ranks).
STEP_NORMALIZERS = ("dp_size", "batch_num_tokens", "global_batch_size")


class CopoPolicyLoss(torch.nn.Module):
    """Wraps the trainer's PolicyLoss. The trainer's `training_step` hands it the micro-batch's
    per-sample ``w_global * A_global`` (``global_advantages``) right before the loss call."""

    def __init__(self, base: torch.nn.Module, token_advantage: Optional[Callable] = None,
                 push_metrics: bool = False) -> None:
        super().__init__()
        self.base = base
        #: Log each term's push on the sampled tokens (`pushes`: two more PolicyLoss evaluations and two elementwise
        #: backwards per micro-batch): `--copo.push_metrics`.
        self.push_metrics = push_metrics
        self.global_advantages: Optional[torch.Tensor] = None
        #: ``(coef [N], token_entropy [N, T], mask [N, T]) -> advantage [N, T]`` of the mode's second term, or None
        self.token_advantage = token_advantage
        #: The policy's token entropy of the micro-batch, stored by `capture_token_entropy` during the forward.
        self.token_entropy: Optional[torch.Tensor] = None
        #: What the training step logs for the last micro-batch: metric -> (detached value, OpenRLHF's weight).
        self.last_terms: Optional[Dict[str, Tuple[torch.Tensor, str]]] = None

    @property
    def term_weight(self) -> str:
        """How OpenRLHF's ppo_train should weight the logged terms across micro-batches and ranks."""
        return "token" if getattr(self.base, "token_level_loss", True) else "sample"

    def forward(self, log_probs, old_log_probs, advantages, action_mask=None, **kwargs):
        g = self.global_advantages
        self.global_advantages = None  # one use: a stale value must never reach the next micro-batch
        if g is None:
            raise RuntimeError(
                "COPO loss called without the micro-batch's global advantages (experience.info['copo_weighted_global_adv']): "
                "the experience was not made by the COPO advantage step"
            )
        g = g.to(device=advantages.device, dtype=advantages.dtype).reshape(-1, 1)
        if g.shape[0] != advantages.shape[0]:
            raise RuntimeError(f"COPO global advantages for {g.shape[0]} samples, micro-batch has {advantages.shape[0]}")
        global_adv = g.expand_as(advantages)
        if action_mask is not None:
            global_adv = global_adv * action_mask
        if self.token_advantage is not None:
            entropy, self.token_entropy = self.token_entropy, None  # one use, as the global advantages
            if entropy is None:
                raise RuntimeError("the COPO loss of a per-token mode was called without the policy's token entropy "
                                   "from the actor's forward (--actor.entropy_coef unset, or the forward hook missing)")
            entropy = entropy[:, -advantages.shape[1]:].to(advantages.device)
            mask = torch.ones_like(advantages) if action_mask is None else action_mask
            global_adv = self.token_advantage(g.reshape(-1), entropy, mask).to(advantages.dtype)
        local = self.base(log_probs, old_log_probs, advantages, action_mask=action_mask, **kwargs)
        glob = self.base(log_probs, old_log_probs, global_adv, action_mask=action_mask, **kwargs)
        # The returned terms are divided by the whole optimizer step's token (sample) count, so that the micro-batches
        # sum to one mean. Logged with OpenRLHF's token (sample) weights, such a term would come out as a weighted mean
        # of partial sums: it depends on how the shuffle pairs responses into micro-batches and on the number of
        # ranks. The logged terms are this micro-batch's own means instead (`own_mean`); weighted by its token
        # (sample) count they add up to the step's exact mean, for any micro-batching and any number of ranks.
        to_own_mean = self.own_mean_factor(advantages, action_mask, kwargs)
        w = self.term_weight
        self.last_terms = {LOSS_LOCAL: (local[0].detach() * to_own_mean, w),
                           LOSS_GLOBAL: (glob[0].detach() * to_own_mean, w),
                           CLIP_RATIO_GLOBAL: (glob[1].detach(), "token")}
        if self.push_metrics:
            own = {k: v for k, v in kwargs.items() if k not in STEP_NORMALIZERS}
            self.last_terms.update(self.pushes(log_probs, old_log_probs, advantages, global_adv, action_mask, own))
        # PPO-KL and IS statistics are the local term's (same ratio in both terms). So is the clip ratio, unless
        # the micro-batch has no local term at all (GO-Only, all-incorrect prompts under zero control): then the
        # global term's, so that OpenRLHF's ppo_clip_ratio does not read 0 while the global term is clipped. Chosen
        # on the device, without a host sync.
        clip_ratio = torch.where((advantages != 0).any(), local[1], glob[1])
        return (local[0] + glob[0], clip_ratio) + tuple(local[2:])

    def own_mean_factor(self, advantages, action_mask, kwargs) -> torch.Tensor:
        """What turns a term as PolicyLoss returns it under the step's normalizers (`aggregate_loss`: the masked
        sum / batch_num_tokens * dp_size, or the sum of sequence means / global_batch_size * dp_size) into this
        micro-batch's own mean (the masked sum / its tokens, or the sum of sequence means / its sequences): a
        factor, so the mean costs no further PolicyLoss evaluation. 1 when no step normalizer is given."""
        mask = torch.ones_like(advantages) if action_mask is None else action_mask
        if self.term_weight == "token":
            step = kwargs.get("batch_num_tokens")
            own = mask.sum()
        else:
            step = kwargs.get("global_batch_size")
            own = (mask.sum(-1) > 0).sum()
        if step is None:
            return torch.ones((), device=advantages.device)
        dp_size = kwargs.get("dp_size", 1)
        return torch.as_tensor(step, device=advantages.device, dtype=torch.float32) / (
            dp_size * own.clamp(min=1).to(torch.float32))

    def pushes(self, log_probs, old_log_probs, local_adv, global_adv, action_mask, kwargs) -> Dict[str, tuple]:
        """Token means of push_local^2, push_global^2 and push_local * push_global over the micro-batch's action
        tokens (see the module docstring), each weighted by tokens in OpenRLHF's log: exact step means."""
        lp = log_probs.detach().float().requires_grad_(True)
        mask = torch.ones_like(lp) if action_mask is None else action_mask.to(lp.dtype)
        scale = mask.sum() if self.term_weight == "token" else float(lp.shape[0])
        with torch.enable_grad():
            push = [torch.autograd.grad(self.base(lp, old_log_probs.float(), adv.float(), action_mask=action_mask,
                                                  **kwargs)[0], lp)[0] * scale * mask
                    for adv in (local_adv, global_adv)]
        tokens = mask.sum().clamp(min=1)
        return {name: ((a * b).sum() / tokens, "token")
                for name, a, b in ((PUSH_LOCAL_SQ, push[0], push[0]), (PUSH_GLOBAL_SQ, push[1], push[1]),
                                   (PUSH_DOT, push[0], push[1]))}


def capture_token_entropy(actor: torch.nn.Module, loss: CopoPolicyLoss):
    """Store the token entropy of every training forward of ``actor`` on ``loss`` (a forward hook: OpenRLHF's
    `training_step` calls the actor with ``return_output=True`` and, when ``--actor.entropy_coef`` is set,
    ``return_entropy=True``; the entropy is then ``output.entropy``, one value per position). Detached: RL-ZVP's
    advantage scales by the entropy but does not differentiate through it. Returns the hook's handle."""

    def hook(module, args, kwargs, output):
        if kwargs.get("return_output") and isinstance(output, tuple) and len(output) == 2:
            entropy = getattr(output[1], "entropy", None)
            if entropy is None and isinstance(output[1], dict):
                entropy = output[1].get("entropy")
            if entropy is not None:
                loss.token_entropy = entropy.detach()

    return actor.register_forward_hook(hook, with_kwargs=True)
