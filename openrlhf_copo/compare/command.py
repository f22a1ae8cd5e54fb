"""Each run's train_ppo_ray command line (`run_argv`), and the checks of the flags after -- (`check_extra`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import List, Sequence

from openrlhf_copo.compare.methods import METHODS, PAIRED, SAMPLE_FACTOR, STEP_FACTOR, samples_per_prompt
from openrlhf_copo.compare.prompts import prompt_plan
from openrlhf_copo.compare.setting import STEP0_FLAG, Setting, run_dir
from openrlhf_copo.compare.train_flags import FlagError, dest_of, given, unknown_flags_line


def run_argv(setting: Setting, method: str, seed: int, directory: Path, train: Path, step0: bool,
             episodes: int = 1) -> List[str]:
    """The train_ppo_ray command line of one run: the method's flags, the paired flags, the tool's (`TOOL_FLAGS`), then
    ``setting.extra`` (which wins over what precedes it), then a step control's own (`step_control_flags`), then the
    seed, then the step-0 evaluation's flag when ``step0`` (`sweep`); given after --, that flag is left out, since
    ``step0`` decides it. G is the method's (`samples_per_prompt`), and the train batch P x G: one optimizer step per
    rollout batch for every method. ``setting`` is the comparison's; ``train`` and ``episodes`` are the run's own
    (`prompts.train_file` of `methods.run_setting`)."""
    P, G = setting.prompts_per_step, samples_per_prompt(setting, method)
    scratch = directory / "scratch"  # checkpoints, the final model: kept until the run finished
    base = [
        "--actor.model_name_or_path", setting.start or setting.model,
        "--reward.remote_url", str(setting.reward),
        "--data.prompt_dataset", str(train), "--data.input_key", setting.input_key,
        "--data.label_key", setting.label_key, "--data.apply_chat_template",
        "--rollout.batch_size", str(P), "--rollout.n_samples_per_prompt", str(G), "--train.batch_size", str(P * G),
        "--eval.dataset", str(setting.test), "--eval.steps", str(setting.eval_every), "--copo.eval_greedy",
        "--actor.adam.lr", str(setting.lr), "--actor.lr_scheduler", "constant", "--actor.lr_warmup_ratio", "0",
        "--algo.kl.use_loss", "--algo.kl.init_coef", "0",
        "--train.num_episodes", str(episodes), "--train.max_epochs", "1",
        *checkpoint_flags(setting.save_every), "--ckpt.path", str(scratch / "ckpt"),
        "--ckpt.output_dir", str(scratch / "model"),
        "--logger.logging_steps", "1", "--copo.metrics_file", str(directory / "metrics.jsonl"),
        "--copo.device", setting.device,
    ]
    extra = [a for a in setting.extra if a != STEP0_FLAG]
    return (METHODS[method] + PAIRED + base + extra + step_control_flags(setting, method, episodes)
            + ["--train.seed", str(seed)] + ([STEP0_FLAG] if step0 else []))


def step_control_flags(setting: Setting, method: str, episodes: int) -> List[str]:
    """What a run of a `STEP_FACTOR` method sets after the flags after --: its episodes (k x the steps over the
    prompts' file) and its evaluation every --steps steps (`methods.run_setting`). After them, because those flags
    repeat the comparison's own values where a preset gives them (the CPU presets pass --train.num_episodes 1),
    which would cut the control to the comparison's steps. [] for any other method."""
    if method not in STEP_FACTOR:
        return []
    return ["--train.num_episodes", str(episodes), "--eval.steps", str(setting.steps)]


#: The train_ppo_ray flags that the tool sets from its own flags (`run_argv`), with the tool's flag that sets each:
#: given after --, one would override what the report records. (The tool's other settings, such as no KL or one
#: optimizer step per rollout batch, are defaults that the flags after -- may change.)
TOOL_FLAGS = {"--actor.model_name_or_path": "--model/--start_checkpoint", "--reward.remote_url": "--reward",
              "--data.prompt_dataset": "--train_data", "--data.input_key": "--input_key",
              "--data.label_key": "--label_key", "--rollout.batch_size": "--prompts_per_step",
              "--rollout.n_samples_per_prompt": "--samples_per_prompt", "--eval.dataset": "--eval_data",
              "--eval.steps": "--eval_every", "--actor.adam.lr": "--lr", "--train.num_episodes": "--steps",
              "--train.seed": "--seeds", "--copo.device": "--device", "--copo.metrics_file": "--out",
              "--data.max_samples": "--steps x --prompts_per_step (the prompt file the tool writes)",
              "--ckpt.save_steps": "--save_every", "--ckpt.path": "--out (each run's scratch/ckpt)",
              "--ckpt.output_dir": "--out (each run's scratch/model)"}


def checkpoint_flags(save_every: int) -> List[str]:
    """OpenRLHF's checkpoint flags of a run: a checkpoint every ``save_every`` steps (none at 0), the two newest kept
    (a run killed while writing one still has the one before), no best-metric checkpoints (a comparison keeps no
    model), and loaded when there is one (`--ckpt.load_enable`: a rerun goes on from it, `run_one`)."""
    every = ["--ckpt.save_steps", str(save_every), "--ckpt.max_num", "2"] if save_every > 0 else \
        ["--ckpt.save_steps", "-1"]
    return every + ["--ckpt.best_metric_key", "none", "--ckpt.load_enable"]


def extra_conflicts(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path) -> List[str]:
    """The flags after -- (``setting.extra``) that would change what a method, the paired flags (`PAIRED`) or the
    tool's own flags (`TOOL_FLAGS`) set in some run, one line each naming both: `copo_selective_rho04 ... --
    --copo.rho 1.5` would train at rho 1.5 and be reported as rho 0.4. A flag that one of the methods sets is refused
    when it would change any method's run (given after --, it reaches them all); one that the tool sets is kept when
    it has the very value the tool gives it (the CPU presets repeat --train.num_episodes 1). Read by train_ppo_ray's
    own parser (`train_flags.given`): a flag it does not know (misspelt, or abbreviated: it takes whole flags only)
    is refused, named."""
    if not setting.extra:
        return []
    try:
        extra, unknown = given(setting.extra)
    except FlagError as e:
        return [f"train_ppo_ray's parser: {e}"]
    if unknown:
        return [unknown_flags_line(unknown)]
    plan = prompt_plan(setting, out)
    plain = replace(setting, extra=[])
    by_method = {m: given(METHODS[m])[0] for m in methods}
    paired = given(PAIRED)[0]
    tool = {dest_of(flag): flag for flag in TOOL_FLAGS}
    found = []
    for method in methods:
        for seed in seeds:
            own, _ = given(run_argv(plain, method, seed, run_dir(out, method, seed), Path(plan["file"]), False,
                                    plan["episodes"]))
            after = {dest_of(f) for f in step_control_flags(plain, method, 1)[::2]}
            for dest, flag in extra.items():
                if dest in own and own[dest].value == flag.value:
                    continue  # the value this run has anyway
                if dest in after:
                    continue  # a step control sets it after the flags after --
                owner = method if dest in by_method[method] else next((m for m in methods if dest in by_method[m]),
                                                                     None)
                if owner and owner != method:
                    found.append(f"{flag.written} is method {owner}'s flag ({by_method[owner][dest].written}): "
                                 f"after -- it would reach the {method} runs too")
                elif owner or dest in paired:
                    found.append(f"{flag.written} would override {'method ' + owner if owner else 'the paired flags'}"
                                 f", which set{'s' if owner else ''} {own[dest].written}")
                elif dest in tool:
                    found.append(f"{flag.written} would override the tool's {TOOL_FLAGS[tool[dest]]}"
                                 + (f", which sets {own[dest].written}" if dest in own else ""))
                elif dest == "train.batch_size" and method in SAMPLE_FACTOR:
                    found.append(f"{flag.written} would change method {method}'s optimizer steps per rollout batch: "
                                 f"it trains on {SAMPLE_FACTOR[method]} x G responses per prompt in one step "
                                 f"({own[dest].written})")
    return list(dict.fromkeys(found))


def check_extra(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path) -> None:
    """Refuses, before any run starts, flags after -- that would redefine a method or a setting (`extra_conflicts`)."""
    found = extra_conflicts(setting, methods, seeds, out)
    if found:
        raise SystemExit(f"the flags after --: {'; '.join(found)}. Drop them, or use the tool's own flag or a method "
                         "that sets it (--methods)")
