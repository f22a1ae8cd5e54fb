"""COPO's command-line flags and the settings OpenRLHF must not combine with them.

The flags are added to OpenRLHF's own `train_ppo_ray` parser (see `openrlhf_copo.cli`), so they
show in `--help` and arrive hierarchized as `args.copo.*` in every Ray actor, next to OpenRLHF's.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple

from openrlhf_copo.contract import MIXED_LOCAL_LOST
from openrlhf_copo.core import (ADA_EXITS, DEFAULTS, STDS, ZERO_CONTROLS, blend_weights, consistency_entropy,
                                mode_info, modes)
from openrlhf_copo.files import write_atomic
from openrlhf_copo.openrlhf_ext.device import DEVICES

#: `--copo.incorrect`: a response is incorrect when its answer is not the label's, or when its reward is 0.
INCORRECT_RULES = ("answer", "reward")
#: `--copo.answer_buckets`: the entropy's answers are equal by value (math-verify), or as normalized strings.
ANSWER_BUCKETS = ("equivalence", "string")

def copo_estimators() -> tuple:
    """Values of `--algo.advantage.estimator` (alias `--advantage_estimator`) that select COPO: every mode of the
    core's registry marked ``estimator`` (all but plain GRPO, which is `--advantage_estimator copo --copo.mode
    grpo`), read when asked, so a mode registered after this module was imported is one too. `copo` follows
    `--copo.mode` (default `copo`); the others name an ablation or a variant."""
    return tuple(m for m in modes() if mode_info(m).estimator)


class CopoConfigError(ValueError):
    """A setting that would break COPO; the message is one line naming the flag."""


def is_copo(args) -> bool:
    """True when the run's advantage estimator is one of COPO's."""
    return getattr(getattr(getattr(args, "algo", None), "advantage", None), "estimator", None) in copo_estimators()


#: `_setting`'s ``scope``: which estimators read a setting. COPO's estimators only (given to another, it is refused:
#: it would change nothing); any estimator; COPO's only, but it only adds to the logs (given to another: a warning);
#: and the scopes of the modes that draw otherwise, each refused under every mode that does not read it
#: (`DRAW_SCOPES`): the modes that sample adaptively (`ADAPTIVE_ONLY`, `core.Mode.adaptive_sampling`), those that draw
#: Reinforce-Ada's rounds (`ROUNDS_ONLY`), those that draw one uniform pool and keep G at random (`RANDOM_KEEP_ONLY`,
#: `Mode.random_keep`), and those that allocate each step's budget over its prompts (`ALLOCATION_ONLY`,
#: `Mode.budget_allocation`: Knapsack RL's).
COPO_ONLY, ANY_ESTIMATOR, COPO_LOGS = "copo", "any", "copo logs"
ADAPTIVE_ONLY, ROUNDS_ONLY, RANDOM_KEEP_ONLY = "adaptive sampling", "adaptive rounds", "random keep"
ALLOCATION_ONLY = "budget allocation"
#: Each such scope: which modes read it (a predicate on `core.Mode`), and how the refusal names them.
DRAW_SCOPES = {
    ADAPTIVE_ONLY: (lambda info: info.adaptive_sampling, "the modes that sample adaptively"),
    ROUNDS_ONLY: (lambda info: info.adaptive_sampling and not info.random_keep,
                  "the modes that draw Reinforce-Ada's rounds"),
    RANDOM_KEEP_ONLY: (lambda info: info.random_keep, "the modes that draw one uniform pool and keep G at random"),
    ALLOCATION_ONLY: (lambda info: info.budget_allocation,
                      "the modes that allocate each step's budget over its prompts"),
}


def reads_scope(mode: str, scope: str) -> bool:
    """Whether mode ``mode`` reads the settings of ``scope`` (every COPO mode reads those of the other scopes)."""
    return DRAW_SCOPES[scope][0](mode_info(mode)) if scope in DRAW_SCOPES else True


def how_it_samples(mode: str) -> str:
    """How mode ``mode``'s rollout draws its groups, as a refusal of a flag it does not read says it."""
    info = mode_info(mode)
    if info.budget_allocation:
        return "allocates each step's B x G responses over its prompts"
    if not info.adaptive_sampling:
        return "draws G responses per prompt once"
    if info.random_keep:
        return "draws --copo.ada_draw_factor x G responses per prompt in one round and keeps G of them at random"
    return "draws Reinforce-Ada's rounds"


def _setting(default, help: str, *, choices=None, check=None, core=False, resume=False, kind=None, scope=COPO_ONLY):
    """One `--copo.<name>` setting: ``check`` is (predicate, what the value must be); ``core``: a keyword of
    `core.copo_advantages`; ``resume``: a resumed run must keep it (it changes the training math); ``scope``: which
    estimators read it (`COPO_ONLY`, `ANY_ESTIMATOR`, `COPO_LOGS`, or one of `DRAW_SCOPES`). ``choices`` may be a
    function, called when the parser is built (the registry's modes)."""
    return field(default=default, metadata=dict(help=help, choices=choices, check=check, core=core,
                                                resume=resume or core, kind=kind or type(default), scope=scope))


@dataclass(frozen=True)
class CopoSettings:
    """Every `--copo.*` setting, declared once: its flag, default (the paper's best), choices, help, the
    check that refuses a bad value, and whether a resumed run must keep it all come from these fields."""

    gamma: float = _setting(
        DEFAULTS.gamma, core=True,
        help="sharpness of w_local = sigmoid(gamma * (H - rho)) (paper's best: 20; released "
             "script: 5)")
    rho: float = _setting(
        DEFAULTS.rho, core=True,
        help="entropy threshold rho of the blend (paper's best: 1.5; released script: 1)")
    mode: Optional[str] = _setting(
        None, choices=modes, core=True, kind=str,
        help="advantage mode; default: the estimator's name (copo -> copo). 'grpo' runs plain GRPO"
             " through the same code path, as a baseline")
    zero_control: str = _setting(
        DEFAULTS.zero_control, choices=ZERO_CONTROLS, core=True,
        help="modes copo and go_selective: where w_local = 0: all-incorrect prompts (prompt, the "
             "paper), every incorrect response (response, the released code's soft-with-zero / "
             "only-zero), every prompt whose rewards are all equal (uniform, its soft-with-forced "
             "/ only-forced), or nowhere (none, its only-soft)")
    incorrect: str = _setting(
        "answer", choices=INCORRECT_RULES, resume=True,
        help="what makes a response incorrect for zero control and the selective ablations: answer"
             " (its final answer is not the label's, the reward file's copo_correct; the paper) or"
             " reward (its reward is 0; the released code). They differ under the 0/0.1/1 format "
             "reward: with reward, a formatted but wrong answer keeps the 0-vs-0.1 local signal")
    std: Optional[str] = _setting(
        None, choices=STDS, core=True, kind=str,
        help="std in both advantages: population (the COPO paper's worked example), unbiased (the "
             "released code, NGRPO, RL-ZVP), none (no division: Dr. GRPO, the released "
             "norm_adv_by_std_in_grpo=False); unset (None): the mode's own (population for COPO and"
             " its ablations, unbiased for ngrpo and rl_zvp, none for dr_grpo and reinforce_ada); "
             "reinforce_ada_copo: its local term's (none), its global term keeps the population std")
    eps: float = _setting(
        DEFAULTS.eps, check=(lambda v: v >= 0, "must be >= 0"), core=True,
        help="added to the std in both advantages")
    entropy_base: float = _setting(
        DEFAULTS.entropy_base, check=(lambda v: v > 0 and v != 1, "must be positive and != 1"), core=True,
        help="log base of the consistency entropy (2 reproduces the paper's appendix)")
    answer_buckets: str = _setting(
        "equivalence", choices=ANSWER_BUCKETS, resume=True,
        help="which answers count as the same in the consistency entropy: equivalence (equal value"
             " by math-verify: 1/2 = 0.5 = \\frac{2}{4}; ours) or string (the answer string as the "
             "released code normalizes it, no equivalence: reproduces their entropy)")
    global_coef: float = _setting(
        DEFAULTS.global_coef, check=(lambda v: v >= 0, "must be >= 0"), core=True,
        help="kappa: multiplies w_global in every mode (the released code's global_loss_coef of "
             "only-soft-with-coef; 0.1 in its 1.5B script)")
    reward_coef: bool = _setting(
        False, core=True,
        help="global advantage from R(q) = mean_G r (1 - lambda H), lambda = (1 - 1/G) / log2 G, "
             "instead of mean_G r (the released code's reward_coef_flg; off in all its scripts)")
    zvp_alpha: float = _setting(
        DEFAULTS.zvp_alpha, check=(lambda v: v > 0, "must be > 0"), core=True,
        help="mode rl_zvp: alpha of the entropy-scaled advantage on zero-variance prompts "
             "(RL-ZVP's Table 3: 0.1 best)")
    mask_zero_advantage: bool = _setting(
        False, resume=True,
        help="leave the tokens of every response whose advantage is 0 in both terms (under grpo: "
             "the zero-variance groups) out of the loss and of its token-mean denominator, so that"
             " dead groups do not shrink the step: AGPO's loss mask (arXiv 2503.15952); needs one "
             "optimizer step per rollout batch (--train.batch_size = rollout prompts x samples)")
    max_verify_failed: float = _setting(
        0.5, check=(lambda v: 0 <= v <= 1, "must be a share in [0, 1]"),
        help="stop the run when more than this share of a rollout step's answer checks failed "
             "(math-verify timed out, crashed, or cannot start on the reward node), instead of "
             "training on their zero rewards")
    metrics_file: Optional[str] = _setting(
        None, kind=str, scope=ANY_ESTIMATOR,
        help="also append every step's logged metrics, and every evaluation's (rows with \"eval\": "
             "1), to this JSON-lines file (any estimator)")
    probe: Optional[str] = _setting(
        None, kind=str,
        help="probe the regime, no training: the advantage step writes the first rollout batch's groups "
             "(rewards, correctness, answer split, entropy, w_local, the step's metrics) to this JSON file and the"
             " run stops there, before any optimizer step, weight sync or save (python -m "
             "openrlhf_copo.cli.probe runs it and reports)")
    device: str = _setting(
        "auto", choices=DEVICES, scope=ANY_ESTIMATOR,
        help="where the actors run: cuda, cpu (the CPU path: logical GPU slots, no CUDA touched), "
             "or auto: read from the resources the Ray cluster the run joins declares (found as "
             "ray.init() finds it: RAY_ADDRESS, as under `ray job submit`, else the latest `ray "
             "start` on this machine): CUDA unless all its GPU slots are marked logical (resource "
             "logical_gpu); with no cluster to join, this machine's CUDA (any estimator)")
    eval_before_train: bool = _setting(
        False, scope=ANY_ESTIMATOR,
        help="with --eval.dataset: also evaluate once before the first step (step 0; not when "
             "resuming), as verl's val_before_train, so a run reports its held-out gain (any "
             "estimator)")
    eval_after_train: bool = _setting(
        False, scope=ANY_ESTIMATOR,
        help="with --eval.dataset: also evaluate after the last step when --eval.steps does not "
             "divide it (with dynamic filtering the number of steps is not known in advance), so "
             "every run ends evaluated (any estimator)")
    seeded_rollouts: bool = _setting(
        False, scope=ANY_ESTIMATOR,
        help="sample every response with its own vLLM seed, a hash of --train.seed, the prompt and"
             " how many responses the run sampled for it before: two runs from the same weights"
             " draw the same responses whatever else shares vLLM's batch (OpenRLHF's draws depend "
             "on batching and arrival order), e.g. the same first rollout batch for two methods "
             "compared (any estimator)")
    push_metrics: bool = _setting(
        False, scope=COPO_LOGS,
        help="log each loss term's push on the sampled tokens (copo_push_local_sq, "
             "copo_push_global_sq, copo_push_dot: the global term's share of the update and its "
             "cosine with the local term); costs two more PolicyLoss evaluations and backwards per"
             " micro-batch (benchmarks/bench_loss.py)")
    same_pipeline: bool = _setting(
        False, scope=ANY_ESTIMATOR,
        help="a run of a non-COPO estimator (group_norm, dr_grpo, ...) also installs the run-time "
             "patches a COPO run gets: the held-out prompts in one vLLM call (patch 8), the "
             "tokenizer sent by path (9), the prompts shuffled by --train.seed (10), the start and"
             " end evaluations (6) and the metrics file hook (4), so that a baseline compared with"
             " a COPO run goes through the same pipeline; without it such a run gets OpenRLHF's "
             "own functions, except the patches that only add to its logs (docs/openrlhf.md)")
    eval_greedy: bool = _setting(
        False, scope=ANY_ESTIMATOR,
        help="with --eval.dataset: every evaluation also decodes each held-out prompt greedily "
             "(temperature 0, one sample, one vLLM call): eval_<source>_greedy and its standard "
             "error; with --copo.metrics_file also the per-prompt outcomes, so that two "
             "evaluations compare prompt by prompt (any estimator)")
    eval_sampled_prompts: int = _setting(
        0, check=(lambda v: v >= 0, "must be >= 0"), scope=ANY_ESTIMATOR,
        help="the sampled evaluation (--eval.temperature, --eval.n_samples_per_prompt: mean@k, "
             "maj@k) takes the first N held-out prompts; 0: all (any estimator)")
    ada_exit: str = _setting(
        DEFAULTS.ada_exit, choices=ADA_EXITS, resume=True, scope=ROUNDS_ONLY,
        help="mode reinforce_ada: when a prompt leaves the sampling rounds: balanced (at least G/2 "
             "correct and G/2 incorrect responses drawn: Reinforce-Ada-balance, their script's) or "
             "positive_focused (a first correct one: Reinforce-Ada-pos)")
    ada_round_size: int = _setting(
        DEFAULTS.ada_round_size, check=(lambda v: v >= 1, "must be >= 1"), resume=True, scope=ROUNDS_ONLY,
        help="mode reinforce_ada: responses drawn per unresolved prompt in each round after the "
             "first (the first is the normal rollout's G; their round_repeat: 8)")
    ada_budget: int = _setting(
        DEFAULTS.ada_budget, check=(lambda v: v >= 1, "must be >= 1"), resume=True, scope=ROUNDS_ONLY,
        help="mode reinforce_ada: responses drawn per prompt at most, all rounds together (their "
             "max_rounds 4 x round_repeat 8: 32); a prompt still unresolved there keeps G of its pool")
    ada_threshold: float = _setting(
        DEFAULTS.ada_threshold, resume=True, scope=ADAPTIVE_ONLY,
        help="modes reinforce_ada and reinforce_ada_uniform: a response is correct for the exit rules, "
             "the kept group's balance and the pool's baseline when its reward exceeds this (their "
             "positive_threshold: 0.7)")
    ada_draw_factor: int = _setting(
        DEFAULTS.ada_draw_factor, check=(lambda v: v >= 1, "must be >= 1"), resume=True, scope=RANDOM_KEEP_ONLY,
        help="mode reinforce_ada_uniform (Reinforce-Ada's selection control): responses drawn per "
             "prompt, as a multiple of G, all of them (the normal rollout's G, then one round of the "
             "rest); G of them are kept at random (4: the budget control grpo_4xg's draw)")
    knapsack_max_n: int = _setting(
        DEFAULTS.knapsack_max_n, check=(lambda v: v >= 2, "must be >= 2"), resume=True, scope=ALLOCATION_ONLY,
        help="mode knapsack: the most responses one prompt may get in a step, of the step's "
             "--rollout.batch_size x --rollout.n_samples_per_prompt (Knapsack RL's max_n: 128 in its script); at "
             "least --rollout.n_samples_per_prompt")

    @classmethod
    def from_args(cls, args) -> "CopoSettings":
        return cls(**{f.name: getattr(args.copo, f.name) for f in fields(cls)})


