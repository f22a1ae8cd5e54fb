"""Running a comparison: each run resumable from its own checkpoints, a failed run recorded while the others go on.

    run_one        one run, unless it finished before; a run that stopped goes on from its newest usable checkpoint
    run_all        every (method, seed), seed by seed
    resume_step    the checkpoint a rerun goes on from, its metrics file cut back to it (`checkpoint_tags`,
                   `has_every_row`)
    check_steps    a finished run's metrics hold every step once
    RunFailed      a run that did not finish: its exit code and log
    comparison_lock  the lock a running comparison holds on its --out: a second one there is refused at once

The process side (the training child ended with its whole tree however the comparison ends, the lock on a run
folder): `openrlhf_copo.processes`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from openrlhf_copo.compare.command import check_extra, run_argv
from openrlhf_copo.compare.methods import METHODS, method_record, run_setting, stops_early
from openrlhf_copo.compare.prompts import prompt_plan, train_file
from openrlhf_copo.compare.provenance import SCHEMA, check_finished_run, content_of, environment, is_finished
from openrlhf_copo.compare.setting import Setting, due_evaluations, run_dir, settings_of, sweep
from openrlhf_copo.files import atomic_path, compact_finished_run, write_atomic


class RunFailed(SystemExit):
    """A run that did not finish: its exit code and log. A `SystemExit`, so a caller that does not catch it stops
    with its one line, as before; `run_all` catches it, records it and goes on with the next run."""

    def __init__(self, message: str, returncode: int, log: Path):
        super().__init__(message)
        self.returncode, self.log = returncode, log


def comparison_lock(out: Path):
    """The lock a running comparison (`compare`, `benchmarks/regimes.py run`) holds on its --out folder for the whole
    command: a second one on the same folder is refused at once, naming the folder and the pid of the first. Reading
    (--dry_run, --report_only) takes no lock."""
    from openrlhf_copo.processes import FolderLock

    return FolderLock(out, "compare", "another comparison is running in this folder", "before running another")


_TAG_STEP = re.compile(r"(?:best_)?global_step(\d+)$")


def checkpoint_tags(actor_dir: Path) -> List[tuple]:
    """(step, tag) of the checkpoints OpenRLHF left in ``actor_dir`` that a rerun may load, newest first: the one
    DeepSpeed's `latest` names (written after a checkpoint is complete) and the older ones beside it. A folder newer
    than `latest` was being written when the run stopped."""
    latest = actor_dir / "latest"
    if not latest.is_file():
        return []
    named = latest.read_text().strip()
    match = _TAG_STEP.match(named)
    if not match or not (actor_dir / named).is_dir():
        return []
    top = int(match.group(1))
    older = [(int(m.group(1)), p.name) for p in actor_dir.iterdir()
             if p.is_dir() and p.name != named and (m := _TAG_STEP.match(p.name)) and int(m.group(1)) < top]
    return [(top, named)] + sorted(older, reverse=True)


def has_every_row(rows: List[dict], step: int, evaluated: Sequence[int]) -> bool:
    """Whether the metrics rows hold each training step 1..``step`` and an evaluation at each of ``evaluated``."""
    trained = {r["step"] for r in rows if not r.get("eval")}
    evals = {r["step"] for r in rows if r.get("eval")}
    return set(range(1, step + 1)) <= trained and set(evaluated) <= evals


def resume_step(directory: Path, actor_dir: Path, due_evaluations) -> Optional[int]:
    """The step a rerun of the unfinished run in ``directory`` goes on from: its newest checkpoint whose steps and
    due evaluations (``due_evaluations(step)``: the steps evaluated up to it) are all in its metrics file. OpenRLHF
    saves a checkpoint before the step's evaluation, so a run stopped during that evaluation goes on from an older
    checkpoint, or from the start, rather than without it. DeepSpeed's `latest` is pointed at the chosen checkpoint,
    and the metrics file is cut back to its step (the rows after it are made again). None: no usable checkpoint."""
    from openrlhf_copo.evaluation.metrics_file import read_metrics

    metrics = directory / "metrics.jsonl"
    rows = read_metrics(metrics)
    for step, tag in checkpoint_tags(actor_dir):
        if has_every_row(rows, step, due_evaluations(step)):
            write_atomic(actor_dir / "latest", tag)
            kept = [r for r in rows if r["step"] <= step]
            write_atomic(metrics, "".join(json.dumps(r) + "\n" for r in kept))
            return step
    return None


def check_steps(metrics: Path, steps: Optional[int] = None, stops_early: bool = False) -> Optional[str]:
    """None when a finished run's metrics file holds steps 1..N once each, at most one evaluation per step, and an
    evaluation after its last step, N being ``steps`` (--steps) where given, or at most that for a method that stops
    early by design (``stops_early``: DAPO's dynamic filtering draws more prompts a step and ends when they run out);
    else what is wrong, in a few words."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, read_metrics, train_rows

    rows = read_metrics(metrics)
    trained = [r["step"] for r in train_rows(rows)]
    if trained != list(range(1, len(trained) + 1)):
        return (f"its training steps are {trained[:20]}{'...' if len(trained) > 20 else ''}, not 1..{len(trained)} "
                "once each")
    evals = [r["step"] for r in eval_rows(rows)]
    if len(evals) != len(set(evals)):
        return f"it evaluated a step twice ({sorted(evals)})"
    if steps is not None and (len(trained) > steps or (len(trained) < steps and not stops_early)):
        return f"it made {len(trained)} training steps, not --steps {steps}"
    if trained and trained[-1] not in evals:
        return f"it made no evaluation after its last step ({trained[-1]}; evaluations at {sorted(evals)})"
    return None


#: What a run records when it starts (its settings and method flags): a rerun goes on from its checkpoints only if
#: they are the command's.
STARTED = "started.json"


#: What a run that failed records: its exit code and log (removed when a rerun finishes it).
FAILED = "failed.json"


def prepare_run_folder(directory: Path, setting: Setting, record: dict, step0: bool) -> Optional[int]:
    """The run folder made ready for a run: the step it goes on from (`resume_step`: its newest usable
    checkpoint, made with the same settings and method flags), or None after clearing it for a run from the start
    (the lock of the command that holds it stays)."""
    from openrlhf_copo.processes import RunLock

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
    settings (done.json's ``settings``; its files by content) or other method flags is refused, naming them; one that
    recorded no settings is kept with a warning. A folder that another command is running, or whose training child
    still runs, is not touched (`processes.RunLock`, held until the run's markers are written). A run that fails, or
    stops short of --steps (but a method that stops early by design: `methods.stops_early`), raises `RunFailed`, its
    checkpoints kept. Returns the run's marker as it was written."""
    from openrlhf_copo.processes import RunLock, run_child

    directory = run_dir(out, method, seed)
    marker = directory / "done.json"
    wanted = {"settings": settings_of(setting), "content": content_of(setting)}
    if is_finished(directory):
        info = json.loads(marker.read_text())
        check_finished_run(directory, info, method, wanted)
        return info
    with RunLock(directory) as lock:  # held until the run's markers are written
        own = run_setting(setting, method)  # a step control's steps and evaluations; the recorded settings stay these
        resumed = prepare_run_folder(directory, own, {**wanted, **method_record(method)}, step0)
        train, episodes = train_file(own, out)
        argv = run_argv(setting, method, seed, directory, train, step0, episodes)
        log = directory / "train.log"
        if resumed:
            with open(log, "a") as f:
                f.write(f"\nopenrlhf_copo.compare: going on from the checkpoint of step {resumed}\n")
        t0 = time.time()
        rc = run_child([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv], log, lock,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"}, append=bool(resumed))
        wall = time.time() - t0
        wrong = check_steps(directory / "metrics.jsonl", own.steps, stops_early(METHODS[method])) \
            if rc == 0 else None
        if rc != 0 or wrong:
            raise RunFailed(f"[{method} seed {seed}] failed ({f'exit {rc}' if rc else wrong}); log: {log}", rc or 1,
                            log)
        info = {"schema": SCHEMA, "method": method, "seed": seed, "wall_seconds": round(wall, 1), **wanted,
                **method_record(method), "episodes": episodes, "prompts": prompt_plan(own, out),
                "environment": environment()}
        if resumed:
            info["resumed_from_step"] = resumed
        if setting.start:
            info["start_sha256"] = wanted["content"]["--start_checkpoint"]
        with atomic_path(marker) as tmp:
            tmp.write_text(json.dumps(info))
        shutil.rmtree(directory / "scratch", ignore_errors=True)  # only now: a failed run keeps its checkpoints
        (directory / FAILED).unlink(missing_ok=True)
        compact_finished_run(directory)  # its log gzipped, progress-bar redraws dropped: the committed tree stays small
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


def failed_runs(out: Path, methods: Sequence[str], seeds: Sequence[int]) -> List[dict]:
    """The failure records (`FAILED`) of the runs of ``methods`` x ``seeds`` that have not finished since."""
    folders = [run_dir(out, m, s) for s in seeds for m in methods]
    return [{"run": f.name, **json.loads((f / FAILED).read_text())} for f in folders
            if (f / FAILED).exists() and not is_finished(f)]
