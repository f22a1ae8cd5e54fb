"""Patch 4: `--copo.metrics_file`, every step's logged metrics in a JSON-lines file.

4. `BasePPOTrainer.save_logs_and_checkpoints`: appends each step's metrics (the dict OpenRLHF sends to wandb /
   tensorboard) and the prompts drawn so far to the file, and records the step and episode for the evaluation (the
   trainer's `eval_state.trainer_state`); after the step's own logging it calls the hook it was installed with (the
   package installs `evaluation.evaluate_if_prompts_ran_out`: with `--copo.eval_after_train`, the run's last step is
   evaluated even when `--eval.steps` does not divide it). Each step's metrics gain the response tokens its training
   rollout generated and the run's total so far (`GeneratedTokens`: counted in `SamplesGenerator.generate_samples`
   and `_process_response_into_experience`, the total kept in the checkpoints through `init_checkpoint_states`), for
   every estimator, so that every method's cost is read from the same count.

The evaluation patches (`evaluation.py`) append their rows here too, with `append_metrics`.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Callable, Optional

from openrlhf_copo.contract import GENERATED_TOKENS, GENERATED_TOKENS_TOTAL, PROMPTS_CONSUMED
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
    GeneratedTokens.install()

    @functools.wraps(original_save)
    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        path = getattr(getattr(self.args, "copo", None), "metrics_file", None)
        # OpenRLHF's `evaluate` runs right after this and hands `compute_eval_metrics` (patch 5) no step
        state = eval_state.trainer_state(self)
        state.step, state.episode, state.metrics_file = int(global_step), (client_states or {}).get("episode"), path
        DrawCounter.save(self, client_states)  # seeded rollouts: a resumed run goes on with the run's draw counts
        if logs_dict is not None:  # OpenRLHF's loggers get the step's tokens too
            logs_dict = {**logs_dict, **GeneratedTokens.step_logs(self, client_states)}
        if path and logs_dict:
            consumed = (client_states or {}).get("total_consumed_prompts")
            append_metrics(path, global_step, logs_dict if consumed is None else {**logs_dict, PROMPTS_CONSUMED: consumed})
        result = original_save(self, global_step, logs_dict, client_states)
        after_logging(self)
        return result

    BasePPOTrainer.save_logs_and_checkpoints = save_logs_and_checkpoints
    BasePPOTrainer.__openrlhf_copo_patched__ = True


class GeneratedTokens:
    """The response tokens a run's training rollouts generated, counted where OpenRLHF turns each vLLM response into
    an `Experience` (`SamplesGenerator._process_response_into_experience`, whose ``response_length`` is the
    response's tokens, cut at --data.max_len as OpenRLHF cuts it) while a training draw (`generate_samples`) is
    under way: every response drawn, the groups DAPO's dynamic filtering drops and Reinforce-Ada's later rounds
    (patch 11) included; the held-out evaluation's draws (`generate_eval_samples`) are not. One counter per
    `SamplesGenerator`; patch 4 takes the step's count when it logs the step (`step_logs`), adds it to the total,
    and keeps the total in the checkpoint's client states (`CLIENT_STATE`), restored when a run resumes, so the
    total of a resumed run is the uninterrupted run's. A draw that makes no step (the prompts ran out with every
    group dropped) is counted into the next step, or into none when it was the last."""

    #: The key of the checkpoint's client states that holds the total.
    CLIENT_STATE = "openrlhf_copo_generated_tokens"
    #: Marks the wrappers `install` puts on OpenRLHF's functions.
    _ATTR = "__openrlhf_copo_generated_tokens__"

    def __init__(self, total: int = 0):
        self.total, self.step, self.drawing = int(total), 0, False

    @classmethod
    def of(cls, generator) -> "GeneratedTokens":
        """The counter of a `SamplesGenerator`, made on first use."""
        if getattr(generator, "_copo_generated_tokens", None) is None:
            generator._copo_generated_tokens = cls()
        return generator._copo_generated_tokens

    def count(self, experience) -> None:
        """One response turned into an experience: its tokens, when a training draw is under way."""
        if self.drawing:
            self.step += int(experience.response_length.sum())

    def take_step(self) -> tuple:
        """(the tokens generated since the last step was logged, the run's total with them); the step's count is
        then cleared."""
        step, self.step = self.step, 0
        self.total += step
        return step, self.total

    @classmethod
    def step_logs(cls, trainer, client_states) -> dict:
        """The step's {GENERATED_TOKENS, GENERATED_TOKENS_TOTAL} for its logs, the total also into the checkpoint's
        ``client_states``; {} for a trainer without a samples generator."""
        generator = getattr(trainer, "samples_generator", None)
        if generator is None:
            return {}
        step, total = cls.of(generator).take_step()
        if client_states is not None:
            client_states[cls.CLIENT_STATE] = total
        return {GENERATED_TOKENS: step, GENERATED_TOKENS_TOTAL: total}

    @classmethod
    def restore(cls, trainer, states) -> None:
        """From the checkpoint states a run resumes with: the total saved there, if any."""
        generator = getattr(trainer, "samples_generator", None)
        if generator is not None and (states or {}).get(cls.CLIENT_STATE) is not None:
            generator._copo_generated_tokens = cls(states[cls.CLIENT_STATE])

    @classmethod
    def install(cls) -> None:
        """The counting wrappers, once, on OpenRLHF's `SamplesGenerator` (the training draw and the response to
        experience step) and `BasePPOTrainer.init_checkpoint_states` (the total a resumed run starts from)."""
        from openrlhf.trainer.ppo_trainer import BasePPOTrainer
        from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

        module = "openrlhf.trainer.ppo_utils.samples_generator"
        for name in ("SamplesGenerator.generate_samples", "SamplesGenerator._process_response_into_experience"):
            check_symbol(module, name)
        check_symbol("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.init_checkpoint_states")
        draw, to_experience = SamplesGenerator.generate_samples, SamplesGenerator._process_response_into_experience
        init_states = BasePPOTrainer.init_checkpoint_states

        @functools.wraps(draw)
        def generate_samples(self, *args, **kwargs):
            counter = cls.of(self)
            counter.drawing = True
            try:
                return draw(self, *args, **kwargs)
            finally:
                counter.drawing = False

        @functools.wraps(to_experience)
        def _process_response_into_experience(self, response, **kwargs):
            experience = to_experience(self, response, **kwargs)
            cls.of(self).count(experience)
            return experience

        @functools.wraps(init_states)
        def init_checkpoint_states(self):
            states = init_states(self)
            cls.restore(self, states)
            return states

        # each function on its own: one wrapped twice would count every response twice, and a test (or another
        # patch) may have put back one of them and not the others
        for owner, name, wrapper in ((SamplesGenerator, "generate_samples", generate_samples),
                                     (SamplesGenerator, "_process_response_into_experience",
                                      _process_response_into_experience),
                                     (BasePPOTrainer, "init_checkpoint_states", init_checkpoint_states)):
            if not getattr(getattr(owner, name), cls._ATTR, False):
                setattr(wrapper, cls._ATTR, True)
                setattr(owner, name, wrapper)


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