#: The flag that prints COPO's flags alone (`copo_help`): the CLI answers it before it imports OpenRLHF.
COPO_HELP = "--copo.help"
#: The title of the `--copo.*` flags' section in --help.
COPO_GROUP = "COPO (openrlhf_copo)"


class _CopoHelpAction(argparse.Action):
    """`--copo.help` as a flag of any parser with COPO's flags (OpenRLHF's, a fork's): prints `copo_help` and exits,
    as `--help` prints the whole help. Sets nothing in the parsed args."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(copo_help(parser.prog), end="")
        parser.exit()


def add_copo_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--copo.*` flags, in OpenRLHF's dotted style, from `CopoSettings`, after `--copo.help`."""
    g = parser.add_argument_group(COPO_GROUP)
    g.add_argument(COPO_HELP, action=_CopoHelpAction,
                   help="show only COPO's flags (these, and the estimators) and exit, without OpenRLHF's")
    for f in fields(CopoSettings):
        m = f.metadata
        if m["kind"] is bool:
            g.add_argument(f"--copo.{f.name}", action="store_true", default=f.default,
                           help=f"{m['help']} (default: {'on' if f.default else 'off'})")
        else:
            choices = m["choices"]() if callable(m["choices"]) else m["choices"]
            g.add_argument(f"--copo.{f.name}", type=m["kind"], default=f.default, choices=choices,
                           help=f"{m['help']} (default: %(default)s)")


