"""COPO's command-line flags and the settings OpenRLHF must not combine with them.

The flags are added to OpenRLHF's own `train_ppo_ray` parser (see `openrlhf_copo.cli`), so they
show in `--help` and arrive hierarchized as `args.copo.*` in every Ray actor, next to OpenRLHF's.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from openrlhf_copo.core import MODES, STDS, ZERO_CONTROLS
from openrlhf_copo.openrlhf_ext.cpu import extend_parser as cpu_extend_parser

#: `--copo.incorrect`: a response is incorrect when its answer is not the label's, or when its reward is 0.
INCORRECT_RULES = ("answer", "reward")

#: Values of `--algo.advantage.estimator` (alias `--advantage_estimator`) that select COPO: every mode of the
#: core's registry but plain GRPO (that one is `--advantage_estimator copo --copo.mode grpo`). `copo` follows
#: `--copo.mode` (default `copo`); the others name an ablation of the paper.
COPO_ESTIMATORS = tuple(m for m in MODES if m != "grpo")


class CopoConfigError(ValueError):
    """A setting that would break COPO; the message is one line naming the flag."""


def is_copo(args) -> bool:
    """True when the run's advantage estimator is one of COPO's."""
    return getattr(getattr(getattr(args, "algo", None), "advantage", None), "estimator", None) in COPO_ESTIMATORS


def _setting(default, help: str, *, choices=None, check=None, core=False, resume=False, kind=None):
    """One `--copo.<name>` setting: ``check`` is (predicate, what the value must be); ``core``: a keyword of
    `core.copo_advantages`; ``resume``: a resumed run must keep it (it changes the training math)."""
    return field(default=default, metadata=dict(help=help, choices=choices, check=check, core=core,
                                                resume=resume or core, kind=kind or type(default)))


@dataclass(frozen=True)
class CopoSettings:
    """Every `--copo.*` setting, declared once: its flag, default (the paper's best), choices, help, the
    check that refuses a bad value, and whether a resumed run must keep it all come from these fields."""

    gamma: float = _setting(20.0, "sharpness of w_local = sigmoid(gamma * (H - rho)) (paper's best: 20; released "
                                  "script: 5)", core=True)
    rho: float = _setting(1.5, "entropy threshold rho of the blend (paper's best: 1.5; released script: 1)", core=True)
    mode: Optional[str] = _setting(None, "advantage mode; default: the estimator's name (copo -> copo). 'grpo' runs "
                                         "plain GRPO through the same code path, as a baseline",
                                   choices=MODES, core=True, kind=str)
    zero_control: str = _setting("prompt", "mode copo: w_local=0 for all-incorrect prompts (prompt, the paper), for "
                                           "every incorrect response (response, the authors' released code), or never "
                                           "(none)", choices=ZERO_CONTROLS, core=True)
    incorrect: str = _setting("answer", "what makes a response incorrect for zero control and the selective "
                                        "ablations: answer (its final answer is not the label's, the reward file's "
                                        "copo_correct; the paper) or reward (its reward is 0; the released code). They "
                                        "differ under the 0/0.1/1 format reward: with reward, a formatted but wrong "
                                        "answer keeps the 0-vs-0.1 local signal", choices=INCORRECT_RULES, resume=True)
    std: str = _setting("population", "std in both advantages: population (paper's worked example) or unbiased "
                                      "(released code)", choices=STDS, core=True)
    eps: float = _setting(1e-6, "added to the std in both advantages", check=(lambda v: v >= 0, "must be >= 0"),
                          core=True)
    entropy_base: float = _setting(2.0, "log base of the consistency entropy (2 reproduces the paper's appendix)",
                                   check=(lambda v: v > 0 and v != 1, "must be positive and != 1"), core=True)
    max_verify_failed: float = _setting(0.5, "stop the run when more than this share of a rollout step's answer "
                                             "checks failed (math-verify timed out, crashed, or cannot start on the "
                                             "reward node), instead of training on their zero rewards",
                                        check=(lambda v: 0 <= v <= 1, "must be a share in [0, 1]"))
    metrics_file: Optional[str] = _setting(None, "also append every step's logged metrics, and every evaluation's "
                                                 "(rows with \"eval\": 1), to this JSON-lines file (any estimator)",
                                           kind=str)
    eval_before_train: bool = _setting(False, "with --eval.dataset: also evaluate once before the first step "
                                              "(step 0; not when resuming), as verl's val_before_train, so a run "
                                              "reports its held-out gain (any estimator)")

    @classmethod
    def from_args(cls, args) -> "CopoSettings":
        return cls(**{f.name: getattr(args.copo, f.name) for f in fields(cls)})


def add_copo_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--copo.*` flags, in OpenRLHF's dotted style, from `CopoSettings`."""
    g = parser.add_argument_group("COPO (openrlhf_copo)")
    for f in fields(CopoSettings):
        m = f.metadata
        if m["kind"] is bool:
            g.add_argument(f"--copo.{f.name}", action="store_true", default=f.default, help=m["help"])
        else:
            g.add_argument(f"--copo.{f.name}", type=m["kind"], default=f.default, choices=m["choices"], help=m["help"])


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
    return {**kwargs, "mode": resolve_mode(args)}


def resume_record(args) -> Dict[str, Any]:
    """What a resumed run must keep: the estimator and every setting that changes the training math."""
    settings = CopoSettings.from_args(args)
    record = {f.name: getattr(settings, f.name) for f in fields(CopoSettings) if f.metadata["resume"]}
    return {"estimator": args.algo.advantage.estimator, **record, "mode": resolve_mode(args)}


def copo_problems(args) -> List[str]:
    """Every reason this configuration cannot run COPO (empty when it can). One line each."""
    if not is_copo(args):
        return []
    problems = []
    try:
        resolve_mode(args)
    except CopoConfigError as e:
        problems.append(str(e))
    n = args.rollout.n_samples_per_prompt
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
    if generate and generate < args.rollout.batch_size:
        problems.append(f"--rollout.vllm_generate_batch_size {generate} < --rollout.batch_size {args.rollout.batch_size}: "
                        f"OpenRLHF then trains each step on {generate} prompts, so COPO's global advantage would span "
                        f"{generate} prompts, not {args.rollout.batch_size}: leave it unset or set it to "
                        f"{args.rollout.batch_size}")
    remote = args.reward.remote_url
    if not remote:
        problems.append("COPO needs each response's answer id from a reward function: set --reward.remote_url "
                        "openrlhf_copo/rewards/math_reward.py (or a function that returns "
                        "extra_logs['copo_answer_id'])")
    if args.train.async_enable:
        problems.append("--train.async_enable is not supported with COPO yet: its rollout batches are filled from a "
                        "queue across policy versions, so the batch-level global advantage is not tested there")
    for f in fields(CopoSettings):
        check, value = f.metadata["check"], getattr(args.copo, f.name)
        if check is not None and not check[0](value):
            problems.append(f"--copo.{f.name} {value} {check[1]}")
    return problems


def copo_warnings(args) -> List[str]:
    """Settings COPO runs with but that make it something else; one line each, printed at start."""
    if not is_copo(args) or resolve_mode(args) not in ("copo", "go_blended", "copo_selective"):
        return []
    G, c = args.rollout.n_samples_per_prompt, args.copo
    h_max = math.log(G, c.entropy_base)  # all G answers different
    if h_max > c.rho:
        return []
    w_max = 1.0 / (1.0 + math.exp(-c.gamma * (h_max - c.rho)))
    return [f"--rollout.n_samples_per_prompt {G} gives a consistency entropy of at most {h_max:.3g} "
            f"(log{c.entropy_base:g} {G}), not above --copo.rho {c.rho:g}: w_local never exceeds {w_max:.2g} and COPO "
            f"trains on the global term almost alone (GO-Only); use more samples per prompt or a lower --copo.rho"]


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
        if is_copo(args):  # a setting added since that checkpoint was saved: it ran with the default
            for f in fields(CopoSettings):
                if f.metadata["resume"]:
                    saved.setdefault(f.name, f.default)
        if saved != current:
            diff = ", ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in sorted(set(saved) | set(current))
                             if saved.get(k) != current.get(k))
            raise CopoConfigError(f"{args.ckpt.path} was saved with other COPO settings ({diff}): resume with the "
                                  "same flags, or start a new --ckpt.path")
    elif write:
        os.makedirs(args.ckpt.path, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(current, f, indent=1)
        os.replace(tmp, path)


def estimator_action(parser: argparse.ArgumentParser) -> Optional[argparse.Action]:
    """OpenRLHF's `--algo.advantage.estimator` action of ``parser``, if it has one."""
    return parser._option_string_actions.get("--algo.advantage.estimator")


def extend_openrlhf_parser(parser: argparse.ArgumentParser) -> None:
    """Make COPO part of OpenRLHF's parser: estimator choices, the short alias, the COPO flags."""
    action = estimator_action(parser)
    if action is None:
        raise RuntimeError("openrlhf's train_ppo_ray parser has no --algo.advantage.estimator: the CLI moved")
    if "copo" in (action.choices or ()):
        return
    action.choices = list(action.choices) + [e for e in COPO_ESTIMATORS if e not in action.choices]
    action.help = (action.help or "") + "; COPO: " + ", ".join(COPO_ESTIMATORS) + " (openrlhf_copo)"
    action.metavar = "ESTIMATOR"  # the choices are listed in the help text, not three times over
    # `--advantage_estimator` (OpenRLHF's pre-0.10.2 spelling) and `--advantage-estimator` are
    # the same action, so they accept every estimator and show together in --help.
    for alias in ("--advantage_estimator", "--advantage-estimator"):
        action.option_strings.append(alias)
        parser._option_string_actions[alias] = action
    add_copo_arguments(parser)
    cpu_extend_parser(parser)
