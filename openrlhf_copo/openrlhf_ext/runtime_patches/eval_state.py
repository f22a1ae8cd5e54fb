"""What the logging and evaluation patches (4, 5, 6, 8) of one trainer tell each other: one object per trainer.

OpenRLHF's `PPOTrainer` is a Ray actor, and the patched functions are called from its `fit` without a handle on each
other (`compute_eval_metrics`, patch 5, gets no trainer and no step). So each trainer carries one `EvalState`, made on
first use. Patches 4 and 6 are methods of the trainer and find it there (`trainer_state`). Patches 5 and 8 and the
watched prompt draws are not handed the trainer; each is handed the trainer's held-out dataloader (patch 5 as its
first argument; patch 8 and the draws as their `SamplesGenerator`'s `eval_dataloader`, the same object), on which the
state is kept too (`held_out_state`). Two trainers in one process (the tests make several) each see their own.

Who writes each field and who reads it:

field              written by                                   read by
step, episode      patch 4 after each step's logging; patch 6   patch 5 (the step of its metrics-file row); the
                   before a step-0 evaluation (step only)       end-of-training check (`evaluation.evaluate_last_step`)
metrics_file       the same                                     patch 5 (where its row goes)
trainer            `trainer_state`, the first time it is asked  the watched prompt draws (an evaluation they start)
watch_draws        patch 6: `--copo.eval_after_train`           the prompt draws (patch 6's `SamplesGenerator` wrapper)
prompts_used_up    the watched prompt draws                     after each step's logging (patch 4's hook)
evaluated_step     `evaluation.evaluate_now`                    the end-of-training check: never twice
greedy_samples,    patch 8 (one evaluation's greedy samples and  patch 5 of that same evaluation, which clears them
generate_seconds   its generation time)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: The attribute that holds the state on its trainer and on the trainer's held-out dataloader.
STATE_ATTR = "_copo_eval_state"


@dataclass
class EvalState:
    """One trainer's logging and evaluation state (see the module's table of writers and readers)."""

    step: int = 0
    episode: Optional[int] = None
    metrics_file: Optional[str] = None
    trainer: Any = None
    watch_draws: bool = False
    prompts_used_up: bool = False
    evaluated_step: Optional[int] = None
    greedy_samples: Optional[list] = None
    generate_seconds: Optional[float] = None

    def take_evaluation_extras(self) -> tuple:
        """(greedy samples, generation seconds) of the evaluation under way, cleared so that the next evaluation
        cannot report them again."""
        extras = (self.greedy_samples, self.generate_seconds)
        self.greedy_samples = self.generate_seconds = None
        return extras


def trainer_state(trainer) -> EvalState:
    """The state of ``trainer`` (an OpenRLHF `PPOTrainer`), made on first use and kept on it and on its held-out
    dataloader (`held_out_state`: the one an evaluation's patches made first, if they did)."""
    state = getattr(trainer, STATE_ATTR, None)
    if state is None:
        loader = getattr(trainer, "eval_dataloader", None)
        state = EvalState() if loader is None else held_out_state(loader)
        state.trainer = trainer
        setattr(trainer, STATE_ATTR, state)
    return state


def held_out_state(eval_dataloader) -> Optional[EvalState]:
    """The state of the trainer whose held-out dataloader ``eval_dataloader`` is, made on first use (patches 5 and 8
    without 4 and 6: a baseline's greedy evaluation); None when there is no held-out set (None), where nothing is
    evaluated."""
    if eval_dataloader is None:
        return None
    state = getattr(eval_dataloader, STATE_ATTR, None)
    if state is None:
        state = EvalState()
        setattr(eval_dataloader, STATE_ATTR, state)
    return state