def resolve_mode(args) -> str:
    """The core's `mode` for this run: `--copo.mode`, else the estimator's name."""
    estimator = args.algo.advantage.estimator
    mode = args.copo.mode
    if mode is None:
        return estimator
    if estimator != "copo" and mode != estimator:
        raise CopoConfigError(
            f"--algo.advantage.estimator {estimator} conflicts with --copo.mode {mode}: "
            f"use --advantage_estimator copo --copo.mode {mode}"
        )
    return mode


def copo_settings(args) -> Dict[str, Any]:
    """Keyword arguments for `openrlhf_copo.core.copo_advantages` from the run's args (the mode resolved)."""
    settings = CopoSettings.from_args(args)
    kwargs = {f.name: getattr(settings, f.name) for f in fields(CopoSettings) if f.metadata["core"]}
    mode = resolve_mode(args)
    if kwargs["std"] is None:  # the mode's own convention
        kwargs["std"] = mode_info(mode).std
    return {**kwargs, "mode": mode}


def _inert_settings(mode: str, reward_coef: bool) -> set:
    """Settings the mode never reads: a resume must not be refused over them."""
    info = mode_info(mode)
    inert = set() if info.zero_control else {"zero_control"}
    if not info.blended:
        inert |= {"gamma", "rho", "entropy_base"}
        if not reward_coef:  # the entropy is read by the blend and by reward_coef (whose lambda H is base-free)
            inert.add("answer_buckets")
    if info.token_advantage is None:
        inert.add("zvp_alpha")
    inert |= {f.name for f in fields(CopoSettings) if not reads_scope(mode, f.metadata["scope"])}
    return inert


