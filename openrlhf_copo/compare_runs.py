"""One comparison run's life as a process: its training child, the locks on its folders, a crash, a resume.

    run_child      the train_ppo_ray child, ended with its whole tree when `compare` ends, however it ends
                   (`openrlhf_copo.processes`, whose names this module passes on); its pid in the folder's lock
    RunLock        a run folder's lock (`processes.RunLock`): a rerun refuses a folder whose run is still going
    comparison_lock  the lock a running `compare` holds on its --out: a second one there is refused at once
    resume_step    the step of the newest checkpoint a rerun can go on from, `latest` pointed at it, and the metrics
                   file cut back to it; None: start over
    check_steps    a finished run's metrics hold every step once

Why: a comparison at the paper's size is ~45 GPU-hours of runs (docs/gpu-recipe.md); a crash at step 59 of 60
must not redo the run, a killed `compare` must not leave a training child running, and a rerun must not delete
the files of a run that is still going.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Optional, Sequence

from openrlhf_copo.files import write_atomic
from openrlhf_copo.processes import (LOCK, FolderLock, RunLock, _die_with_parent, alive, end_group,  # noqa: F401
                                     process_start, run_child)


class RunFailed(SystemExit):
    """A run that did not finish: its exit code and log. A `SystemExit`, so a caller that does not catch it stops
    with its one line, as before; `compare.run_all` catches it, records it and goes on with the next run."""

    def __init__(self, message: str, returncode: int, log: Path):
        super().__init__(message)
        self.returncode, self.log = returncode, log


def comparison_lock(out: Path) -> FolderLock:
    """The lock a running comparison (`compare`, `benchmarks/regimes.py run`) holds on its --out folder for the whole
    command: a second one on the same folder is refused at once, naming the folder and the pid of the first. Reading
    (--dry_run, --report_only) takes no lock."""
    return FolderLock(out, "compare", "another comparison is running in this folder", "before running another")


# --- resuming from the run's own checkpoints ---

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


def check_steps(metrics: Path) -> Optional[str]:
    """None when a finished run's metrics file holds steps 1..N once each and at most one evaluation per step; else
    what is wrong, in a few words."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, read_metrics, train_rows

    rows = read_metrics(metrics)
    steps = [r["step"] for r in train_rows(rows)]
    if steps != list(range(1, len(steps) + 1)):
        return f"its training steps are {steps[:20]}{'...' if len(steps) > 20 else ''}, not 1..{len(steps)} once each"
    evals = [r["step"] for r in eval_rows(rows)]
    if len(evals) != len(set(evals)):
        return f"it evaluated a step twice ({sorted(evals)})"
    return None
