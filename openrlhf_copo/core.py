"""COPO's math, and nothing else: pure torch, no OpenRLHF, no I/O.

Consistency-Aware Policy Optimization (Han et al., AAAI 2026). For a rollout batch of B prompts
with G responses each, rewards r [B, G] and extracted final answers tau [B, G]:

    A_local[b, i]  = (r[b, i] - mean_G r[b]) / (std_G r[b] + eps)             (eq. local_adv)
    R(q_b)         = mean_G r[b]                                                (eq. g_r)
    A_global[b]    = (R(q_b) - mean_B R) / (std_B R + eps)                      (eq. global_adv)
    H(q_b)         = -sum_tau p(tau) log p(tau),   p(tau) = count(tau) / G      (eq. entropy)
    w_local        = sigmoid(gamma * (H - rho)),   w_global = 1 - w_local       (eq. weight)
    loss           = w_local * clipPPO(A_local) + w_global * clipPPO(A_global)  (eq. copo)

`copo_advantages` returns both advantages and both weights; the trainer applies the two clipped
terms separately (see `openrlhf_copo.openrlhf_ext.loss`). Every choice the paper leaves open is a
keyword argument whose default is the paper's reading:

- ``std="population"``: the appendix example divides by the population std ([1,1,1,0,0,0] gives
  [1,1,1,-1,-1,-1]); the authors' released code uses torch's unbiased std (``std="unbiased"``).
- ``zero_control="prompt"``: the paper sets w_local = 0 "for fully incorrect data", i.e. for a
  prompt whose G responses are all incorrect, so that w_global = 1 there ("to prevent
  w_global < 1 from reducing the overall loss"). The released code zeroes w_local for every
  incorrect response (``"response"``); ``"none"`` disables it.
- ``entropy_base=2``: the appendix's H = 1.459 for answers [2,2,2,3,3,4] is in bits.
- A group (or batch) whose values are all equal has zero spread; its advantage is exactly 0,
  whatever eps is. (With eps > 0 the formula would give round-off noise / eps instead.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import torch

__all__ = [
    "MODES",
    "BLENDED_MODES",
    "WEIGHTINGS",
    "WeightInputs",
    "register_mode",
    "ZERO_CONTROLS",
    "STDS",
    "CopoAdvantages",
    "standardize",
    "consistency_entropy",
    "local_advantage",
    "global_advantage",
    "blend_weights",
    "copo_advantages",
]

#: Which responses get w_local = 0 in ``mode="copo"``.
ZERO_CONTROLS = ("prompt", "response", "none")
#: Standard-deviation conventions.
STDS = ("population", "unbiased")


@dataclass
class CopoAdvantages:
    """Everything `copo_advantages` computes for one rollout batch.

    All per-response tensors are [B, G]; ``global_adv`` and ``w_*`` are constant along G where
    the mode makes them per prompt. ``stats`` holds batch-level floats ready for a logger.
    """

    local_adv: torch.Tensor
    global_adv: torch.Tensor
    w_local: torch.Tensor
    w_global: torch.Tensor
    entropy: torch.Tensor  # [B]
    prompt_reward: torch.Tensor  # [B], R(q) = mean_G r
    stats: Dict[str, float] = field(default_factory=dict)

    @property
    def weighted_local(self) -> torch.Tensor:
        """w_local * A_local: the advantage of the first clipped term."""
        return self.w_local * self.local_adv

    @property
    def weighted_global(self) -> torch.Tensor:
        """w_global * A_global: the advantage of the second clipped term."""
        return self.w_global * self.global_adv


def standardize(x: torch.Tensor, dim: int = -1, std: str = "population", eps: float = 1e-6) -> torch.Tensor:
    """(x - mean(x)) / (std(x) + eps) along ``dim``; exactly 0 where all values along ``dim`` are equal.

    This is eq. grpo_adv / eq. global_adv. ``std="population"`` divides the variance by n,
    ``"unbiased"`` by n - 1. A slice of size 1, or of equal values, carries no relative
    information and gets 0 (never NaN, never round-off / eps).
    """
    if std not in STDS:
        raise ValueError(f"std must be one of {STDS}, got {std!r}")
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    mean = x.mean(dim=dim, keepdim=True)
    n = x.shape[dim]
    if n < 2:
        return torch.zeros_like(x)
    sd = x.std(dim=dim, keepdim=True, correction=0 if std == "population" else 1)
    flat = x.amax(dim=dim, keepdim=True) == x.amin(dim=dim, keepdim=True)
    denom = sd + eps
    out = (x - mean) / torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.where(flat | (denom == 0), torch.zeros_like(out), out)


def consistency_entropy(answer_ids: torch.Tensor, base: float = 2.0) -> torch.Tensor:
    """H(q) = -sum_{tau in T_q} p(tau) log p(tau), p(tau) = count(tau) / G  (eq. entropy).

    ``answer_ids`` is [B, G]; equal ids mean the same final answer. Summing over responses
    instead of distinct answers gives the same value without a loop:
    H = -(1/G) sum_i log p(tau_i), since each answer tau appears count(tau) times.
    Returns [B] in units of ``base`` (2: bits, as in the paper's appendix).
    """
    if answer_ids.dim() != 2:
        raise ValueError(f"answer_ids must be [B, G], got shape {tuple(answer_ids.shape)}")
    if base <= 0 or base == 1:
        raise ValueError(f"entropy_base must be positive and != 1, got {base}")
    G = answer_ids.shape[1]
    counts = (answer_ids.unsqueeze(2) == answer_ids.unsqueeze(1)).sum(dim=2).to(torch.float64)  # [B, G]
    p = counts / G
    h = -(p.log().sum(dim=1) / G) / math.log(base)
    return h.clamp_min(0.0).to(torch.float32)  # -0.0 -> 0.0 for a single answer


def local_advantage(rewards: torch.Tensor, std: str = "population", eps: float = 1e-6) -> torch.Tensor:
    """A_local = (r_i - mean_G r) / (std_G r + eps), per prompt group (eq. local_adv, GRPO)."""
    return standardize(rewards, dim=1, std=std, eps=eps)


def global_advantage(rewards: torch.Tensor, std: str = "population", eps: float = 1e-6) -> torch.Tensor:
    """A_global(q_b) = (R(q_b) - mean_B R) / (std_B R + eps), R(q) = mean_G r (eq. g_r, eq. global_adv).

    Computed over every prompt of the rollout batch and shared by all G responses of q_b:
    returns [B, G] with one value per row.
    """
    prompt_reward = rewards.to(torch.promote_types(rewards.dtype, torch.float32)).mean(dim=1)
    return standardize(prompt_reward, dim=0, std=std, eps=eps).unsqueeze(1).expand_as(rewards).clone()


def blend_weights(entropy: torch.Tensor, gamma: float, rho: float) -> torch.Tensor:
    """w_local(H) = sigmoid(gamma * (H - rho)); w_global = 1 - w_local (eq. weight). Returns w_local [B]."""
    return torch.sigmoid(gamma * (entropy - rho))


# ---------------------------------------------------------------------------------------------
# The modes: how each one turns the soft weight into (w_local, w_global). One function per mode,
# registered by name (verl's `register_adv_est` is the model); a new ablation is one function here.


@dataclass
class WeightInputs:
    """What a mode may look at, all [B, G]: the soft weight sigmoid(gamma (H - rho)), which responses are
    correct, which belong to an all-incorrect prompt, and ``copo_advantages``'s ``zero_control``."""

    soft: torch.Tensor
    correct: torch.Tensor
    all_incorrect: torch.Tensor
    zero_control: str


WEIGHTINGS: Dict[str, Callable[[WeightInputs], Tuple[torch.Tensor, torch.Tensor]]] = {}


def register_mode(name: str):
    """Register ``fn(WeightInputs) -> (w_local, w_global)`` as advantage mode ``name``."""

    def register(fn):
        if name in WEIGHTINGS:
            raise ValueError(f"advantage mode {name!r} is registered twice")
        WEIGHTINGS[name] = fn
        return fn

    return register


@register_mode("copo")
def copo_weights(x: WeightInputs):
    """The paper: soft blend, w_local = 0 where zero control applies, w_global = 1 - w_local *after* it
    (a zeroed local term hands its weight to the global term instead of shrinking the loss)."""
    zeros = torch.zeros_like(x.soft)
    if x.zero_control == "prompt":
        w_local = torch.where(x.all_incorrect, zeros, x.soft)
    elif x.zero_control == "response":
        w_local = torch.where(x.correct, x.soft, zeros)
    else:
        w_local = x.soft
    return w_local, 1.0 - w_local


@register_mode("grpo")
def grpo_weights(x: WeightInputs):
    """Plain GRPO through the same path: the local term alone."""
    return torch.ones_like(x.soft), torch.zeros_like(x.soft)


@register_mode("go_selective")
def go_selective_weights(x: WeightInputs):
    """Table 3, GO-Selective: the global term alone for all-incorrect prompts, the local term alone elsewhere."""
    w_local = torch.where(x.all_incorrect, torch.zeros_like(x.soft), torch.ones_like(x.soft))
    return w_local, 1.0 - w_local


@register_mode("go_blended")
def go_blended_weights(x: WeightInputs):
    """Table 3, GO-Blended: the soft blend without zero control."""
    return x.soft, 1.0 - x.soft


@register_mode("go_only")
def go_only_weights(x: WeightInputs):
    """Table 3, GO-Only: the global term alone."""
    return torch.zeros_like(x.soft), torch.ones_like(x.soft)


@register_mode("copo_selective")
def copo_selective_weights(x: WeightInputs):
    """COPO-Selective: the soft blend, and no loss at all on all-incorrect prompts."""
    zeros = torch.zeros_like(x.soft)
    return torch.where(x.all_incorrect, zeros, x.soft), torch.where(x.all_incorrect, zeros, 1.0 - x.soft)


#: Advantage modes: the paper's COPO, plain GRPO and the ablations of its Table 3.
MODES = tuple(WEIGHTINGS)
#: Modes whose weights depend on the soft blend (and so on gamma, rho and the entropy).
BLENDED_MODES = ("copo", "go_blended", "copo_selective")


def copo_advantages(
    rewards: torch.Tensor,
    answer_ids: torch.Tensor,
    correct: Optional[torch.Tensor] = None,
    *,
    mode: str = "copo",
    gamma: float = 20.0,
    rho: float = 1.5,
    zero_control: str = "prompt",
    std: str = "population",
    eps: float = 1e-6,
    entropy_base: float = 2.0,
) -> CopoAdvantages:
    """Local and global advantages with their blending weights for one rollout batch.

    Args:
        rewards: float [B, G], the rule-based reward of each response.
        answer_ids: int64 [B, G], equal id = same (equivalent) final answer.
        correct: bool [B, G]; default ``rewards > 0``. Pass it when rewards are not 0/1
            (e.g. the 0 / 0.1 / 1 format reward, where 0.1 is formatted but wrong).
        mode: ``copo`` (soft blend with zero control), ``grpo`` (w_local = 1, w_global = 0),
            ``go_selective`` (all-incorrect prompt: global only, else local only),
            ``go_blended`` (soft blend, no zero control), ``go_only`` (global only),
            ``copo_selective`` (soft blend; all-incorrect prompts get no loss at all).
        gamma, rho: sharpness and centre of the sigmoid (paper's best: 20, 1.5).
        zero_control: for ``mode="copo"`` only: ``prompt`` (paper), ``response`` (released
            code), ``none``.
        std: ``population`` (paper's worked example) or ``unbiased`` (released code).
        eps: added to the std in both advantages.
        entropy_base: log base of the consistency entropy (2 reproduces the appendix).

    Returns:
        A `CopoAdvantages`; the loss is
        ``PolicyLoss(w_local * local_adv) + PolicyLoss(w_global * global_adv)``.
    """
    if mode not in WEIGHTINGS:
        raise ValueError(f"mode must be one of {tuple(WEIGHTINGS)}, got {mode!r}")
    if zero_control not in ZERO_CONTROLS:
        raise ValueError(f"zero_control must be one of {ZERO_CONTROLS}, got {zero_control!r}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G], got shape {tuple(rewards.shape)}")
    if answer_ids.shape != rewards.shape:
        raise ValueError(f"answer_ids shape {tuple(answer_ids.shape)} != rewards shape {tuple(rewards.shape)}")
    B, G = rewards.shape
    if G < 2:
        raise ValueError(f"COPO needs at least 2 responses per prompt (G={G}): the local advantage is undefined")
    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    bad = ~torch.isfinite(rewards)
    if bad.any():
        rows = sorted({int(r) for r in bad.nonzero()[:, 0].tolist()})
        raise ValueError(f"{int(bad.sum())} non-finite reward(s) in prompt group(s) {rows[:10]}: refusing to train on them")
    if correct is None:
        correct = rewards > 0
    elif correct.shape != rewards.shape:
        raise ValueError(f"correct shape {tuple(correct.shape)} != rewards shape {tuple(rewards.shape)}")
    correct = correct.bool()

    local_adv = local_advantage(rewards, std=std, eps=eps)
    global_adv = global_advantage(rewards, std=std, eps=eps)
    entropy = consistency_entropy(answer_ids, base=entropy_base)
    soft = blend_weights(entropy, gamma, rho).unsqueeze(1).expand(B, G)  # [B, G]
    all_incorrect = (~correct.any(dim=1)).unsqueeze(1).expand(B, G)
    w_local, w_global = WEIGHTINGS[mode](WeightInputs(soft, correct, all_incorrect, zero_control))

    out = CopoAdvantages(
        local_adv=local_adv,
        global_adv=global_adv,
        w_local=w_local.contiguous(),
        w_global=w_global.contiguous(),
        entropy=entropy,
        prompt_reward=rewards.mean(dim=1),
    )
    out.stats = batch_stats(out, rewards, correct)
    return out


def batch_stats(adv: CopoAdvantages, rewards: torch.Tensor, correct: torch.Tensor) -> Dict[str, float]:
    """Batch-level numbers for the logger: how much of the batch carries a gradient signal.

    ``signal_share_grpo`` is the share of responses whose GRPO advantage is non-zero;
    ``signal_share_copo`` the share whose COPO loss has a non-zero advantage in either term.
    """
    all_correct = correct.all(dim=1)
    all_incorrect = ~correct.any(dim=1)
    zero_std = rewards.amax(dim=1) == rewards.amin(dim=1)
    g_local = adv.weighted_local != 0
    g_global = adv.weighted_global != 0
    glob = adv.global_adv[:, 0]
    return {
        "entropy_mean": adv.entropy.mean().item(),
        "w_local_mean": adv.w_local.mean().item(),
        "w_global_mean": adv.w_global.mean().item(),
        "frac_all_correct": all_correct.float().mean().item(),
        "frac_all_incorrect": all_incorrect.float().mean().item(),
        "frac_zero_std": zero_std.float().mean().item(),
        "signal_share_grpo": (adv.local_adv != 0).float().mean().item(),
        "signal_share_copo": (g_local | g_global).float().mean().item(),
        "global_adv_mean": glob.mean().item(),
        "global_adv_std": glob.std(correction=0).item(),
        "global_adv_min": glob.min().item(),
        "global_adv_max": glob.max().item(),
        "prompt_reward_mean": adv.prompt_reward.mean().item(),
    }