def resume_record(args) -> Dict[str, Any]:
    """What a resumed run must keep: the estimator and every setting that changes its training math (a setting
    its mode never reads, as zero control under go_only, is left out)."""
    settings = {**vars(CopoSettings.from_args(args)), **copo_settings(args)}  # the std resolved
    mode = settings["mode"]
    record = {f.name: settings[f.name] for f in fields(CopoSettings)
              if f.metadata["resume"] and f.name not in _inert_settings(mode, settings["reward_coef"])}
    if not record.get("mask_zero_advantage", True):
        del record["mask_zero_advantage"]  # recorded only when on: checkpoints saved before it existed still resume
    return {"estimator": args.algo.advantage.estimator, **record, "mode": mode}


def _given(args, scopes: Tuple[str, ...] = (), names: Tuple[str, ...] = ()) -> List[str]:
    """The `--copo.*` flags of ``scopes`` (or named in ``names``) that the command line set away from their defaults
    (the parser's default is the field's: a flag given its default value changes nothing), each as it was given."""
    given = []
    for f in fields(CopoSettings):
        value = getattr(args.copo, f.name)
        if (f.metadata["scope"] in scopes or f.name in names) and value != f.default:
            given.append(f"--copo.{f.name}" + ("" if f.metadata["kind"] is bool else f" {value}"))
    return given


