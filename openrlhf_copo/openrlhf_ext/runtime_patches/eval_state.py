"""What the logging and evaluation patches (4, 5, 6, 8) of one training process tell each other: one object.

OpenRLHF's `PPOTrainer` is a Ray actor, one per worker process, and the patched functions are called from its `fit`
without a handle on each other (`compute_eval_metrics`, patch 5, gets no trainer and no step), so the process holds
one `EvalState`, `STATE`. Who writes each field and who reads it:

field              written by                                   read by
step, episode      patch 4 after each step's logging; patch 6   patch 5 (the step of its metrics-file row); the
                   before a step-0 evaluation (step only)       end-of-training check (`evaluation.evaluate_last_step`)
metrics_file       the same                                     patch 5 (where its row goes)
trainer            patch 6 at the start of `fit`                the watched prompt draws (an evaluation they start)
watch_draws        patch 6: `--copo.eval_after_train`           the prompt draws (patch 6's `SamplesGenerator` wrapper)
prompts_used_up    the watched prompt draws                     after each step's logging (patch 4's hook)
evaluated_step     `evaluation.evaluate_now`                    the end-of-training check: never twice
greedy_samples,    patch 8 (one evaluation's greedy samples and  patch 5 of that same evaluation, which clears them
generate_seconds   its generation time)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class EvalState:
    """One training process's logging and evaluation state (see the module's table of writers and readers)."""

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


#: The state of this process's trainer.
STATE = EvalState()
