"""What a comparison would do, before anything runs (`--dry_run`): every run's command, the prompts, the held-out
sources, the evaluations and the cost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from openrlhf_copo.compare.command import check_extra, run_argv
from openrlhf_copo.compare.methods import METHODS, SAMPLE_FACTOR, samples_per_prompt, sampling_budget
from openrlhf_copo.compare.prompts import held_out_sources, prompt_plan
from openrlhf_copo.compare.provenance import is_finished
from openrlhf_copo.compare.setting import Setting, evaluations, run_dir, sweep


#: docs/gpu-recipe.md's cost of one step for Qwen2.5-3B (an estimate, not measured): about 0.2 GPU-hours for 512
#: prompts x 6 responses of ~800 tokens (training at 40% of an H100's bf16 peak, ~10k generated tokens a second per
#: H100, weight sync and the evaluation during training). A plan scales it by the responses a step generates.
RECIPE_STEP = {"gpu_hours": 0.2, "responses": 512 * 6, "model": "Qwen2.5-3B", "response_tokens": 800}



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