#: The `--copo.*` flags that change OpenRLHF's held-out evaluation, which runs only with `--eval.dataset`.
EVAL_FLAGS = ("eval_before_train", "eval_after_train", "eval_greedy", "eval_sampled_prompts")


def eval_flag_problems(args) -> List[str]:
    """Each evaluation flag (`EVAL_FLAGS`) given without `--eval.dataset`, where no evaluation runs to change."""
    if getattr(args.eval, "dataset", None):
        return []
    return [f"{flag} changes the held-out evaluation, which runs only with --eval.dataset: add --eval.dataset, or "
            "drop it" for flag in _given(args, names=EVAL_FLAGS)]


def copo_problems(args) -> List[str]:
    """Every reason this configuration cannot run COPO (empty when it can), and, under any other estimator, every
    `--copo.*` flag it would ignore. One line each."""
    if not is_copo(args):
        estimator = args.algo.advantage.estimator
        return [f"{flag} is read by COPO's estimators only, and --advantage_estimator {estimator} is OpenRLHF's own, "
                f"which would ignore it: drop it, or run one of COPO's estimators (GRPO through COPO's path: "
                f"--advantage_estimator copo --copo.mode grpo)"
                for flag in _given(args, (COPO_ONLY, *DRAW_SCOPES))] + eval_flag_problems(args)
    problems = eval_flag_problems(args)
    try:
        info = mode_info(resolve_mode(args))
    except CopoConfigError as e:
        problems.append(str(e))
        info = None
    for scope, (reads, readers) in DRAW_SCOPES.items():
        if info is not None and not reads(info):
            named = ", ".join(m for m in modes() if reads(mode_info(m)))
            problems += [f"{flag} is read by {readers} ({named}) only, and mode {info.name} "
                         f"{how_it_samples(info.name)}, so it would ignore it: drop it, or run one of those modes"
                         for flag in _given(args, (scope,))]
    if info is not None and info.std_fixed and args.copo.std not in (None, info.std):
        problems.append(f"--copo.std {args.copo.std}: mode {info.name} is defined by std {info.std}; drop --copo.std")
    if info is not None and info.token_advantage is not None and getattr(args.actor, "entropy_coef", None) is None:
        problems.append(f"mode {info.name} needs the policy's token entropy from OpenRLHF's training forward, which "
                        "computes it only with an entropy coefficient: add --actor.entropy_coef 0 (computes it, adds "
                        "no entropy loss)")
    n = args.rollout.n_samples_per_prompt
    if info is not None and reads_scope(info.name, ROUNDS_ONLY) and args.copo.ada_budget < n:
        problems.append(f"--copo.ada_budget {args.copo.ada_budget} < --rollout.n_samples_per_prompt {n}: mode "
                        f"{info.name} draws the normal rollout's {n} responses per prompt first; give a budget >= {n}")
    if info is not None and info.budget_allocation and args.copo.knapsack_max_n < n:
        problems.append(f"--copo.knapsack_max_n {args.copo.knapsack_max_n} < --rollout.n_samples_per_prompt {n}: mode "
                        f"{info.name} spreads {n} responses per prompt on average over the step's prompts, which a "
                        f"cap below {n} cannot place; give a cap >= {n}")
    if n < 2:
        problems.append(f"--rollout.n_samples_per_prompt {n}: COPO needs at least 2 responses per prompt "
                        "(its local advantage and consistency entropy are per-prompt group statistics)")
    if args.algo.dynamic_filtering_enable:
        problems.append("--algo.dynamic_filtering_enable drops the all-correct / all-incorrect prompts that COPO's "
                        "global advantage learns from: run DAPO-style filtering with --advantage_estimator group_norm")
    if args.algo.kl.init_coef > 0 and not args.algo.kl.use_loss:
        problems.append(f"--algo.kl.init_coef {args.algo.kl.init_coef} without --algo.kl.use_loss folds a KL penalty "
                        "into the reward, where COPO would scale it by w_local: add --algo.kl.use_loss (the paper's "
                        "KL loss) or set --algo.kl.init_coef 0")
    generate = getattr(args.rollout, "vllm_generate_batch_size", None)
    if info is not None and info.budget_allocation and generate and generate != args.rollout.batch_size:
        problems.append(f"--rollout.vllm_generate_batch_size {generate} != --rollout.batch_size "
                        f"{args.rollout.batch_size}: mode {info.name} allocates one step's responses over the prompts "
                        f"drawn together, and OpenRLHF would cut a rollout of another size into steps of "
                        f"{args.rollout.batch_size} x n responses across its groups: leave it unset")
    if generate and generate < args.rollout.batch_size:
        problems.append(f"--rollout.vllm_generate_batch_size {generate} < --rollout.batch_size {args.rollout.batch_size}: "
                        f"OpenRLHF then trains each step on {generate} prompts, so COPO's global advantage would span "
                        f"{generate} prompts, not {args.rollout.batch_size}: leave it unset or set it to "
                        f"{args.rollout.batch_size}")
    if args.copo.mask_zero_advantage and args.train.batch_size != args.rollout.batch_size * n:
        # The mask changes the denominator of the optimizer step it falls in: with several steps per rollout batch, a
        # step drawn from dead groups alone would divide by zero tokens.
        problems.append(f"--copo.mask_zero_advantage needs one optimizer step per rollout batch: --train.batch_size "
                        f"{args.train.batch_size} != --rollout.batch_size {args.rollout.batch_size} x "
                        f"--rollout.n_samples_per_prompt {n} = {args.rollout.batch_size * n}")
    remote = args.reward.remote_url
    if not remote:
        problems.append("COPO needs each response's answer id from a reward function: set --reward.remote_url "
                        "openrlhf_copo/rewards/math_reward.py (or a function that returns "
                        "extra_logs['copo_answer_id']), or --train.agent_func_path with an agent whose step returns it")
    if args.train.async_enable:
        problems.append("--train.async_enable is not supported with COPO yet: its rollout batches are filled from a "
                        "queue across policy versions, so the batch-level global advantage is not tested there")
    for f in fields(CopoSettings):
        check, value = f.metadata["check"], getattr(args.copo, f.name)
        if check is not None and not check[0](value):
            problems.append(f"--copo.{f.name} {value} {check[1]}")
    return problems


