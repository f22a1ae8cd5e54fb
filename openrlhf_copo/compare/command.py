"""Each run's train_ppo_ray command line (`run_argv`), and the checks of the flags after -- (`check_extra`)."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from openrlhf_copo.compare.methods import METHODS, PAIRED, SAMPLE_FACTOR, samples_per_prompt
from openrlhf_copo.compare.prompts import prompt_plan
from openrlhf_copo.compare.setting import STEP0_FLAG, Setting, run_dir


def run_argv(setting: Setting, method: str, seed: int, directory: Path, train: Path, step0: bool,
             episodes: int = 1) -> List[str]:
    """The train_ppo_ray command line of one run: the method's flags, the paired flags, the tool's (`TOOL_FLAGS`), then
    ``setting.extra`` (which wins over what precedes it), then the seed, then the step-0 evaluation's flag when
    ``step0`` (`sweep`); given after --, that flag is left out, since ``step0`` decides it. G is the method's
    (`samples_per_prompt`), and the train batch P x G: one optimizer step per rollout batch for every method."""
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
    return METHODS[method] + PAIRED + base + extra + ["--train.seed", str(seed)] + ([STEP0_FLAG] if step0 else [])



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



@functools.lru_cache(maxsize=1)
def _openrlhf_parser():
    """train_ppo_ray's parser with COPO's flags (`driver.openrlhf_parser_namespace`, as `driver.openrlhf_args` builds
    it), to read a command line as train_ppo_ray will: aliases (--advantage_estimator), --flag=value; abbreviations
    too (argparse's default, which train_ppo_ray turns off), so that an abbreviated flag that would redefine a
    method is named before any run rather than refused by the run."""
    from openrlhf_copo.openrlhf_ext import driver

    _, namespace, _ = driver.openrlhf_parser_namespace()
    return namespace["parser"]



def _flags(argv: Sequence[str]) -> Dict[str, Tuple[str, list]]:
    """{dest: (the flag and its values as written, the values as train_ppo_ray types them)} of a train_ppo_ray command
    line, the last occurrence winning as in argparse: `--flag=value` and `--flag v1 v2` alike, an alias or an
    unambiguous abbreviation under its dest. A flag train_ppo_ray does not know is left out (train_ppo_ray refuses
    it)."""
    parser = _openrlhf_parser()
    known = parser._option_string_actions
    found: Dict[str, Tuple[str, list]] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token == "--":
            continue
        name, eq, value = token.partition("=")
        values = [value] if eq else []
        while not eq and i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        prefixed = {id(a): a for s, a in known.items() if s.startswith(name)} if parser.allow_abbrev else {}
        action = known.get(name) or (next(iter(prefixed.values())) if len(prefixed) == 1 else None)
        if action is not None:
            found[action.dest] = (token if eq else " ".join([name, *values]),
                                  [action.type(v) if callable(action.type) else v for v in values])
    return found



def extra_conflicts(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path) -> List[str]:
    """The flags after -- (``setting.extra``) that would change what a method, the paired flags (`PAIRED`) or the
    tool's own flags (`TOOL_FLAGS`) set in some run, one line each naming both: `copo_selective_rho04 ... --
    --copo.rho 1.5` would train at rho 1.5 and be reported as rho 0.4. A flag that one of the methods sets is refused
    when it would change any method's run (given after --, it reaches them all); one that the tool sets is kept when
    it has the very value the tool gives it (the CPU presets repeat --train.num_episodes 1)."""
    if not setting.extra:
        return []
    extra = _flags(setting.extra)
    plan = prompt_plan(setting, out)
    plain = replace(setting, extra=[])
    by_method = {m: _flags(METHODS[m]) for m in methods}
    paired, tool = _flags(PAIRED), _flags(list(TOOL_FLAGS))
    found = []
    for method in methods:
        for seed in seeds:
            own = _flags(run_argv(plain, method, seed, run_dir(out, method, seed), Path(plan["file"]), False,
                                  plan["episodes"]))
            for dest, flag in extra.items():
                if dest in own and own[dest][1] == flag[1]:
                    continue  # the value this run has anyway
                owner = method if dest in by_method[method] else next((m for m in methods if dest in by_method[m]),
                                                                     None)
                if owner and owner != method:
                    found.append(f"{flag[0]} is method {owner}'s flag ({by_method[owner][dest][0]}): "
                                 f"after -- it would reach the {method} runs too")
                elif owner or dest in paired:
                    found.append(f"{flag[0]} would override {'method ' + owner if owner else 'the paired flags'}"
                                 f", which set{'s' if owner else ''} {own[dest][0]}")
                elif dest in tool:
                    found.append(f"{flag[0]} would override the tool's {TOOL_FLAGS[tool[dest][0]]}"
                                 + (f", which sets {own[dest][0]}" if dest in own else ""))
                elif dest == "train.batch_size" and method in SAMPLE_FACTOR:
                    found.append(f"{flag[0]} would change method {method}'s optimizer steps per rollout batch: it "
                                 f"trains on {SAMPLE_FACTOR[method]} x G responses per prompt in one step "
                                 f"({own[dest][0]})")
    return list(dict.fromkeys(found))



def check_extra(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path) -> None:
    """Refuses, before any run starts, flags after -- that would redefine a method or a setting (`extra_conflicts`)."""
    found = extra_conflicts(setting, methods, seeds, out)
    if found:
        raise SystemExit(f"the flags after --: {'; '.join(found)}. Drop them, or use the tool's own flag or a method "
                         "that sets it (--methods)")
