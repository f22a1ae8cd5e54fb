"""Patch 4: `--copo.metrics_file`, every step's logged metrics in a JSON-lines file.

4. `BasePPOTrainer.save_logs_and_checkpoints`: appends each step's metrics (the dict OpenRLHF sends to wandb /
   tensorboard) and the prompts drawn so far to the file, and records the step and episode for the evaluation (the
   trainer's `eval_state.trainer_state`); after the step's own logging it calls the hook it was installed with (the
   package installs `evaluation.evaluate_if_prompts_ran_out`: with `--copo.eval_after_train`, the run's last step is
   evaluated even when `--eval.steps` does not divide it).

The evaluation patches (`evaluation.py`) append their rows here too, with `append_metrics`.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Callable, Optional

from openrlhf_copo.contract import PROMPTS_CONSUMED
from openrlhf_copo.openrlhf_ext.runtime_patches import eval_state
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import DrawCounter
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol


def apply_metrics_file(after_logging: Callable[[object], None] = lambda trainer: None) -> None:
    """Patch 4, in Ray workers only (`worker_hook`): never in the driver. ``after_logging(trainer)`` runs after
    each step's logging and checkpointing (the package passes `evaluation.evaluate_if_prompts_ran_out`).

    `BasePPOTrainer` is the base of a Ray actor class. When `@ray.remote` wraps a class, Ray
    snapshots its methods in the driver, and cloudpickle ships a method *by value* when it no
    longer matches the module's attribute. Patched in the driver, the worker would receive the
    unpatched original; unpatched in the driver, it is shipped by reference and the worker
    resolves it to its own, patched, version.
    """
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    if getattr(BasePPOTrainer, PATCHED_ATTR, False):
        return
    check_symbol("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.save_logs_and_checkpoints")
    original_save = BasePPOTrainer.save_logs_and_checkpoints

    @functools.wraps(original_save)
    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        path = getattr(getattr(self.args, "copo", None), "metrics_file", None)
        # OpenRLHF's `evaluate` runs right after this and hands `compute_eval_metrics` (patch 5) no step
        state = eval_state.trainer_state(self)
        state.step, state.episode, state.metrics_file = int(global_step), (client_states or {}).get("episode"), path
        DrawCounter.save(self, client_states)  # seeded rollouts: a resumed run goes on with the run's draw counts
        if path and logs_dict:
            consumed = (client_states or {}).get("total_consumed_prompts")
            append_metrics(path, global_step, logs_dict if consumed is None else {**logs_dict, PROMPTS_CONSUMED: consumed})
        result = original_save(self, global_step, logs_dict, client_states)
        after_logging(self)
        return result

    BasePPOTrainer.save_logs_and_checkpoints = save_logs_and_checkpoints
    BasePPOTrainer.__openrlhf_copo_patched__ = True


def append_metrics(path: str, step: int, logs: dict, text: Optional[dict] = None) -> None:
    """One JSON line per step: the numeric metrics of ``logs`` plus the step and wall time, and the strings of
    ``text`` (an evaluation's per-prompt outcomes) as they are."""
    import json
    import math

    row = {"step": int(step), "time": time.time()}
    for k, v in logs.items():
        v = v.item() if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1 else v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            row[k] = float(v) if math.isfinite(v) else None
    row.update(text or {})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