def _partitions(n: int, largest: Optional[int] = None):
    """The integer partitions of n (the answer patterns of a group of n responses: [2, 1] = two agree, one differs)."""
    largest = n if largest is None else largest
    if n == 0:
        yield []
        return
    for k in range(min(n, largest), 0, -1):
        for rest in _partitions(n - k, k):
            yield [k] + rest


def attainable_blends(G: int, gamma: float, rho: float, base: float,
                      patterns: Optional[List[List[int]]] = None) -> List[tuple]:
    """(pattern, H, w_local) for every answer pattern a group of G responses can show, from one answer to G (or for
    ``patterns`` alone), computed by the advantage step's own functions (`core.consistency_entropy`,
    `core.blend_weights`) on a group of that pattern: the very H and sigmoid weight a group of that split gets."""
    import torch

    patterns = list(_partitions(G)) if patterns is None else [list(p) for p in patterns]
    out = []
    for start in range(0, len(patterns), 1024):  # G = 32 has 8349 patterns: a [chunk, G, G] comparison at a time
        chunk = patterns[start:start + 1024]
        answer_ids = torch.tensor([[a for a, count in enumerate(p) for _ in range(count)] for p in chunk])
        h = consistency_entropy(answer_ids, base=base)
        w = blend_weights(h, gamma, rho)
        out += [(p, hi + 0.0, wi) for p, hi, wi in zip(chunk, h.tolist(), w.tolist())]  # + 0.0: -0.0 -> 0.0
    return out


def copo_regime(args) -> Optional[str]:
    """The blending regime of a blended mode's run, one line printed at start: for the run's G, gamma and rho, which
    answer splits keep the local term (w_local >= 0.05) and which train on the global term alone. None for modes
    whose weights do not read the entropy.

    Why it matters: a split is the answer pattern of a group, and it is what decides w_local. At G = 4 with the
    paper's gamma 20 and rho 1.5, 3+1 and 2+2 get w_local 1e-6 and 4.5e-5: a 3-right / 1-wrong group then trains
    on the global term alone, which gives its wrong answer the prompt's (usually positive) advantage."""
    if not is_copo(args) or not mode_info(resolve_mode(args)).blended:
        return None
    G, c = args.rollout.n_samples_per_prompt, args.copo
    patterns = [p for p in attainable_blends(G, c.gamma, c.rho, c.entropy_base) if len(p[0]) > 1]

    def shown(group):
        return ", ".join(f"{'+'.join(map(str, p))} (H {h:.3g}, w_local {w:.2g})" for p, h, w in group) or "none"

    keep = [p for p in patterns if p[2] >= 0.05]
    alone = [p for p in patterns if p[2] < 0.05]
    return (f"COPO regime at G {G}, gamma {c.gamma:g}, rho {c.rho:g}: answer splits that keep the local term: "
            f"{shown(keep)}; that train on the global term alone (w_local < 0.05): {shown(alone)}; a group with "
            f"one answer has no local signal. Logged per step: {MIXED_LOCAL_LOST} (share of the step's groups whose "
            f"rewards differ but whose local term is gone)")


