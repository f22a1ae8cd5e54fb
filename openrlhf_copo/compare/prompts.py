"""The prompts every run of a comparison draws: steps x prompts per step, from as many distinct ones as the file and
the steps allow (`prompt_plan`), written once as the file the runs train on (`train_file`); the held-out sources."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, Optional, Tuple

from openrlhf_copo.compare.provenance import file_sha256
from openrlhf_copo.compare.setting import Setting
from openrlhf_copo.files import atomic_path


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
    key = hashlib.sha256(f"{file_sha256(source)} {layout} {file_rows}".encode()).hexdigest()[:16]
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
