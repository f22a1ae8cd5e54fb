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
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

__all__ = [
    "DEFAULTS",
    "Mode",
    "WeightInputs",
    "register_mode",
    "unregister_mode",
    "modes",
    "mode_info",
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


@dataclass(frozen=True)
class Defaults:
    """The paper's reading of every choice it leaves open: declared here once; `copo_advantages`, the
    `--copo.*` flags (`openrlhf_ext.config.CopoSettings`) and the example scripts all take them from here."""

    gamma: float = 20.0  # Table 4's best (released script: 5)
    rho: float = 1.5  # Table 4's best (released script: 1)
    zero_control: str = "prompt"  # the paper (released code: "response")
    std: str = "population"  # the appendix's worked example (released code: "unbiased")
    eps: float = 1e-6
    entropy_base: float = 2.0  # bits: the appendix's H = 1.459


DEFAULTS = Defaults()


@dataclass
class CopoAdvantages:
    """Everything `copo_advantages` computes for one rollout batch.

    All per-response tensors are [B, G]; ``global_adv`` and ``w_*`` are constant along G where
    the mode makes them per prompt.
    """

    local_adv: torch.Tensor
    global_adv: torch.Tensor
    w_local: torch.Tensor
    w_global: torch.Tensor
    entropy: torch.Tensor  # [B]
    prompt_reward: torch.Tensor  # [B], R(q) = mean_G r (or the mode's own R(q))

    @property
    def weighted_local(self) -> torch.Tensor:
        """w_local * A_local: the advantage of the first clipped term."""
        return self.w_local * self.local_adv

    @property
    def weighted_global(self) -> torch.Tensor:
        """w_global * A_global: the advantage of the second clipped term."""
        return self.w_global * self.global_adv

    @property
    def has_signal(self) -> torch.Tensor:
        """bool [B, G]: the response's loss has a non-zero advantage in either term (GRPO's: ``local_adv != 0``)."""
        return (self.weighted_local != 0) | (self.weighted_global != 0)


def standardize(x: torch.Tensor, dim: int = -1, std: str = DEFAULTS.std, eps: float = DEFAULTS.eps) -> torch.Tensor:
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


def consistency_entropy(answer_ids: torch.Tensor, base: float = DEFAULTS.entropy_base) -> torch.Tensor:
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


def local_advantage(rewards: torch.Tensor, std: str = DEFAULTS.std, eps: float = DEFAULTS.eps) -> torch.Tensor:
    """A_local = (r_i - mean_G r) / (std_G r + eps), per prompt group (eq. local_adv, GRPO)."""
    return standardize(rewards, dim=1, std=std, eps=eps)


def global_advantage(rewards: torch.Tensor, std: str = DEFAULTS.std, eps: float = DEFAULTS.eps,
                     prompt_reward: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A_global(q_b) = (R(q_b) - mean_B R) / (std_B R + eps), R(q) = mean_G r (eq. g_r, eq. global_adv).

    Computed over every prompt of the rollout batch and shared by all G responses of q_b:
    returns [B, G] with one value per row. ``prompt_reward`` [B] replaces mean_G r where a mode defines
    R(q) otherwise (the released code's `reward_coef`).
    """
    if prompt_reward is None:
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


@dataclass(frozen=True)
class Mode:
    """One advantage mode and the facts the rest of the package reads from it (never from a list of names).

    ``weights(WeightInputs) -> (w_local, w_global)``; ``blended``: the weights read the soft weight, so gamma,
    rho and the entropy matter (and the entropy warning applies); ``zero_control``: the weights read
    ``--copo.zero_control`` (a resumed run must keep it only then); ``prompt_reward(rewards, entropy, base)``:
    R(q) of the global advantage, if not mean_G r; ``estimator``: selectable as ``--advantage_estimator NAME``
    (plain GRPO is ``--copo.mode grpo`` instead, not to shadow OpenRLHF's own group_norm)."""

    name: str
    weights: Callable[[WeightInputs], Tuple[torch.Tensor, torch.Tensor]]
    blended: bool
    zero_control: bool = False
    prompt_reward: Optional[Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = None
    estimator: bool = True


_MODES: Dict[str, Mode] = {}


def register_mode(name: str, *, blended: bool, zero_control: bool = False, prompt_reward=None, estimator: bool = True):
    """Register ``fn(WeightInputs) -> (w_local, w_global)`` as advantage mode ``name`` with its facts (see
    `Mode`). Registered before the CLI parses its arguments (an import in your launcher), a mode is a
    ``--copo.mode`` choice and an ``--advantage_estimator`` value like the built-in ones."""

    def register(fn):
        if name in _MODES:
            raise ValueError(f"advantage mode {name!r} is registered twice")
        _MODES[name] = Mode(name, fn, blended, zero_control, prompt_reward, estimator)
        return fn

    return register


def unregister_mode(name: str) -> None:
    """Remove a registered mode (tests, plugins that replace one)."""
    _MODES.pop(name, None)


def modes() -> Tuple[str, ...]:
    """The registered modes' names, read now (not when this module was imported)."""
    return tuple(_MODES)


def mode_info(name: str) -> Mode:
    """The registered facts of mode ``name``."""
    if name not in _MODES:
        raise ValueError(f"mode must be one of {modes()}, got {name!r}")
    return _MODES[name]


@register_mode("copo", blended=True, zero_control=True)
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


@register_mode("grpo", blended=False, estimator=False)
def grpo_weights(x: WeightInputs):
    """Plain GRPO through the same path: the local term alone."""
    return torch.ones_like(x.soft), torch.zeros_like(x.soft)


@register_mode("go_selective", blended=False)
def go_selective_weights(x: WeightInputs):
    """Table 3, GO-Selective: the global term alone for all-incorrect prompts, the local term alone elsewhere."""
    w_local = torch.where(x.all_incorrect, torch.zeros_like(x.soft), torch.ones_like(x.soft))
    return w_local, 1.0 - w_local


@register_mode("go_blended", blended=True)
def go_blended_weights(x: WeightInputs):
    """Table 3, GO-Blended: the soft blend without zero control."""
    return x.soft, 1.0 - x.soft


@register_mode("go_only", blended=False)
def go_only_weights(x: WeightInputs):
    """Table 3, GO-Only: the global term alone."""
    return torch.zeros_like(x.soft), torch.ones_like(x.soft)


@register_mode("copo_selective", blended=True)
def copo_selective_weights(x: WeightInputs):
    """COPO-Selective: the soft blend, and no loss at all on all-incorrect prompts."""
    zeros = torch.zeros_like(x.soft)
    return torch.where(x.all_incorrect, zeros, x.soft), torch.where(x.all_incorrect, zeros, 1.0 - x.soft)


@register_mode("copo_gated", blended=False)
def copo_gated_weights(x: WeightInputs):
    """Not in the paper (this project's, issue 31): COPO's global term only where GRPO has no signal. A prompt whose
    responses are all correct or all incorrect trains on the global term alone, any other on the local term alone.

    Why: the entropy is a proxy for "the group carries no relative signal", and at small G it misfires. A group of
    3 right + 1 wrong answer at G = 4 has H = 0.811 bits, so gamma 20, rho 1.5 give w_local 1e-6: the group trains
    on the global term alone, which gives its wrong answer the prompt's advantage (positive when the prompt is above
    the batch mean), where GRPO gives it -1.73. Gating by correctness keeps what COPO adds (a signal from groups
    that agree) and never raises an incorrect answer or lowers a correct one."""
    uniform = x.all_incorrect | x.correct.all(dim=1, keepdim=True).expand_as(x.correct)
    w_local = torch.where(uniform, torch.zeros_like(x.soft), torch.ones_like(x.soft))
    return w_local, 1.0 - w_local


def reward_coef_prompt_reward(rewards: torch.Tensor, entropy: torch.Tensor, base: float) -> torch.Tensor:
    """The released code's `reward_coef`: R(q) = mean_G r * (1 - lambda H(q)), lambda = (1 - 1/G) / log2 G.

    With H in bits, lambda H runs from 0 (one answer) to 1 - 1/G (G different answers), so a consistent
    prompt keeps its whole mean reward and a scattered one keeps 1/G of it. H / log_base(G) is the same in
    every base, so ``base`` (the entropy's) only converts."""
    G = rewards.shape[1]
    spread = entropy.to(torch.float32) / math.log(G, base) if G > 1 else torch.zeros_like(entropy)
    return rewards.mean(dim=1) * (1.0 - (1.0 - 1.0 / G) * spread)


@register_mode("copo_reward_coef", blended=True, zero_control=True, prompt_reward=reward_coef_prompt_reward)
def copo_reward_coef_weights(x: WeightInputs):
    """The released code's `reward_coef` variant: COPO's weights (zero control included), its global advantage
    from R(q) scaled by 1 - lambda H (`reward_coef_prompt_reward`)."""
    return copo_weights(x)


def copo_advantages(
    rewards: torch.Tensor,
    answer_ids: torch.Tensor,
    correct: Optional[torch.Tensor] = None,
    *,
    mode: str = "copo",
    gamma: float = DEFAULTS.gamma,
    rho: float = DEFAULTS.rho,
    zero_control: str = DEFAULTS.zero_control,
    std: str = DEFAULTS.std,
    eps: float = DEFAULTS.eps,
    entropy_base: float = DEFAULTS.entropy_base,
) -> CopoAdvantages:
    """Local and global advantages with their blending weights for one rollout batch.

    Args:
        rewards: float [B, G], the rule-based reward of each response.
        answer_ids: int64 [B, G], equal id = same (equivalent) final answer.
        correct: bool [B, G]; default ``rewards > 0``. Pass it when rewards are not 0/1
            (e.g. the 0 / 0.1 / 1 format reward, where 0.1 is formatted but wrong).
        mode: a registered mode (`modes()`; each one's docstring says what it does): ``copo`` (the paper),
            ``grpo`` (the local term alone), the ablations of Table 3, the released code's variants.
        gamma, rho: sharpness and centre of the sigmoid (paper's best: 20, 1.5).
        zero_control: for modes that read it (``mode_info(mode).zero_control``): ``prompt`` (paper),
            ``response`` (released code), ``none``.
        std: ``population`` (paper's worked example) or ``unbiased`` (released code).
        eps: added to the std in both advantages.
        entropy_base: log base of the consistency entropy (2 reproduces the appendix).

    Returns:
        A `CopoAdvantages`; the loss is
        ``PolicyLoss(w_local * local_adv) + PolicyLoss(w_global * global_adv)``.
    """
    info = mode_info(mode)
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
    entropy = consistency_entropy(answer_ids, base=entropy_base)
    prompt_reward = info.prompt_reward(rewards, entropy, entropy_base) if info.prompt_reward else rewards.mean(dim=1)
    global_adv = global_advantage(rewards, std=std, eps=eps, prompt_reward=prompt_reward)
    soft = blend_weights(entropy, gamma, rho).unsqueeze(1).expand(B, G)  # [B, G]
    all_incorrect = (~correct.any(dim=1)).unsqueeze(1).expand(B, G)
    w_local, w_global = info.weights(WeightInputs(soft, correct, all_incorrect, zero_control))

    out = CopoAdvantages(
        local_adv=local_adv,
        global_adv=global_adv,
        w_local=w_local.contiguous(),
        w_global=w_global.contiguous(),
        entropy=entropy,
        prompt_reward=prompt_reward,
    )
    return out