def copo_warnings(args) -> List[str]:
    """Settings COPO runs with but that make it something else, and, under OpenRLHF's own estimators, what a user of
    this package might take for COPO's; one line each, printed at start."""
    if not is_copo(args):
        estimator = args.algo.advantage.estimator
        warnings = [f"{flag} logs COPO's two loss terms; --advantage_estimator {estimator} (OpenRLHF's own) has none, "
                    "so it logs nothing" for flag in _given(args, (COPO_LOGS,))]
        if estimator in modes():  # a COPO mode of the same name, not an estimator of ours (dr_grpo)
            warnings.append(f"--advantage_estimator {estimator} is OpenRLHF's own estimator; openrlhf_copo's mode of "
                            f"that name is --advantage_estimator copo --copo.mode {estimator}")
        return warnings
    warnings = []
    clip = tuple(getattr(args.reward, "clip_range", (-10, 10)) or (-10, 10))
    if clip != (-10, 10):
        warnings.append(f"--reward.clip_range {clip[0]:g} {clip[1]:g} is not applied under COPO: its advantages are "
                        "standardized scores (|A| <= sqrt(n - 1)); clip the rewards in your reward function instead")
    info = mode_info(resolve_mode(args))
    if info.clip is not None:
        clip = tuple(args.actor.eps_clip_low_high or (args.actor.eps_clip, args.actor.eps_clip))
        if tuple(round(v, 6) for v in clip) != info.clip:
            warnings.append(f"mode {info.name}: its paper clips the ratio to [1 - {info.clip[0]:g}, 1 + {info.clip[1]:g}], "
                            f"this run to [1 - {clip[0]:g}, 1 + {clip[1]:g}]: add --actor.eps_clip_low_high "
                            f"{info.clip[0]:g} {info.clip[1]:g} to run it as published")
    if not info.blended:
        return warnings
    G, c = args.rollout.n_samples_per_prompt, args.copo
    patterns = attainable_blends(G, c.gamma, c.rho, c.entropy_base)
    mixed = [p for p in patterns if len(p[0]) > 1]
    local = [p for p in mixed if p[2] >= 0.05]
    repeats = [p for p in mixed if len(p[0]) < G]  # at least two responses agree
    if local and any(p[2] >= 0.05 for p in repeats):
        return warnings
    h_max = math.log(G, c.entropy_base)  # all G answers different
    shown = ", ".join(f"{'+'.join(map(str, p))}: H {h:.3g} w_local {w:.2g}" for p, h, w in patterns)
    if not local:
        what = (f"no answer pattern reaches w_local 0.05 (H is at most {h_max:.3g} = log{c.entropy_base:g} {G}, "
                f"rho is {c.rho:g}): COPO trains on the global term almost alone (GO-Only)")
    else:
        what = (f"only the all-different pattern (H {h_max:.3g}) reaches w_local 0.05: {len(local)} of {len(mixed)} "
                f"split patterns blend, and every group that repeats an answer trains on the global term alone "
                f"(GO-Only there)")
    warnings.append(f"--rollout.n_samples_per_prompt {G} with --copo.rho {c.rho:g}, --copo.gamma {c.gamma:g}: {what}; "
                    f"patterns [{shown}]; use more samples per prompt or a lower --copo.rho")
    return warnings


RESUME_SETTINGS_FILE = "copo_settings.json"


def complete_checkpoint(actor_dir: str) -> bool:
    """DeepSpeed writes `latest` (naming the tag) only after a checkpoint is fully saved."""
    import os

    latest = os.path.join(actor_dir, "latest")
    if not os.path.isfile(latest):
        return False
    with open(latest) as f:
        return os.path.isdir(os.path.join(actor_dir, f.read().strip()))


