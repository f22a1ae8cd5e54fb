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
greedy verdicts; over seeds, their mean with a 95% t-interval over seeds (training randomness included). It is
given pooled over every held-out prompt and per held-out source (OpenRLHF evaluates each ``datasource`` apart). What
each run saw at its first step (the share of zero-variance groups, of all-incorrect ones, of responses with a
gradient) is reported beside it: the regime the comparison was made in.

Each run records its settings (`settings_of`, by the flag that sets each) in its ``done.json``: a rerun keeps a
finished run only if they are the command's, and a report pairs only runs whose settings agree, naming the flag
that differs otherwise; the method's flags (``method_flags``) likewise. A run saves a checkpoint every
`Setting.save_every` steps; one that stopped goes on from its newest on a rerun, and one that failed is recorded
while the others go on (`run_one`, `run_all`; the process side in `compare_runs`). More steps than one pass over the prompts are OpenRLHF episodes (`train_file`).

The CPU benchmark's settings are presets of this (benchmarks/learning_curve.py); on a GPU cluster the same tool
takes your model, data, G, prompts per step, steps, learning rate, start checkpoint and any OpenRLHF flag. It has
run on the CPU only (the tiny model in tests/test_compare.py, SmolLM2 in the benchmark); not on a GPU.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from openrlhf_copo.contract import PROMPTS_CONSUMED
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
    # the authors' released COPO (their run_copo.sh: soft-with-zero, gamma 5, rho 1, their conventions)
    "copo_released": ["--advantage_estimator", "copo", "--copo.gamma", "5", "--copo.rho", "1", "--copo.zero_control",
                      "response", "--copo.incorrect", "reward", "--copo.std", "unbiased", "--copo.answer_buckets",
                      "string", "--actor.dual_clip", "3", "--actor.loss_agg_mode", "seq-mean-token-mean"],
}

#: Flags of every run: the same draws from the same weights, the same pipeline for OpenRLHF's own estimators, an
#: evaluation at the end of every run, and the loss terms' pushes (the mechanism's diagnostics).
PAIRED = ["--copo.seeded_rollouts", "--copo.eval_after_train", "--copo.same_pipeline", "--copo.push_metrics"]

#: What every method is compared with.
BASELINE = "grpo"

#: Two-sided 95% quantiles of Student's t by degrees of freedom (1-10); 1.96 beyond.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}

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


def rho_keeping_every_split(G: int, gamma: float = 20.0, base: float = 2.0, w_min: float = 0.99) -> float:
    """The largest rho (to 0.01) at which every mixed answer split of G responses keeps w_local >= ``w_min``:
    below the entropy of the most lopsided split, (G-1)+1, by what the sigmoid of sharpness ``gamma`` needs
    (ln(w_min / (1 - w_min)) / gamma = 0.23 at 0.99 and gamma 20). At G = 4 (3+1 at 0.811 bits) that is 0.58; at
    G = 6 (5+1 at 0.650 bits) 0.42."""
    h = -((G - 1) / G * math.log((G - 1) / G, base) + 1 / G * math.log(1 / G, base))
    return math.floor((h - math.log(w_min / (1 - w_min)) / gamma) * 100) / 100


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / f"{method}-seed{seed}"


