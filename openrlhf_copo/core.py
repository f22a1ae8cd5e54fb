"""COPO's math, and nothing else: pure torch, no OpenRLHF, no I/O.

Consistency-Aware Policy Optimization (Han et al., AAAI 2026). For a rollout batch of B prompts
with G responses each, rewards r [B, G] and extracted final answers tau [B, G]:

    A_local[b, i]  = (r[b, i] - mean_G r[b]) / (std_G r[b] + eps)             (eq. local_adv)
    R(q_b)         = mean_G r[b]                                                (eq. g_r)
    A_global[b]    = (R(q_b) - mean_B R) / (std_B R + eps)                      (eq. global_adv)
    H(q_b)         = -sum_tau p(tau) log p(tau),   p(tau) = count(tau) / G      (eq. entropy)
    w_local        = sigmoid(gamma * (H - rho)),   w_global = 1 - w_local       (eq. weight)
    loss           = w_local * clipPPO(A_local) + w_global * clipPPO(A_global)  (eq. copo)

A batch's groups may differ in size (any G >= 2 per prompt: `Groups`; the ``knapsack`` mode allocates them): every
per-group statistic is then the group's own (its mean and std over its own responses, its entropy's p(tau) over
them), and the batch statistics of eq. global_adv run over the B prompts, each counted once whatever its size.

`copo_advantages` returns both advantages and both weights; the trainer applies the two clipped
terms separately (see `openrlhf_copo.openrlhf_ext.loss`). Every choice the paper leaves open is a
keyword argument whose default is the paper's reading:

- ``std="population"``: the appendix example divides by the population std ([1,1,1,0,0,0] gives
  [1,1,1,-1,-1,-1]); the authors' released code uses torch's unbiased std (``std="unbiased"``).
- ``zero_control="prompt"``: the paper sets w_local = 0 "for fully incorrect data", i.e. for a
  prompt whose G responses are all incorrect, so that w_global = 1 there ("to prevent
  w_global < 1 from reducing the overall loss"). The released code zeroes w_local for every
  incorrect response (``"response"``) or, in two of its switches, every response of a prompt whose rewards are
  all equal (``"uniform"``); ``"none"`` disables it.
- ``entropy_base=2``: the appendix's H = 1.459 for answers [2,2,2,3,3,4] is in bits.
- A group (or batch) whose values are all equal has zero spread; its advantage is exactly 0,
  whatever eps is. (With eps > 0 the formula would give round-off noise / eps instead.)

The registry below also holds every switch of the authors' released code (docs/paper.md maps each of their
``global_flg`` values to a mode and flags) and the field's other answers to zero-variance groups, each from its own
paper: NGRPO (``ngrpo``), RL-ZVP (``rl_zvp``) and Dr. GRPO (``dr_grpo``); and Reinforce-Ada (``reinforce_ada``), which
answers them by sampling more: its exit rules, its choice of the G kept and its pool baseline are here
(`ada_resolved`, `ada_select`, `ada_pool_baseline`), its extra generation rounds in
`openrlhf_ext.runtime_patches.adaptive_sampling`; ``reinforce_ada_copo`` adds COPO's global term to it, and
``reinforce_ada_uniform`` is its selection control (one uniform draw of k x G, G kept at random: `ada_random_keep`).
``knapsack`` (Knapsack RL) trains GRPO's loss on groups whose sizes the rollout allocates from the step's fixed budget
of B x G responses: its value and dynamic program are here (`knapsack_value`, `knapsack_allocation`), its rollout in
`openrlhf_ext.runtime_patches.knapsack`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

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
    "Groups",
    "standardize",
    "consistency_entropy",
    "local_advantage",
    "global_advantage",
    "blend_weights",
    "zero_controlled",
    "ngrpo_local_advantage",
    "zero_variance_sign",
    "rl_zvp_token_advantage",
    "reward_coef_prompt_reward",
    "copo_advantages",
    "ADA_EXITS",
    "ada_resolved",
    "ada_kept_counts",
    "ada_select",
    "ada_keepable",
    "ada_random_keep",
    "ada_pool_baseline",
    "ada_local_advantage",
    "ada_prompt_reward",
    "KNAPSACK_MIN_N",
    "KNAPSACK_CONFIDENCE",
    "KNAPSACK_WINDOW",
    "knapsack_value",
    "knapsack_need",
    "knapsack_dp",
    "KnapsackAllocation",
    "knapsack_allocation",
]

#: Where the modes that read it (``copo``, ``go_selective``) set w_local = 0 (see `zero_controlled`).
ZERO_CONTROLS = ("prompt", "response", "uniform", "none")
#: Standard-deviation conventions: divide by the std with divisor n, n - 1, or not at all (Dr. GRPO; the released
#: code's ``norm_adv_by_std_in_grpo=False``).
STDS = ("population", "unbiased", "none")
#: NGRPO's virtual sample: the reward's maximum, appended to every group's statistics (arXiv 2509.18851).
NGRPO_VIRTUAL_REWARD = 1.0


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
    global_coef: float = 1.0  # the released code's global_loss_coef (kappa), 1 but in one script (0.1)
    zvp_alpha: float = 0.1  # RL-ZVP's alpha (its Table 3: 0.1 best)
    # Reinforce-Ada (arXiv 2510.04996), the official code's defaults (RLHFlow/Reinforce-Ada,
    # verl/trainer/config/algorithm.py and scripts/run_reinforce_ada.sh)
    ada_exit: str = "balanced"  # reinforce_ada_choice (script: balanced)
    ada_round_size: int = 8  # round_repeat: responses per unresolved prompt and round
    ada_budget: int = 32  # max_rounds 4 x round_repeat 8: responses drawn per prompt at most
    ada_threshold: float = 0.7  # positive_threshold: a response is correct when its reward exceeds it
    # Reinforce-Ada's selection control (reinforce_ada_uniform): responses drawn per prompt, as a multiple of G: the
    # budget control grpo_4xg's 4 (Reinforce-Ada drew 3.75x GRPO's tokens per step in the `hard` regime)
    ada_draw_factor: int = 4
    # Knapsack RL (arXiv 2509.25849), its script (liziniu/KnapsackRL, examples/knapsack_trainer/
    # run_knapsack_grpo_7b.sh): MAX_N, the most responses one prompt may get in a step
    knapsack_max_n: int = 128


DEFAULTS = Defaults()


class Groups:
    """A rollout batch's prompt groups as consecutive runs of a flat [N] tensor of responses: group b is responses
    ``starts[b] .. starts[b] + sizes[b] - 1``. The sizes may differ (any size >= 2); a batch of equal sizes G is the
    [B, G] tensor read row by row.

    Why blocks: every per-group statistic of this module is written for a [B, G] tensor, one group per row. `blocks`
    gathers the groups of each size into such a tensor, so those same functions serve groups of any size, each with
    its own n (its mean over its n responses, its std with divisor n or n - 1, its entropy's p = count / n), and a
    batch of equal sizes is one block: its computation is exactly the [B, G] one."""

    def __init__(self, sizes: Sequence[int]):
        self.sizes: Tuple[int, ...] = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"group sizes must be one positive size per prompt, got {list(self.sizes)}")
        #: [B] int64: each group's first response in the flat tensor
        self.starts = torch.tensor((0,) + self.sizes[:-1], dtype=torch.int64).cumsum(0)

    @classmethod
    def equal(cls, n_groups: int, size: int) -> "Groups":
        """``n_groups`` groups of ``size`` responses each: the [B, G] batch."""
        return cls([size] * n_groups)

    @property
    def n_groups(self) -> int:
        return len(self.sizes)

    @property
    def n_responses(self) -> int:
        return sum(self.sizes)

    @property
    def group_index(self) -> torch.Tensor:
        """[N] int64: the group of each response."""
        return torch.repeat_interleave(torch.arange(self.n_groups), torch.tensor(self.sizes))

    def blocks(self) -> List[Tuple[int, torch.Tensor, torch.Tensor]]:
        """(G, groups [B_k], responses [B_k, G]) per distinct size G, by rising size: which groups have that size
        and, row by row, the flat positions of their responses (``flat[responses]`` is the block's [B_k, G] tensor)."""
        out = []
        for size in sorted(set(self.sizes)):
            groups = torch.tensor([b for b, s in enumerate(self.sizes) if s == size], dtype=torch.int64)
            out.append((size, groups, self.starts[groups].unsqueeze(1) + torch.arange(size)))
        return out

    def stack(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """One value per block of `blocks`, in its order, put back in batch order: [B_k] parts (one value per group)
        give [B]; [B_k, G] parts (one per response) give [N]."""
        blocks = self.blocks()
        if len(parts) != len(blocks):
            raise ValueError(f"{len(parts)} parts for {len(blocks)} blocks of groups")
        per_group = parts[0].dim() == 1
        out = parts[0].new_empty(self.n_groups if per_group else self.n_responses)
        for (_, groups, responses), part in zip(blocks, parts):
            out[groups if per_group else responses] = part
        return out

    def reduce(self, fn: Callable[..., torch.Tensor], *flat: torch.Tensor) -> torch.Tensor:
        """``fn`` of each block ([B_k, G] of every tensor of ``flat`` [N]), put back in batch order (`stack`): e.g.
        ``groups.reduce(lambda r: r.amax(1), rewards)`` is each group's greatest reward [B]."""
        return self.stack([fn(*(x[responses] for x in flat)) for _, _, responses in self.blocks()])

    def per_response(self, values: torch.Tensor) -> torch.Tensor:
        """[N]: each group's value [B] on every one of its responses."""
        return torch.repeat_interleave(values, torch.tensor(self.sizes, device=values.device), dim=0)


@dataclass
class CopoAdvantages:
    """Everything `copo_advantages` computes for one rollout batch.

    All per-response tensors are [B, G] (flat [N] for groups given by their sizes); ``global_adv`` and ``w_*`` are
    constant within a group where the mode makes them per prompt.
    """

    local_adv: torch.Tensor
    global_adv: torch.Tensor
    w_local: torch.Tensor
    w_global: torch.Tensor
    entropy: torch.Tensor  # [B]
    prompt_reward: torch.Tensor  # [B], R(q) = mean_G r (or, with reward_coef, mean_G r (1 - lambda H))

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
    flat = x.amax(dim=dim, keepdim=True) == x.amin(dim=dim, keepdim=True)
    if std == "none":
        return torch.where(flat, torch.zeros_like(x), x - mean)
    sd = x.std(dim=dim, keepdim=True, correction=0 if std == "population" else 1)
    denom = sd + eps
    out = (x - mean) / torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.where(flat | (denom == 0), torch.zeros_like(out), out)


def consistency_entropy(answer_ids: torch.Tensor, base: float = DEFAULTS.entropy_base) -> torch.Tensor:
    """H(q) = -sum_{tau in T_q} p(tau) log p(tau), p(tau) = count(tau) / G  (eq. entropy).

    ``answer_ids`` is [B, G]; equal ids mean the same final answer. Summing over responses
    instead of distinct answers gives the same value without a loop:
    H = -(1/G) sum_i log p(tau_i), since each answer tau appears count(tau) times.
    Returns [B] in units of ``base`` (2: bits, as in the paper's appendix). With groups of unequal size
    (`Groups.blocks`) G is each group's own: p(tau) is the share of its own responses.
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
    """A_local = (r_i - mean_G r) / (std_G r + eps), per prompt group (eq. local_adv, GRPO). With groups of unequal
    size (`Groups.blocks`), each group's mean and std are over its own responses (the std's divisor its own n or
    n - 1)."""
    return standardize(rewards, dim=1, std=std, eps=eps)


def global_advantage(rewards: torch.Tensor, std: str = DEFAULTS.std, eps: float = DEFAULTS.eps,
                     prompt_reward: Optional[torch.Tensor] = None, groups: Optional[Groups] = None) -> torch.Tensor:
    """A_global(q_b) = (R(q_b) - mean_B R) / (std_B R + eps), R(q) = mean_G r (eq. g_r, eq. global_adv).

    Computed over every prompt of the rollout batch and shared by all G responses of q_b:
    returns [B, G] with one value per row. ``prompt_reward`` [B] replaces mean_G r where R(q) is defined
    otherwise (the released code's `reward_coef`). With ``groups`` (`Groups`: sizes that may differ), ``rewards`` is
    flat [N] and so is the result: R(q_b) is the mean over q_b's own responses, and mean_B, std_B run over the B
    prompts, each counted once whatever its group's size.
    """
    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    if groups is None:
        groups = Groups.equal(*rewards.shape)
    if prompt_reward is None:
        prompt_reward = groups.reduce(lambda r: r.mean(dim=1), rewards.reshape(-1))
    return groups.per_response(standardize(prompt_reward, dim=0, std=std, eps=eps)).reshape(rewards.shape)


def blend_weights(entropy: torch.Tensor, gamma: float, rho: float) -> torch.Tensor:
    """w_local(H) = sigmoid(gamma * (H - rho)); w_global = 1 - w_local (eq. weight). Returns w_local [B]."""
    return torch.sigmoid(gamma * (entropy - rho))


# ---------------------------------------------------------------------------------------------
# The modes: how each one turns the soft weight into (w_local, w_global), and, for the few that need it, its own
# advantages. One function per mode, registered by name (verl's `register_adv_est` is the model); a new ablation
# is one function here.


@dataclass
class WeightInputs:
    """What a mode may look at, all [B, G] (one block of groups of one size, `Groups.blocks`: with groups of unequal
    size a mode sees each size apart, so that every row-wise statistic it takes is its group's own): the soft weight
    sigmoid(gamma (H - rho)), which responses are
    correct, which belong to an all-incorrect prompt, ``copo_advantages``'s ``zero_control``; which belong to a
    zero-variance prompt (its rewards all equal: GRPO's advantage is 0 there), the rewards, and the settings the
    modes with their own advantages read (``std``, ``eps``, ``zvp_alpha``)."""

    soft: torch.Tensor
    correct: torch.Tensor
    all_incorrect: torch.Tensor
    zero_control: str
    zero_variance: Optional[torch.Tensor] = None
    rewards: Optional[torch.Tensor] = None
    std: str = DEFAULTS.std
    eps: float = DEFAULTS.eps
    zvp_alpha: float = DEFAULTS.zvp_alpha
    pool_correct: Optional[torch.Tensor] = None  # [B]: correct responses in the prompt's pool (Reinforce-Ada)
    pool_size: Optional[torch.Tensor] = None  # [B]: responses drawn for the prompt (Reinforce-Ada)


@dataclass(frozen=True)
class Mode:
    """One advantage mode and the facts the rest of the package reads from it (never from a list of names).

    ``weights(WeightInputs) -> (w_local, w_global)``; ``blended``: the weights read the soft weight, so gamma,
    rho and the entropy matter (and the entropy warning applies); ``zero_control``: the weights read
    ``--copo.zero_control`` (a resumed run must keep it only then); ``estimator``: selectable as
    ``--advantage_estimator NAME`` (plain GRPO is ``--copo.mode grpo`` instead, not to shadow OpenRLHF's own
    group_norm; ``dr_grpo`` likewise leaves OpenRLHF's estimator of that name alone).

    For modes from other papers: ``std``: the std convention of the mode's own paper, used unless ``--copo.std``
    is given (``std_fixed``: the mode is defined by it, and another is refused); ``local_advantage(x)`` /
    ``global_advantage(x)``: the mode's own [B, G] advantages in place of eq. local_adv / eq. global_adv;
    ``token_advantage(coef, token_entropy, mask)``: the second term's per-token advantage from its per-response
    coefficient and the policy's token entropy (RL-ZVP), computed in the loss; ``clip``: the (low, high) PPO clip
    range of the mode's paper, which the start-up warns about when the run's differs; ``adaptive_sampling``: the
    rollout draws a pool of more than G responses per prompt and keeps G of each (patch 11), and the advantage reads
    the pool's statistics (`WeightInputs.pool_correct`, ``pool_size``): Reinforce-Ada's rounds for the unresolved
    prompts and its balanced keep, or, with ``random_keep``, its selection control's one uniform draw of
    ``--copo.ada_draw_factor`` x G per prompt and G of it kept at random (`ada_random_keep`); ``global_std``: the global
    term's std where the mode takes it from another paper than its local term's (``--copo.std`` then sets the local
    term's alone); ``prompt_reward(x)``: the mode's own R(q) [B] in place of mean_G r (eq. g_r); ``budget_allocation``:
    the rollout spreads the step's B x G responses over its prompts (Knapsack RL: `knapsack_allocation`, patch 11), so
    that the groups differ in size (`Groups`), each response carrying its group's size (`contract.GROUP_SIZE`)."""

    name: str
    weights: Callable[[WeightInputs], Tuple[torch.Tensor, torch.Tensor]]
    blended: bool
    zero_control: bool = False
    estimator: bool = True
    std: str = DEFAULTS.std
    std_fixed: bool = False
    local_advantage: Optional[Callable[[WeightInputs], torch.Tensor]] = None
    global_advantage: Optional[Callable[[WeightInputs], torch.Tensor]] = None
    token_advantage: Optional[Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = None
    clip: Optional[Tuple[float, float]] = None
    adaptive_sampling: bool = False
    global_std: Optional[str] = None
    prompt_reward: Optional[Callable[[WeightInputs], torch.Tensor]] = None
    random_keep: bool = False
    budget_allocation: bool = False

    def __post_init__(self):
        if self.random_keep and not self.adaptive_sampling:
            raise ValueError(f"mode {self.name}: random_keep chooses the G kept of a pool, which only a mode that "
                             "samples adaptively draws (adaptive_sampling=True)")


_MODES: Dict[str, Mode] = {}


def register_mode(name: str, *, blended: bool, zero_control: bool = False, estimator: bool = True, **facts):
    """Register ``fn(WeightInputs) -> (w_local, w_global)`` as advantage mode ``name`` with its facts (see
    `Mode`). Registered before the CLI parses its arguments (an import in your launcher), a mode is a
    ``--copo.mode`` choice and an ``--advantage_estimator`` value like the built-in ones."""

    def register(fn):
        if name in _MODES:
            raise ValueError(f"advantage mode {name!r} is registered twice")
        _MODES[name] = Mode(name, fn, blended, zero_control, estimator, **facts)
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


def zero_controlled(x: WeightInputs) -> torch.Tensor:
    """bool [B, G]: where zero control sets w_local = 0, by ``x.zero_control``:

    - ``prompt``: every response of an all-incorrect prompt (the paper: "for fully incorrect data");
    - ``response``: every incorrect response (the released code's z_i = 1[r_i != 0]: ``soft-with-zero``, ``only-zero``);
    - ``uniform``: every response of a zero-variance prompt, all correct or all incorrect (the released code's
      f_i = 1[A_local_i != 0]: ``soft-with-forced``, ``only-forced``);
    - ``none``: nowhere."""
    if x.zero_control == "prompt":
        return x.all_incorrect
    if x.zero_control == "response":
        return ~x.correct
    if x.zero_control == "uniform":
        if x.zero_variance is None:
            raise ValueError("zero_control 'uniform' needs WeightInputs.zero_variance")
        return x.zero_variance
    return torch.zeros_like(x.correct)


@register_mode("copo", blended=True, zero_control=True)
def copo_weights(x: WeightInputs):
    """The paper: soft blend, w_local = 0 where zero control applies, w_global = 1 - w_local *after* it
    (a zeroed local term hands its weight to the global term instead of shrinking the loss).

    The released code's soft modes are this with ``zero_control``: ``only-soft`` = none, ``soft-with-zero`` =
    response, ``soft-with-forced`` = uniform."""
    w_local = torch.where(zero_controlled(x), torch.zeros_like(x.soft), x.soft)
    return w_local, 1.0 - w_local


@register_mode("grpo", blended=False, estimator=False)
def grpo_weights(x: WeightInputs):
    """Plain GRPO through the same path: the local term alone (the released code's ``no-global``)."""
    return torch.ones_like(x.soft), torch.zeros_like(x.soft)


@register_mode("go_selective", blended=False, zero_control=True)
def go_selective_weights(x: WeightInputs):
    """Table 3, GO-Selective: the global term alone where zero control applies, the local term alone elsewhere.
    With the paper's zero control (``prompt``) that is all-incorrect prompts; ``response`` gives the released
    code's ``only-zero`` (every incorrect response), ``uniform`` its ``only-forced`` (= ``copo_gated``)."""
    w_local = torch.where(zero_controlled(x), torch.zeros_like(x.soft), torch.ones_like(x.soft))
    return w_local, 1.0 - w_local


@register_mode("go_blended", blended=True)
def go_blended_weights(x: WeightInputs):
    """Table 3, GO-Blended: the soft blend without zero control (the released code's ``only-soft``)."""
    return x.soft, 1.0 - x.soft


@register_mode("go_only", blended=False)
def go_only_weights(x: WeightInputs):
    """Table 3, GO-Only: the global term alone (the released code's ``only-global``)."""
    return torch.zeros_like(x.soft), torch.ones_like(x.soft)


@register_mode("copo_selective", blended=True)
def copo_selective_weights(x: WeightInputs):
    """COPO-Selective: the soft blend, and no loss at all on all-incorrect prompts."""
    zeros = torch.zeros_like(x.soft)
    return torch.where(x.all_incorrect, zeros, x.soft), torch.where(x.all_incorrect, zeros, 1.0 - x.soft)


@register_mode("copo_gated", blended=False)
def copo_gated_weights(x: WeightInputs):
    """COPO's global term only where GRPO has no signal: a zero-variance prompt (all correct or all incorrect)
    trains on the global term alone, any other on the local term alone. This is the released code's
    ``only-forced`` (f_i = 1[A_local != 0]), i.e. ``go_selective`` with zero control ``uniform``; named here for
    issue 31, which found it independently.

    Why: the entropy is a proxy for "the group carries no relative signal", and at small G it misfires. A group of
    3 right + 1 wrong answer at G = 4 has H = 0.811 bits, so gamma 20, rho 1.5 give w_local 1e-6: the group trains
    on the global term alone, which gives its wrong answer the prompt's advantage (positive when the prompt is above
    the batch mean), where GRPO gives it -1.73. Gating by the group's variance keeps what COPO adds (a signal from
    groups that agree) and, with a 0/1 reward, never raises an incorrect answer or lowers a correct one. (Until
    issue 32 it gated by correctness, all correct or all incorrect; with a 0/1 reward that is the same groups. Under
    the 0 / 0.1 / 1 format reward a group of formatted and unformatted wrong answers now keeps GRPO's local term.)"""
    return go_selective_weights(replace(x, zero_control="uniform"))


def ngrpo_local_advantage(x: WeightInputs) -> torch.Tensor:
    """NGRPO's calibrated advantage (arXiv 2509.18851): one virtual response of the maximum reward
    (`NGRPO_VIRTUAL_REWARD`) joins every group's statistics but is not trained on:

        mean' = (sum_i r_i + r_max) / (G + 1),  std' = std of the G + 1 values,  A_i = (r_i - mean') / (std' + eps)

    G is the group's own size (groups of unequal size: one virtual response joins each).

    An all-incorrect group then gets a uniform negative advantage (G = 8: -1/3 with Bessel's std); an all-correct
    group stays at 0. G = 8 with one correct: 1.764 / -0.504 (GRPO: 2.475 / -0.354), the paper's 1.76 / -0.50."""
    r = x.rewards
    virtual = torch.full_like(r[:, :1], NGRPO_VIRTUAL_REWARD)
    return standardize(torch.cat([r, virtual], dim=1), dim=1, std=x.std, eps=x.eps)[:, : r.shape[1]]


@register_mode("ngrpo", blended=False, std="unbiased", local_advantage=ngrpo_local_advantage, clip=(0.16, 0.24))
def ngrpo_weights(x: WeightInputs):
    """NGRPO: the calibrated local advantage (`ngrpo_local_advantage`) alone, with its paper's asymmetric clip
    [1 - 0.16, 1 + 0.24] (``--actor.eps_clip_low_high 0.16 0.24``) and Bessel's std (its official code's)."""
    return grpo_weights(x)


@register_mode("dr_grpo", blended=False, estimator=False, std="none", std_fixed=True)
def dr_grpo_weights(x: WeightInputs):
    """Dr. GRPO (arXiv 2503.20783): A_i = r_i - mean_G r (the mean over the group's own responses), no division by
    the std; the local term alone. The same
    advantage as OpenRLHF's own ``--advantage_estimator dr_grpo`` (which this name leaves alone), here with this
    package's metrics: ``--advantage_estimator copo --copo.mode dr_grpo``. Its loss normalizer is OpenRLHF's
    (the step's token count), not the paper's constant: docs/paper.md says what that changes."""
    return grpo_weights(x)


def zero_variance_sign(x: WeightInputs) -> torch.Tensor:
    """float [B, G]: +1 for a response of an all-correct zero-variance prompt, -1 of an all-incorrect one, 0 for
    a prompt whose rewards differ (RL-ZVP's branch)."""
    uniform_correct = x.correct.all(dim=1, keepdim=True).expand_as(x.correct)
    sign = torch.where(uniform_correct, 1.0, torch.where(x.all_incorrect, -1.0, 0.0))
    return torch.where(x.zero_variance, sign, torch.zeros_like(sign))


def rl_zvp_token_advantage(coef: torch.Tensor, token_entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """RL-ZVP's per-token advantage on zero-variance prompts (arXiv 2509.21880, Eq. 5):

        all correct (coef = +alpha):   A_{i,t} = alpha H_{i,t}
        all incorrect (coef = -alpha): A_{i,t} = -alpha (max_k H_{i,k} - H_{i,t})

    H_{i,t} is the policy's entropy of the next-token distribution at token t (nats, detached), the max over the
    response's own tokens (padding masked). The most uncertain token of a wrong response gets 0, its confident
    tokens the largest penalty. ``coef`` [N] or [N, 1] (0: no RL-ZVP term), ``token_entropy`` and ``mask`` [N, T]."""
    coef = coef.reshape(-1, 1).float()
    mask = mask.to(torch.float32)
    # `where`, not `* mask`: a padded position may hold anything (NaN or inf from a padded logit row), and NaN * 0 is
    # NaN; it must be 0 here and stay out of the max
    h = torch.where(mask > 0, token_entropy.detach().float(), torch.zeros_like(mask))
    h_max = torch.where(mask > 0, h, torch.full_like(h, -math.inf)).amax(dim=1, keepdim=True)
    h_max = torch.where(torch.isfinite(h_max), h_max, torch.zeros_like(h_max))  # a response without tokens
    adv = torch.where(coef > 0, coef * h, torch.where(coef < 0, coef * (h_max - h), torch.zeros_like(h)))
    return torch.where(mask > 0, adv, torch.zeros_like(adv))


@register_mode("rl_zvp", blended=False, std="unbiased",
               global_advantage=lambda x: x.zvp_alpha * zero_variance_sign(x),
               token_advantage=rl_zvp_token_advantage, clip=(0.2, 0.28))
def rl_zvp_weights(x: WeightInputs):
    """RL-ZVP (arXiv 2509.21880): GRPO's local term on prompts whose rewards differ; on zero-variance prompts the
    second term, whose per-response coefficient +-alpha (`zero_variance_sign`) the loss turns into per-token
    advantages from the policy's token entropy (`rl_zvp_token_advantage`). The entropy is the current policy's,
    from OpenRLHF's training forward (``--actor.entropy_coef 0`` makes it compute it without an entropy loss)."""
    zv = x.zero_variance.to(x.soft.dtype)
    return 1.0 - zv, zv


#: Reinforce-Ada's exit rules (arXiv 2510.04996, Sec. 3.2; the official code's ``reinforce_ada_choice``).
ADA_EXITS = ("balanced", "positive_focused")


def ada_resolved(n_correct: int, n_incorrect: int, G: int, exit: str = DEFAULTS.ada_exit) -> bool:
    """Whether a prompt whose pool holds ``n_correct`` and ``n_incorrect`` responses leaves the sampling rounds
    (Reinforce-Ada's exit conditions; official code, ray_trainer.py `_generate_multi_round_adaptive_downsampling`):

        positive_focused (Reinforce-Ada-pos):     n_correct >= 1
        balanced (Reinforce-Ada-balance):         n_correct >= floor(G / 2)  and  n_incorrect >= G - floor(G / 2)

    Why: an all-incorrect group gives GRPO no signal, and one correct response among them is the rarest and most
    informative; `balanced` also waits for failures on easy prompts, so that their group is not all correct."""
    if exit not in ADA_EXITS:
        raise ValueError(f"exit must be one of {ADA_EXITS}, got {exit!r}")
    if exit == "positive_focused":
        return n_correct >= 1
    return n_correct >= G // 2 and n_incorrect >= G - G // 2


def ada_kept_counts(n_correct: int, n_incorrect: int, G: int) -> Tuple[int, int]:
    """How many correct and how many incorrect responses the G kept from a pool of ``n_correct`` and ``n_incorrect``
    hold: (k+, G - k+) with

        k+ = max(min(floor(G / 2), n_correct), G - n_incorrect)

    i.e. half and half where the pool allows it, the other kind filling in where one kind is short (`ada_select`)."""
    k_correct = max(min(G // 2, n_correct), G - n_incorrect)
    return k_correct, G - k_correct


def ada_select(correct, G: int, n_correct: Optional[int] = None, n_incorrect: Optional[int] = None) -> list:
    """Which G responses of a prompt's pool train (indices into ``correct``, in draw order), from their correctness in
    draw order: the first k+ correct and the first G - k+ incorrect ones (`ada_kept_counts`).

    This is the official code's selection in all its cases (its `downsample_cache` at the exit of either rule, and its
    fallback for a prompt still unresolved at the budget: under `positive_focused` such a pool holds no correct
    response and G incorrect ones are kept), given a pool of at least G, which ours always is (its first round is the
    normal rollout's G).

    ``n_correct`` / ``n_incorrect``: the whole pool's counts, when ``correct`` is only the part of it that was kept
    (`ada_keepable`: the first responses of each kind, in draw order); default: ``correct``'s own."""
    correct = [bool(c) for c in correct]
    n_correct = sum(correct) if n_correct is None else n_correct
    n_incorrect = len(correct) - sum(correct) if n_incorrect is None else n_incorrect
    if n_correct + n_incorrect < G:
        raise ValueError(f"a pool of {n_correct + n_incorrect} responses cannot give a group of G = {G}")
    k_correct, k_incorrect = ada_kept_counts(n_correct, n_incorrect, G)
    pos = [i for i, c in enumerate(correct) if c][:k_correct]
    neg = [i for i, c in enumerate(correct) if not c][:k_incorrect]
    if len(pos) < k_correct or len(neg) < k_incorrect:
        raise ValueError(f"the G = {G} kept of a pool of {n_correct} correct and {n_incorrect} incorrect responses "
                         f"are its first {k_correct} correct and {k_incorrect} incorrect ones; the {len(correct)} "
                         f"given hold {sum(correct)} and {len(correct) - sum(correct)}")
    return sorted(pos + neg)


def ada_keepable(n_correct: int, n_incorrect: int, G: int) -> Tuple[int, int]:
    """The most correct and the most incorrect responses (the first of each kind, in draw order) that `ada_select` can
    still take from a pool that holds ``n_correct`` and ``n_incorrect`` so far, whatever is drawn next: its k+ and
    G - k+ (`ada_kept_counts`) with the other kind's count unbounded, as drawing more of a kind can only lower what
    the other kind keeps:

        correct:   max(floor(G / 2), G - n_incorrect)        incorrect:   G - min(floor(G / 2), n_correct)

    The responses past these, of each kind, are never trained on: a pool that keeps only the first ones (plus its
    counts) selects the same G, and holds at most G responses once each kind is trimmed to them."""
    return ada_kept_counts(G, n_incorrect, G)[0], ada_kept_counts(n_correct, G, G)[1]


def ada_random_keep(n_drawn: int, G: int, seed: int) -> list:
    """Which G of a pool of ``n_drawn`` responses train under Reinforce-Ada's selection control
    (``reinforce_ada_uniform``): a uniformly random G-subset of the draw indices 0 .. n_drawn - 1, in draw order.
    Every one of the C(n_drawn, G) subsets is equally likely, whatever the responses are: the keep ignores correctness,
    which is what the control takes away from `ada_select`'s balanced keep. Chosen from ``seed`` alone
    (`random.Random(seed).sample`), before anything is drawn: the same seed keeps the same draws in every run, and the
    pool needs to hold only those (`runtime_patches.adaptive_sampling.Pool`)."""
    if not 1 <= G <= n_drawn:
        raise ValueError(f"a random keep of G = {G} from a pool of {n_drawn} responses: G must be in [1, {n_drawn}]")
    return sorted(random.Random(seed).sample(range(n_drawn), G))


def ada_pool_baseline(pool_correct: torch.Tensor, pool_size: torch.Tensor, std: str = "unbiased",
                      eps: float = DEFAULTS.eps) -> Tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) [B] of each prompt's whole pool of responses, each counted 1 if correct and 0 if not: Reinforce-Ada's
    ``global_stat_est`` (official code, core_algos.py `compute_grpo_outcome_advantage`), which estimates the baseline
    from every response drawn for the prompt, not only the G kept. With p = n_correct / N:

        mean = p,    std = sqrt(N p (1 - p) / (N - 1))  (unbiased, the official code's torch.std)  or  sqrt(p (1 - p)),

    clamped below at ``eps`` as the official code does; a pool of one response gets mean 0, std 1 (theirs)."""
    n = pool_size.to(torch.float64)
    p = pool_correct.to(torch.float64) / n.clamp(min=1)
    var = p * (1 - p) * (n / (n - 1).clamp(min=1) if std == "unbiased" else 1.0)
    sd = var.clamp(min=0).sqrt().clamp(min=eps)
    single = n <= 1
    mean = torch.where(single, torch.zeros_like(p), p)
    sd = torch.where(single, torch.ones_like(sd), sd)
    return mean.to(torch.float32), sd.to(torch.float32)


def ada_pool(x: WeightInputs) -> Tuple[torch.Tensor, torch.Tensor]:
    """(pool_correct, pool_size) [B] of a mode that samples adaptively; refused when the rollout did not count them."""
    if x.pool_correct is None or x.pool_size is None:
        adaptive = ", ".join(m for m in modes() if mode_info(m).adaptive_sampling)
        raise ValueError(f"a mode that samples adaptively ({adaptive}) needs each prompt's pool statistics "
                         "(pool_correct, pool_size): the adaptive sampling patch (11) did not run in the rollout")
    return x.pool_correct, x.pool_size


def ada_local_advantage(x: WeightInputs) -> torch.Tensor:
    """Reinforce-Ada's advantage of the G responses kept from each pool (official code, `compute_grpo_outcome_advantage`
    under ``global_stat_est``):

        A_i = r_i - mean_pool                          (std "none": their script's norm_adv_by_std_in_grpo=False)
        A_i = (r_i - mean_pool) / (std_pool + eps)     (std "unbiased" or "population")

    With 0/1 rewards an all-correct or all-incorrect pool (a prompt the budget did not resolve) gets exactly 0, and the
    one correct response kept from a pool of 1 correct in 32 gets 31/32 (GRPO without std on the kept 1 + 3: 0.75).
    The mean is over correctness (1 above ``--copo.ada_threshold``), the difference over the reward, as in
    the official code."""
    mean, sd = ada_pool_baseline(*ada_pool(x), std=x.std, eps=x.eps)
    centred = x.rewards - mean.unsqueeze(1)
    return centred if x.std == "none" else centred / (sd.unsqueeze(1) + x.eps)


@register_mode("reinforce_ada", blended=False, std="none", local_advantage=ada_local_advantage, clip=(0.2, 0.28),
               adaptive_sampling=True)
def reinforce_ada_weights(x: WeightInputs):
    """Reinforce-Ada (arXiv 2510.04996): GRPO's loss on groups drawn adaptively (`ada_resolved`, `ada_select`) with
    the pool's baseline (`ada_local_advantage`); the local term alone, with its script's clip-higher [0.8, 1.28]."""
    return grpo_weights(x)


def ada_prompt_reward(x: WeightInputs) -> torch.Tensor:
    """R(q) [B] = p, the share of correct responses in the prompt's whole pool (the mean of `ada_pool_baseline`).

    Why not mean_G r over the G kept: `ada_select` balances them, so every prompt that met the balanced exit keeps
    floor(G/2) correct responses and its kept mean is 1/2 whatever its success rate; a global advantage of that would
    only tell resolved prompts from unresolved ones. The pool is every response drawn for the prompt, the estimate
    of its success rate that Reinforce-Ada's own baseline uses."""
    return ada_pool_baseline(*ada_pool(x))[0]


@register_mode("reinforce_ada_copo", blended=True, zero_control=True, std="none", global_std="population",
               local_advantage=ada_local_advantage, prompt_reward=ada_prompt_reward, clip=(0.2, 0.28),
               adaptive_sampling=True)
def reinforce_ada_copo_weights(x: WeightInputs):
    """Reinforce-Ada with COPO's global term (issue 52, part 4): the two address collapsed groups from two sides,
    Reinforce-Ada by sampling until a group has both kinds, COPO by a batch-level term that trains the groups that
    stayed collapsed. Reinforce-Ada's rounds, its G kept and its clip-higher [0.8, 1.28]; COPO's blend and zero
    control (`copo_weights`, ``--copo.zero_control prompt`` by default). With p_b the share of correct responses in
    prompt b's pool:

        A_local[b, i] = r[b, i] - p_b                              (`ada_local_advantage`: their script, no std)
        A_global[b]   = (p_b - mean_B p) / (std_B p + eps)         (eq. global_adv with R(q) = p_b: `ada_prompt_reward`;
                                                                    std_B the population std, the COPO paper's)
        w_local       = sigmoid(gamma (H - rho)), 0 where zero control applies;  w_global = 1 - w_local   (mode copo)

    Each term keeps its own paper's std: Reinforce-Ada's script divides by none (``norm_adv_by_std_in_grpo=False``),
    COPO's appendix by the population std across the batch. ``--copo.std`` sets the local term's (``unbiased``: the
    official code's std-normalized variant), the global term's stays the population std (`Mode.global_std`).
    H is the consistency entropy of the G kept (the pool's other answers do not reach the advantage step), so the
    blend sees the balanced group: at G = 6 a kept 3 + 3 split (one wrong answer repeated) has H = 1 bit and, at
    gamma 20 and rho 1.5, w_local 4.5e-5, the global term alone, as mode ``copo`` gives such a group."""
    return copo_weights(x)


@register_mode("reinforce_ada_uniform", blended=False, std="none", local_advantage=ada_local_advantage,
               clip=(0.2, 0.28), adaptive_sampling=True, random_keep=True)
def reinforce_ada_uniform_weights(x: WeightInputs):
    """Reinforce-Ada's selection control (issue 69): what ``reinforce_ada`` does, but for how it chooses. Each prompt
    draws ``--copo.ada_draw_factor`` x G responses (default 4G, as the budget control ``grpo_4xg`` draws: the normal
    rollout's G, then one round of the rest, with no exit rule) and keeps G of them at random (`ada_random_keep`), not
    balanced (`ada_select`); the advantage is Reinforce-Ada's, r - p with p the share of correct responses in the whole
    pool (`ada_local_advantage`, no std), with its script's clip-higher [0.8, 1.28]. Reinforce-Ada minus this run, on
    the same seeds, measures what its adaptive rounds and balanced keep add beyond drawing about as much."""
    return grpo_weights(x)


# ---------------------------------------------------------------------------------------------
# Knapsack RL (arXiv 2509.25849; liziniu/KnapsackRL at ca5d5f5, verl/trainer/ppo/exploration_utils.py): a step's
# budget of B x G responses allocated over its B prompts by each prompt's value, by dynamic programming. Where this
# differs from their code, and why, is docs/paper.md's "Knapsack RL" section.

#: The fewest responses a prompt gets (their min_n): a group of fewer has no spread for GRPO's advantage. Also the
#: size of the pilot that estimates a new prompt's success rate (`openrlhf_ext.runtime_patches.knapsack`).
KNAPSACK_MIN_N = 2
#: The probability of a group with both outcomes that a mixed prompt's share of the budget aims at (their alpha).
KNAPSACK_CONFIDENCE = 0.9
#: A prompt's success rate is the mean of its latest this many outcomes (their reward_buffer_length).
KNAPSACK_WINDOW = 16


def knapsack_value(n: int, p: float) -> float:
    """Knapsack RL's value of drawing ``n`` responses for a prompt of success rate ``p`` (arXiv 2509.25849, Sec. 3):

        value(n, p) = (1 - p^n - (1 - p)^n) * p (1 - p)^2

    the probability that a group of n holds both outcomes (so that GRPO's gradient is not 0) times the prompt's
    InfoGain p (1 - p)^2. 0 at p = 0 and p = 1, whatever n."""
    return (1.0 - p ** n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def knapsack_need(p: float, n_max: int) -> int:
    """The responses a prompt of success rate 0 < p < 1 needs for a group with both outcomes with probability about
    `KNAPSACK_CONFIDENCE`: their "probability" cost, ln(1 - alpha) / ln max(p, 1 - p) (the larger outcome's share
    ^ n <= 1 - alpha), rounded up, between `KNAPSACK_MIN_N` and ``n_max``."""
    cost = math.log(1.0 - KNAPSACK_CONFIDENCE) / math.log(max(p, 1.0 - p))
    return min(n_max, max(KNAPSACK_MIN_N, math.ceil(cost - 1e-12)))  # 1e-12: an exact integer cost is not one more


def knapsack_dp(rates: Sequence[float], budget: int, n_min: int, n_max: int) -> List[int]:
    """N_i maximizing sum_i value(N_i, p_i) (`knapsack_value`) subject to sum_i N_i = ``budget`` and
    ``n_min`` <= N_i <= ``n_max``, by dynamic programming over (prompts so far, responses so far): best[i][w], the
    greatest value of the first i prompts given w responses beyond their minima, is the max over k = 0 .. n_max - n_min
    of best[i - 1][w - k] + value(n_min + k, p_i); O(prompts x budget x (n_max - n_min)), each prompt's k a vector
    operation over w. Among allocations of equal value it returns the one whose last prompts take the fewest (k rising,
    a tie keeps the first)."""
    import numpy as np

    m, extra, most = len(rates), budget - n_min * len(rates), n_max - n_min
    if extra < 0 or extra > most * m:
        raise ValueError(f"a budget of {budget} responses cannot give {m} prompts {n_min} to {n_max} each")
    best = np.full(extra + 1, -np.inf)
    best[0] = 0.0
    take = np.zeros((m, extra + 1), dtype=np.int64)
    for i, p in enumerate(rates):
        new = np.full(extra + 1, -np.inf)
        for k in range(min(most, extra) + 1):
            candidate = np.full(extra + 1, -np.inf)
            candidate[k:] = best[:extra + 1 - k] + knapsack_value(n_min + k, p)
            better = candidate > new
            new[better], take[i][better] = candidate[better], k
        best = new
    sizes, w = [0] * m, extra
    for i in range(m - 1, -1, -1):
        sizes[i] = n_min + int(take[i][w])
        w -= int(take[i][w])
    return sizes


@dataclass(frozen=True)
class KnapsackAllocation:
    """One step's allocation (`knapsack_allocation`): each prompt's N, in prompt order; how many prompts were mixed
    (0 < p < 1: the dynamic program's); and the surplus, the responses beyond the minima that the mixed prompts'
    need did not take (given to unsolved, then solved, prompts)."""

    sizes: Tuple[int, ...]
    mixed: int
    surplus: int


def knapsack_allocation(rates: Sequence[float], budget: int, n_max: int,
                        n_min: int = KNAPSACK_MIN_N) -> KnapsackAllocation:
    """Knapsack RL's allocation of ``budget`` responses (B x G: GRPO's) over prompts of success rates ``rates``:

    1. every prompt gets ``n_min`` (their min_n, negative_n and positive_n: 2);
    2. the mixed prompts (0 < p < 1) may take `knapsack_need`(p) - n_min more each (their cost estimate):
       D = min(what the budget has left, the sum of those);
    3. the surplus S = the rest goes evenly to the unsolved prompts (p = 0; their fallback), then evenly to the solved
       ones (p = 1), each up to ``n_max``; what neither can take joins D;
    4. D goes to the mixed prompts by `knapsack_dp`: the N_i of greatest sum_i value(N_i, p_i), each up to ``n_max``.

    "Evenly": the same number each, the first in prompt order one more where it does not divide. sum N_i = ``budget``
    always (n_min B <= budget <= n_max B is required)."""
    B = len(rates)
    if not n_min * B <= budget <= n_max * B:
        raise ValueError(f"a budget of {budget} responses cannot give {B} prompts {n_min} to {n_max} each")
    if any(not 0.0 <= p <= 1.0 for p in rates):
        raise ValueError(f"success rates must lie in [0, 1], got {list(rates)}")
    sizes = [n_min] * B
    mixed = [b for b, p in enumerate(rates) if 0.0 < p < 1.0]
    left = budget - n_min * B
    mixed_share = min(left, sum(knapsack_need(rates[b], n_max) - n_min for b in mixed))
    surplus = left - mixed_share
    rest = surplus
    for outcome in (0.0, 1.0):  # unsolved first: more draws are their only way to a first success
        takers = [b for b, p in enumerate(rates) if p == outcome]
        given = min(rest, (n_max - n_min) * len(takers))
        for j, b in enumerate(takers):
            sizes[b] += given // len(takers) + (j < given % len(takers))
        rest -= given
    for b, n in zip(mixed, knapsack_dp([rates[b] for b in mixed], n_min * len(mixed) + mixed_share + rest, n_min,
                                       n_max)):
        sizes[b] = n
    return KnapsackAllocation(tuple(sizes), len(mixed), surplus)


@register_mode("knapsack", blended=False, budget_allocation=True)
def knapsack_weights(x: WeightInputs):
    """Knapsack RL (arXiv 2509.25849): GRPO's loss (the local term alone, this package's GRPO std, eq. local_adv
    over each group's own responses) on groups whose sizes the rollout allocated over the step's prompts
    (`knapsack_allocation`), B x G responses in all, as GRPO draws."""
    return grpo_weights(x)


def reward_coef_prompt_reward(rewards: torch.Tensor, entropy: torch.Tensor, base: float,
                              mean: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The released code's `reward_coef`: R(q) = mean_G r * (1 - lambda H(q)), lambda = (1 - 1/G) / log2 G, G the
    group's own size.

    With H in bits, lambda H runs from 0 (one answer) to 1 - 1/G (G different answers), so a consistent
    prompt keeps its whole mean reward and a scattered one keeps 1/G of it. H / log_base(G) is the same in
    every base, so ``base`` (the entropy's) only converts. ``mean`` [B] replaces mean_G r where the mode defines R(q)
    otherwise (`Mode.prompt_reward`)."""
    G = rewards.shape[1]
    spread = entropy.to(torch.float32) / math.log(G, base) if G > 1 else torch.zeros_like(entropy)
    return (rewards.mean(dim=1) if mean is None else mean) * (1.0 - (1.0 - 1.0 / G) * spread)


class GroupTerms(NamedTuple):
    """What `copo_advantages` computes for one block of groups of one size from their own responses alone: every term
    but the batch statistics of eq. global_adv. Per response [B, G]: ``local_adv``, ``w_local``, ``w_global``, and
    ``own_global_adv``, the mode's own second-term advantage (`Mode.global_advantage`; None for eq. global_adv);
    per group [B]: ``entropy``, ``prompt_reward`` (R(q))."""

    local_adv: torch.Tensor
    w_local: torch.Tensor
    w_global: torch.Tensor
    own_global_adv: Optional[torch.Tensor]
    entropy: torch.Tensor
    prompt_reward: torch.Tensor


def group_terms(info: Mode, rewards: torch.Tensor, answer_ids: torch.Tensor, correct: torch.Tensor,
                pool_correct: Optional[torch.Tensor], pool_size: Optional[torch.Tensor], *, gamma: float, rho: float,
                zero_control: str, std: str, eps: float, entropy_base: float, reward_coef: bool,
                zvp_alpha: float) -> GroupTerms:
    """Mode ``info``'s per-group terms (`GroupTerms`) of a [B, G] block: each group's entropy (eq. entropy), soft
    weight (eq. weight), local advantage (eq. local_adv or the mode's own), R(q) (eq. g_r, the mode's own or
    reward_coef's) and the mode's weights, all from the group's own responses."""
    B, G = rewards.shape
    entropy = consistency_entropy(answer_ids, base=entropy_base)
    soft = blend_weights(entropy, gamma, rho).unsqueeze(1).expand(B, G)  # [B, G]
    all_incorrect = (~correct.any(dim=1)).unsqueeze(1).expand(B, G)
    zero_variance = (rewards.amax(dim=1) == rewards.amin(dim=1)).unsqueeze(1).expand(B, G)
    x = WeightInputs(soft, correct, all_incorrect, zero_control, zero_variance, rewards, std, eps, zvp_alpha,
                     pool_correct, pool_size)
    local_adv = info.local_advantage(x) if info.local_advantage else local_advantage(rewards, std=std, eps=eps)
    mean_reward = info.prompt_reward(x) if info.prompt_reward else rewards.mean(dim=1)
    prompt_reward = (reward_coef_prompt_reward(rewards, entropy, entropy_base, mean=mean_reward) if reward_coef
                     else mean_reward)
    w_local, w_global = info.weights(x)
    return GroupTerms(local_adv, w_local, w_global, info.global_advantage(x) if info.global_advantage else None,
                      entropy, prompt_reward)


def copo_advantages(
    rewards: torch.Tensor,
    answer_ids: torch.Tensor,
    correct: Optional[torch.Tensor] = None,
    *,
    group_sizes: Optional[Sequence[int]] = None,
    mode: str = "copo",
    gamma: float = DEFAULTS.gamma,
    rho: float = DEFAULTS.rho,
    zero_control: str = DEFAULTS.zero_control,
    std: Optional[str] = None,
    eps: float = DEFAULTS.eps,
    entropy_base: float = DEFAULTS.entropy_base,
    global_coef: float = DEFAULTS.global_coef,
    reward_coef: bool = False,
    zvp_alpha: float = DEFAULTS.zvp_alpha,
    pool_correct: Optional[torch.Tensor] = None,
    pool_size: Optional[torch.Tensor] = None,
) -> CopoAdvantages:
    """Local and global advantages with their blending weights for one rollout batch.

    Args:
        rewards: float [B, G], the rule-based reward of each response; with ``group_sizes``, float [N], the
            groups' responses one group after another.
        answer_ids: int64, ``rewards``' shape; equal id = same (equivalent) final answer.
        correct: bool, ``rewards``' shape; default ``rewards > 0``. Pass it when rewards are not 0/1
            (e.g. the 0 / 0.1 / 1 format reward, where 0.1 is formatted but wrong).
        group_sizes: the number of responses of each of the B prompts, in order, when they may differ (any size
            >= 2; `Groups`): the per-response inputs and outputs are then flat [N]. Each group's statistics are its
            own (its mean, std, entropy over its own responses); eq. global_adv's mean and std run over the B
            prompts, each counted once. Equal sizes give exactly what the [B, G] call gives.
        mode: a registered mode (`modes()`; each one's docstring says what it does): ``copo`` (the paper),
            ``grpo`` (the local term alone), the ablations of Table 3, the released code's variants, the
            zero-variance peers (``ngrpo``, ``rl_zvp``, ``dr_grpo``), Reinforce-Ada (``reinforce_ada``), it with
            COPO's global term (``reinforce_ada_copo``), its selection control (``reinforce_ada_uniform``), and GRPO on
            Knapsack RL's allocated groups (``knapsack``).
        gamma, rho: sharpness and centre of the sigmoid (paper's best: 20, 1.5).
        zero_control: for modes that read it (``mode_info(mode).zero_control``): ``prompt`` (paper),
            ``response`` and ``uniform`` (released code), ``none`` (see `zero_controlled`).
        std: ``population`` (paper's worked example), ``unbiased`` (released code), ``none`` (no division);
            default: the mode's own (``mode_info(mode).std``). A mode with a ``global_std`` of its own
            (``reinforce_ada_copo``) divides its global term by that one.
        eps: added to the std in both advantages.
        entropy_base: log base of the consistency entropy (2 reproduces the appendix).
        global_coef: kappa, multiplies w_global (the released code's ``global_loss_coef``).
        reward_coef: R(q) = mean_G r (1 - lambda H) in the global advantage (the released code's ``reward_coef_flg``).
        zvp_alpha: RL-ZVP's alpha (mode ``rl_zvp``).
        pool_correct, pool_size: [B], correct and drawn responses in each prompt's pool (the modes that sample
            adaptively: ``reinforce_ada``, ``reinforce_ada_copo``, ``reinforce_ada_uniform``).

    Returns:
        A `CopoAdvantages`; the loss is
        ``PolicyLoss(w_local * local_adv) + PolicyLoss(w_global * global_adv)``.
    """
    info = mode_info(mode)
    std = info.std if std is None else std
    if info.std_fixed and std != info.std:
        raise ValueError(f"mode {mode} is defined with std {info.std!r}, got {std!r}")
    if zero_control not in ZERO_CONTROLS:
        raise ValueError(f"zero_control must be one of {ZERO_CONTROLS}, got {zero_control!r}")
    if group_sizes is None:
        if rewards.dim() != 2:
            raise ValueError(f"rewards must be [B, G], got shape {tuple(rewards.shape)}")
        groups = Groups.equal(*rewards.shape)
    else:
        groups = Groups(group_sizes)
        if rewards.dim() != 1 or rewards.numel() != groups.n_responses:
            raise ValueError(f"rewards must be flat [N] with N = sum(group_sizes) = {groups.n_responses}, got shape "
                             f"{tuple(rewards.shape)}")
    if answer_ids.shape != rewards.shape:
        raise ValueError(f"answer_ids shape {tuple(answer_ids.shape)} != rewards shape {tuple(rewards.shape)}")
    smallest = min(groups.sizes)
    if smallest < 2:
        raise ValueError(f"COPO needs at least 2 responses per prompt (G={smallest}): the local advantage is "
                         "undefined")
    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    flat_rewards = rewards.reshape(-1)
    bad = ~torch.isfinite(flat_rewards)
    if bad.any():
        rows = sorted({int(r) for r in groups.group_index[bad].tolist()})
        raise ValueError(f"{int(bad.sum())} non-finite reward(s) in prompt group(s) {rows[:10]}: refusing to train on them")
    if correct is None:
        correct = rewards > 0
    elif correct.shape != rewards.shape:
        raise ValueError(f"correct shape {tuple(correct.shape)} != rewards shape {tuple(rewards.shape)}")
    flat_answers, flat_correct = answer_ids.reshape(-1), correct.bool().reshape(-1)

    settings = dict(gamma=gamma, rho=rho, zero_control=zero_control, std=std, eps=eps, entropy_base=entropy_base,
                    reward_coef=reward_coef, zvp_alpha=zvp_alpha)
    pools = [None if pool is None else pool.reshape(-1) for pool in (pool_correct, pool_size)]
    parts = [group_terms(info, flat_rewards[responses], flat_answers[responses], flat_correct[responses],
                         *(None if pool is None else pool[block] for pool in pools), **settings)
             for _, block, responses in groups.blocks()]

    def joined(field: str) -> torch.Tensor:
        """The blocks' ``field`` in batch order: [B] for a per-group one, ``rewards``' shape for a per-response one."""
        values = groups.stack([getattr(part, field) for part in parts])
        return values if field in ("entropy", "prompt_reward") else values.reshape(rewards.shape)

    prompt_reward = joined("prompt_reward")
    global_adv = (joined("own_global_adv") if info.global_advantage
                  else global_advantage(rewards, std=info.global_std or std, eps=eps, prompt_reward=prompt_reward,
                                        groups=groups))
    return CopoAdvantages(
        local_adv=joined("local_adv"),
        global_adv=global_adv,
        w_local=joined("w_local"),
        w_global=joined("w_global") * global_coef,
        entropy=joined("entropy"),
        prompt_reward=prompt_reward,
    )


def rho_keeping_every_split(G: int, gamma: float = 20.0, base: float = 2.0, w_min: float = 0.99) -> float:
    """The largest rho (to 0.01) at which every mixed answer split of G responses keeps w_local >= ``w_min``:
    below the entropy of the most lopsided split, (G-1)+1, by what the sigmoid of sharpness ``gamma`` needs
    (ln(w_min / (1 - w_min)) / gamma = 0.23 at 0.99 and gamma 20). At G = 4 (3+1 at 0.811 bits) that is 0.58; at
    G = 6 (5+1 at 0.650 bits) 0.42."""
    h = -((G - 1) / G * math.log((G - 1) / G, base) + 1 / G * math.log(1 / G, base))
    return math.floor((h - math.log(w_min / (1 - w_min)) / gamma) * 100) / 100