def check_resume_settings(args, write: bool = True) -> None:
    """A run resumed from a checkpoint goes on with the COPO settings it was saved with.

    Next to OpenRLHF's checkpoint (`--ckpt.path`) we keep the run's estimator and COPO settings;
    resuming (`--ckpt.load_enable` with a saved `_actor` checkpoint) with different ones is refused.
    """
    import json
    import os

    if not (args.ckpt.load_enable or args.ckpt.save_steps > 0):
        return  # no checkpoint is saved or loaded
    path = os.path.join(args.ckpt.path, RESUME_SETTINGS_FILE)
    current = resume_record(args) if is_copo(args) else {"estimator": args.algo.advantage.estimator}
    actor_dir = os.path.join(args.ckpt.path, "_actor")
    resuming = args.ckpt.load_enable and os.path.isdir(actor_dir)
    if resuming and write and not complete_checkpoint(actor_dir):
        # A run killed while writing its first checkpoint leaves `_actor` without DeepSpeed's `latest`
        # file; OpenRLHF would try to resume from it and fail. Keep it, out of the way, and start fresh.
        import sys
        import time

        aside = f"{actor_dir}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(actor_dir, aside)
        print(f"openrlhf_copo: {actor_dir} holds no complete checkpoint (no 'latest'): moved to {aside}; "
              "starting from step 0", file=sys.stderr)
        resuming = False
    if resuming and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if is_copo(args):
            for f in fields(CopoSettings):
                if f.name not in current:  # a setting this mode never reads (older records kept it): not compared
                    saved.pop(f.name, None)
                elif f.metadata["resume"]:  # a setting added since that checkpoint was saved: it ran with the default
                    saved.setdefault(f.name, f.default)
        if saved != current:
            diff = ", ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in sorted(set(saved) | set(current))
                             if saved.get(k) != current.get(k))
            raise CopoConfigError(f"{args.ckpt.path} was saved with other COPO settings ({diff}): resume with the "
                                  "same flags, or start a new --ckpt.path")
    elif write:
        write_atomic(path, json.dumps(current, indent=1))


def estimator_action(parser: argparse.ArgumentParser) -> Optional[argparse.Action]:
    """OpenRLHF's `--algo.advantage.estimator` action of ``parser``, if it has one."""
    return parser._option_string_actions.get("--algo.advantage.estimator")


def _estimators_help(estimators) -> str:
    return "; COPO: " + ", ".join(estimators) + " (openrlhf_copo)"


def copo_help(prog: str) -> str:
    """`--copo.help`: COPO's flags alone, each with its help and default as --help shows it (`add_copo_arguments`,
    the same code), and COPO's estimators; a few dozen lines instead of --help's ~680, and without importing
    OpenRLHF (the CLI answers it first)."""
    p = argparse.ArgumentParser(
        prog=prog, add_help=False, usage=f"%(prog)s --advantage_estimator ESTIMATOR [--copo.* flags] "
                                         "[OpenRLHF's train_ppo_ray flags]",
        description="COPO's flags of OpenRLHF's train_ppo_ray. Every other flag is OpenRLHF's, with its meaning "
                    "(--help lists them all). On the CPU path --ds.param_dtype also takes fp32.")
    g = p.add_argument_group("the estimator (OpenRLHF's flag, with COPO's estimators)")
    g.add_argument("--advantage_estimator", "--algo.advantage.estimator", metavar="ESTIMATOR",
                   help="OpenRLHF's estimators (gae, group_norm, ...: --help lists them)"
                        + _estimators_help(copo_estimators()))
    add_copo_arguments(p)
    return p.format_help()


def extend_openrlhf_parser(parser: argparse.ArgumentParser) -> None:
    """Make COPO part of OpenRLHF's parser: estimator choices, the short alias, the COPO flags, listed first in --help
    (after a usage line and a description that name `--copo.help`; OpenRLHF's own flags follow as they are)."""
    action = estimator_action(parser)
    if action is None:
        raise RuntimeError("openrlhf's train_ppo_ray parser has no --algo.advantage.estimator: the CLI moved")
    if "copo" in (action.choices or ()):
        return
    estimators = copo_estimators()
    action.choices = list(action.choices) + [e for e in estimators if e not in action.choices]
    action.help = (action.help or "") + _estimators_help(estimators)
    action.metavar = "ESTIMATOR"  # the choices are listed in the help text, not three times over
    # `--advantage_estimator` (OpenRLHF's pre-0.10.2 spelling) and `--advantage-estimator` are
    # the same action, so they accept every estimator and show together in --help.
    for alias in ("--advantage_estimator", "--advantage-estimator"):
        action.option_strings.append(alias)
        parser._option_string_actions[alias] = action
    add_copo_arguments(parser)
    # --help's first screen: argparse's generated usage lists all ~200 flags (190 lines), and COPO's section would
    # come last, after OpenRLHF's ~500 lines. So a short usage, a description naming --copo.help, COPO's section first.
    parser.usage = (f"%(prog)s [-h] [{COPO_HELP}] [--advantage_estimator ESTIMATOR] [--copo.* flags] "
                    "[OpenRLHF's train_ppo_ray flags]")
    parser.description = ("OpenRLHF's train_ppo_ray with COPO's advantage estimators (openrlhf_copo). COPO's flags "
                          f"come first below; {COPO_HELP} lists them alone. Every other flag is OpenRLHF's, with its "
                          "meaning." + (f" {parser.description}" if parser.description else ""))
    copo_group = next(g for g in parser._action_groups if g.title == COPO_GROUP)
    parser._action_groups.remove(copo_group)
    parser._action_groups.insert(parser._action_groups.index(parser._optionals), copo_group)