def train_file(setting: Setting, out: Path) -> Tuple[Path, int]:
    """(the run's prompts, its number of OpenRLHF episodes): steps x prompts per step drawn in all, exactly (OpenRLHF's
    --data.max_samples would also cap the held-out set). One pass over the file's first rows when it holds that many;
    else as many passes (episodes, each reshuffled by OpenRLHF) as it takes, the fewest that divide the steps, each
    over the same first steps / episodes x prompts per step rows. The given file when it is exactly one pass, else
    its first rows, written once under ``out``."""
    from openrlhf_copo.files import jsonl_rows

    P, steps = setting.prompts_per_step, setting.steps
    have = sum(1 for _ in jsonl_rows(Path(setting.train)))
    if have < P:
        raise SystemExit(f"{setting.train}: {have} prompts, fewer than --prompts_per_step {P}")
    episodes = next(e for e in range(-(-steps * P // have), steps + 1) if steps % e == 0)
    need = steps // episodes * P
    if have == need:
        return Path(setting.train), episodes
    cut = out / f"train-first{need}.jsonl"
    if not cut.exists():
        out.mkdir(parents=True, exist_ok=True)
        rows = (json.dumps(row) + "\n" for n, (_, row) in zip(range(need), jsonl_rows(Path(setting.train))))
        with atomic_path(cut) as tmp:
            tmp.write_text("".join(rows))
    return cut, episodes


def run_argv(setting: Setting, method: str, seed: int, directory: Path, train: Path, step0: bool,
             episodes: int = 1) -> List[str]:
    """The train_ppo_ray command line of one run: the method's flags, the paired flags, the setting's (`FIXED`), then
    ``setting.extra`` (which wins over what precedes it), then the seed."""
    P, G = setting.prompts_per_step, setting.samples_per_prompt
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
    argv = METHODS[method] + PAIRED + base + list(setting.extra) + ["--train.seed", str(seed)]
    if step0 and "--copo.eval_before_train" not in argv:
        argv.append("--copo.eval_before_train")
    if not step0:  # the step-0 evaluation is the same model on the same prompts: made once per seed
        argv = [a for a in argv if a != "--copo.eval_before_train"]
    return argv


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
    """The steps up to a given step whose evaluation a run makes: 0 (the seed's first run), every --eval_every, and
    the last step."""
    def due(step: int) -> List[int]:
        every = [s for s in range(1, step + 1) if s % setting.eval_every == 0]
        return ([0] if step0 else []) + every + ([step] if step >= setting.steps and step not in every else [])
    return due


def method_flags_differ(directory: Path, info: dict, method: str) -> Optional[str]:
    """Why a finished run may not stand for ``method`` now: its recorded flags (done.json's ``method_flags``) are not
    `METHODS[method]` (the method was redefined since); None when they are, or when none were recorded."""
    then = info.get("method_flags")
    if then is None or then == METHODS[method]:
        return None
    return (f"{directory} was made with {method}'s flags {' '.join(then)}, and {method} is now "
            f"{' '.join(METHODS[method])}: use another --out, or delete {directory} to rerun it")


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


#: What a run records when it starts (its settings and method flags): a rerun goes on from its checkpoints only if
#: they are the command's.
STARTED = "started.json"
#: What a run that failed records: its exit code and log (removed when a rerun finishes it).
FAILED = "failed.json"


def prepare_run_folder(directory: Path, setting: Setting, record: dict, step0: bool) -> Optional[int]:
    """The run folder made ready for a run: the step it goes on from (`compare_runs.resume_step`: its newest usable
    checkpoint, made with the same settings and method flags), or None after clearing it for a run from the start."""
    from openrlhf_copo.compare_runs import resume_step

    started = directory / STARTED
    same = started.exists() and json.loads(started.read_text()) == record
    step = resume_step(directory, directory / "scratch" / "ckpt" / "_actor", due_evaluations(setting, step0)) \
        if same else None
    if step is None:
        if directory.exists():
            for p in directory.glob("*"):
                if p.is_file():
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
    were recorded is kept with a warning. A folder whose training child is still running is not touched
    (`compare_runs.RunLock`). A run that fails raises `compare_runs.RunFailed`, its checkpoints kept."""
    from openrlhf_copo.compare_runs import RunFailed, RunLock, check_steps, run_child

    directory = run_dir(out, method, seed)
    marker = directory / "done.json"
    settings = settings_of(setting)
    if is_finished(directory):
        info = json.loads(marker.read_text())
        check_finished_run(directory, info, method, settings)
        return info
    lock = RunLock(directory)
    lock.refuse_if_running()
    resumed = prepare_run_folder(directory, setting, {"settings": settings, "method_flags": METHODS[method]}, step0)
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
        raise RunFailed(f"[{method} seed {seed}] failed ({f'exit {rc}' if rc else wrong}); log: {log}", rc or 1, log)
    info = {"method": method, "seed": seed, "wall_seconds": round(wall, 1), "settings": settings,
            "method_flags": METHODS[method], "episodes": episodes}
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
    """Every (method, seed), seed by seed; the first method of a seed makes its step-0 evaluation. A run that fails
    is said on stderr and recorded in its folder (`FAILED`), and the sweep goes on: the markers returned are the
    finished runs', and `failed_runs` lists the others."""
    from tqdm import tqdm

    from openrlhf_copo.compare_runs import RunFailed

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}: choose from {', '.join(METHODS)}")
    plan = [(m, s, i == 0) for s in seeds for i, m in enumerate(methods)]
    infos = []
    for method, seed, step0 in tqdm(plan, desc="runs", unit="run"):
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


def paired_over_seeds(final: Dict[tuple, dict], a: str, b: str) -> Optional[dict]:
    """``a`` minus ``b`` at the final evaluation, over the seeds both ran: per seed the paired difference of the
    per-prompt greedy verdicts (`evaluation.metrics.paired_difference`), then their mean with a 95% t-interval over
    seeds (with one seed, the prompt-level interval of that seed). ``final``: (method, seed) -> an evaluation point
    with its ``outcomes``."""
    from openrlhf_copo.evaluation.metrics import paired_difference

    seeds = sorted(s for m, s in final if m == b and (a, s) in final)
    per_seed = [{"seed": s, **paired_difference(final[(b, s)]["outcomes"], final[(a, s)]["outcomes"])}
                for s in seeds]
    if not per_seed:
        return None
    mean, se = mean_se([p["gain"] for p in per_seed])
    half = T975.get(len(per_seed) - 1, 1.96) * se if len(per_seed) > 1 else 1.96 * per_seed[0]["se"]
    return {"per_seed": per_seed, "mean": mean, "ci95": (mean - half, mean + half)}


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


def check_same_settings(out: Path, infos: List[dict]) -> Optional[dict]:
    """Refuses a report that would pair runs made with different settings (done.json's ``settings``), naming the flag
    and the two runs; returns the settings they share (None when no run recorded them: made before they were)."""
    recorded = [i for i in infos if "settings" in i]
    for info in recorded[1:]:
        differ = settings_differ(info["settings"], recorded[0]["settings"])
        if differ:
            flag, theirs, ours = differ
            first, other = (run_dir(out, i["method"], i["seed"]).name for i in (recorded[0], info))
            raise SystemExit(f"{out}: {other} was made with {flag} {theirs!r}, {first} with {ours!r}: a paired "
                             "comparison needs one setting; rerun one of them in another --out")
    return recorded[0]["settings"] if recorded else None


def _summary(runs: List[dict], method: str, baseline: str, point) -> dict:
    """A method's final greedy accuracy (mean, SE over seeds) and its paired difference from the baseline, from
    ``point(run)``: the final evaluation point of a run, pooled or of one source (None where it has none)."""
    final = {(r["method"], r["seed"]): point(r) for r in runs if point(r) and point(r)["outcomes"]}
    mine = [point(r) for r in runs if r["method"] == method and point(r)]
    return {"final": mean_se([p["greedy"] for p in mine]),
            "minus_baseline": paired_over_seeds(final, method, baseline) if method != baseline else None,
            "prompts": len(mine[0]["outcomes"]) if mine and mine[0]["outcomes"] else None}


def report(out: Path, infos: List[dict], baseline: str = BASELINE, samples_per_prompt: Optional[int] = None) -> dict:
    """Per method: its runs' final greedy accuracy and its paired difference from ``baseline`` over seeds, pooled over
    every held-out source (OpenRLHF splits evaluation by the rows' ``datasource``) and per source, and what its runs
    saw at their first step (DAPO's from its filter, given ``samples_per_prompt``); and the settings the runs share."""
    check_same_start(out, infos, baseline)
    check_same_method_flags(out, infos)
    settings = check_same_settings(out, infos)
    runs = [read_run(out, i) for i in infos]
    if samples_per_prompt:
        for r in runs:
            r["first_step"] = first_step_regime(r["first_step"], samples_per_prompt)
    sources = sorted({s for r in runs if r["evals"] for s in r["evals"][-1]["sources"]})
    table = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method and r["evals"]]
        table[method] = {
            "seeds": sorted(r["seed"] for r in mine),
            **_summary(runs, method, baseline, lambda r: r["evals"][-1] if r["evals"] else None),
            "sources": {s: _summary(runs, method, baseline,
                                    lambda r, s=s: r["evals"][-1]["sources"].get(s) if r["evals"] else None)
                        for s in sources},
            "first_step": {k: mean_se([r["first_step"].get(k) if r["first_step"].get(k) is not None else float("nan")
                                       for r in mine])[0] for k in FIRST_STEP_KEYS},
            "machine_hours": sum(r["wall_seconds"] for r in mine) / 3600,
        }
    return {"baseline": baseline, "sources": sources, "settings": settings, "table": table}


def _cell(method: str, base: str, diff: Optional[dict]) -> str:
    return ("(baseline)" if method == base else "-" if diff is None else
            f"{diff['mean']:+.3f} [{diff['ci95'][0]:+.3f}, {diff['ci95'][1]:+.3f}]")


def _final(final: tuple) -> str:
    m, se = final
    return f"{m:.3f}" if se != se else f"{m:.3f} +- {se:.3f}"  # one seed: no spread to show


def markdown(result: dict) -> str:
    """The report as a table, one row per method (pooled over the held-out sources), then, with more than one
    source, one row per method and source."""
    base = result["baseline"]
    lines = [f"| method | seeds | final greedy (mean +- SE) | minus {base}, paired (95% CI over seeds) | "
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
    return "\n".join(lines)
