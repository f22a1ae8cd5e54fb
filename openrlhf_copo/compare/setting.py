"""One comparison's setting and its runs: the model, data and sizes every run shares, and where each run lives.

    Setting          the model and data, the sizes, and the OpenRLHF flags every run shares
    run_dir          the folder of one (method, seed)
    FLAGS            each field of a Setting and the compare flag that sets it: what a run records and a rerun or a
                     report compares (`settings_of`; files by content: `provenance.records_differ`)
    sweep            every run of a comparison, seed by seed, and which one makes the seed's step-0 evaluation
    due_evaluations  the steps a run evaluates at
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple


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
    reward: str = str(Path(__file__).resolve().parents[1] / "rewards" / "math_reward.py")
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


#: The flag of the step-0 evaluation: a run gets it when ``step0`` says it makes its seed's (`sweep`), and only then.
STEP0_FLAG = "--copo.eval_before_train"


def sweep(methods: Sequence[str], seeds: Sequence[int]) -> List[Tuple[str, int, bool]]:
    """Every run of a comparison, seed by seed: (method, seed, step0), step0 whether the run makes its seed's step-0
    evaluation. That evaluation is the same model on the same held-out prompts for every method of a seed, so the
    seed's first run (the baseline's: `cli.compare` puts it first) makes it and the others share it. The one place
    that decides it: `run_all` and `plan` pass it down to `run_one`, `run_argv` and the evaluations due."""
    return [(method, seed, i == 0) for seed in seeds for i, method in enumerate(methods)]


def due_evaluations(setting: Setting, step0: bool):
    """The steps up to a given step whose evaluation a run makes: 0 when it makes its seed's step-0 evaluation
    (`sweep`), every --eval_every steps (OpenRLHF's global_step % eval.steps), and the last step
    (--copo.eval_after_train) when that is not one of them."""
    def due(step: int) -> List[int]:
        every = [s for s in range(1, step + 1) if s % setting.eval_every == 0]
        return ([0] if step0 else []) + every + ([step] if step >= setting.steps and step not in every else [])
    return due


def evaluations(setting: Setting, step0: bool) -> List[int]:
    """The steps at which a whole run evaluates (`due_evaluations` at its last step)."""
    return due_evaluations(setting, step0)(setting.steps)
