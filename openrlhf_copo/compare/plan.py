"""What a comparison would do, before anything runs (`--dry_run`): every run's command, the prompts, the held-out
sources, the evaluations and the cost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Sequence

from openrlhf_copo.compare.command import check_extra, run_argv
from openrlhf_copo.compare.methods import (METHODS, SAMPLE_FACTOR, STEP_FACTOR, draw_factor, run_setting,
                                           samples_per_prompt, sampling_budget)
from openrlhf_copo.compare.prompts import held_out_sources, prompt_plan
from openrlhf_copo.compare.provenance import is_finished
from openrlhf_copo.compare.setting import Setting, evaluations, run_dir, sweep
from openrlhf_copo.compare.stats import t_quantile
from openrlhf_copo.compare.train_flags import refusals


#: docs/gpu-recipe.md's cost of one step for Qwen2.5-3B (an estimate, not measured): about 0.2 GPU-hours for 512
#: prompts x 6 responses of ~800 tokens (training at 40% of an H100's bf16 peak, ~10k generated tokens a second per
#: H100, weight sync and the evaluation during training). A plan scales it by the responses a step generates.
RECIPE_STEP = {"gpu_hours": 0.2, "responses": 512 * 6, "model": "Qwen2.5-3B", "response_tokens": 800}


def device_for(setting: Setting):
    """The device the runs will take on this machine (`device.decide` on --device, asking the Ray cluster a run would
    join, as the run's driver does), or the reason it cannot be decided (a str)."""
    from openrlhf_copo.openrlhf_ext import device

    try:
        return device.decide(setting.device, address=device.cluster_address())
    except device.DeviceError as e:
        return str(e)


def plan(setting: Setting, methods: Sequence[str], seeds: Sequence[int], out: Path, decision=None) -> dict:
    """What `run_all` would do, reading the data files and writing nothing: every run's full train_ppo_ray command
    (and whether a finished run under ``out`` would be kept) with what would refuse it (`train_flags.refusals`: the
    parser, OpenRLHF's asserts, COPO's refusals and those of the device the runs take here, ``decision`` or
    `device_for`'s), the prompts each run draws (`prompt_plan`), the held-out sources and their sizes, the
    evaluations (a step control's at each multiple of --steps: `methods.run_setting`), the cost at
    docs/gpu-recipe.md's rate (`RECIPE_STEP`), and the run that each method drawing more than G would need for its
    equal-tokens cell (`equal_tokens_plan`). Refuses what `run_all` refuses (unknown
    methods, flags after -- that train_ppo_ray does not know or that redefine a method: `check_extra`)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}: choose from {', '.join(METHODS)}")
    check_extra(setting, methods, seeds, out)
    decision = device_for(setting) if decision is None else decision
    prompts = prompt_plan(setting, out)
    runs = []
    own_prompts = {m: prompt_plan(run_setting(setting, m), out) for m in methods if m in STEP_FACTOR}
    for method, seed, step0 in sweep(methods, seeds):
        directory = run_dir(out, method, seed)
        mine = own_prompts.get(method, prompts)
        argv = run_argv(setting, method, seed, directory, Path(mine["file"]), step0, mine["episodes"])
        refused = [decision] if isinstance(decision, str) else refusals(argv, decision)
        runs.append({"method": method, "seed": seed, "step0": step0, "kept": is_finished(directory),
                     "evaluations": evaluations(run_setting(setting, method), step0), "refused": refused,
                     "argv": [sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv]})
    prompts_drawn = setting.steps * setting.prompts_per_step
    # a method that samples adaptively is counted at its budget per prompt (an upper bound), one that keeps G at
    # random at the k x G it draws
    budgets = {m: b for m in methods if (b := sampling_budget(m, setting.extra)) is not None}
    draws = {m: k for m in methods if (k := draw_factor(m, setting.extra)) is not None}
    drawn = [prompts_drawn * STEP_FACTOR.get(r["method"], 1)
             * max(budgets.get(r["method"], 0), draws.get(r["method"], 1) * setting.samples_per_prompt,
                   samples_per_prompt(setting, r["method"]))
             for r in runs if not r["kept"]]
    new = len(drawn)
    cost = {"responses_per_run": prompts_drawn * setting.samples_per_prompt, "runs_to_make": new,
            "adaptive_budgets": budgets, "draw_factors": draws,
            "sample_factors": {m: SAMPLE_FACTOR[m] for m in methods if m in SAMPLE_FACTOR},
            "step_factors": {m: STEP_FACTOR[m] for m in methods if m in STEP_FACTOR},
            "gpu_hours": sum(drawn) * RECIPE_STEP["gpu_hours"] / RECIPE_STEP["responses"], "rate": RECIPE_STEP}
    where = decision if isinstance(decision, str) else \
        f"the actors run on {'the CPU path' if decision.cpu_path else 'CUDA'} here: {decision.reason}"
    return {"out": str(out), "prompts": prompts, "held_out": held_out_sources(setting.test), "runs": runs,
            "cost": cost, "seeds": list(seeds), "device": where, "step_prompts": own_prompts,
            "steps": setting.steps, "equal_tokens": equal_tokens_plan(methods, budgets, setting.steps)}


def equal_tokens_plan(methods: Sequence[str], budgets: dict, steps: int) -> List[str]:
    """What the report's equal-tokens column will need (`tokens.equal_tokens`), one line per method that may draw
    more than the baseline's tokens (an adaptive sampling budget) with no budget control among ``methods``: the run
    that would fill its cell. A method that draws G per prompt draws about the baseline's tokens and needs none."""
    controls = [m for m in methods if m in SAMPLE_FACTOR or m in STEP_FACTOR]
    if controls:
        return []
    return [f"{m} may draw up to {b} responses per prompt, more than G: its equal-tokens cell needs a uniform GRPO "
            f"at its tokens, which no method here spends; add grpo_4xsteps ({STEP_FACTOR['grpo_4xsteps']} x --steps, "
            f"evaluated every {steps} steps: its evaluation nearest the method's tokens is paired with it) or "
            f"grpo_4xg ({SAMPLE_FACTOR['grpo_4xg']} x G) to --methods" for m, b in budgets.items()]


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
             + "".join(f" {m} draws {k} x G responses per prompt and trains on G of them, kept at random: counted at "
                       f"{k} x G." for m, k in cost.get("draw_factors", {}).items())
             + "".join(f" {m} draws {k} x G responses per prompt and trains on all of them: counted at {k} x G."
                       for m, k in cost.get("sample_factors", {}).items())
             + "".join(f" {m} trains {k} x the steps ({p['steps'] * k}) on {p['step_prompts'][m]['drawn']:,} prompts "
                       f"drawn ({p['step_prompts'][m]['distinct']:,} distinct, {p['step_prompts'][m]['passes']:.2f} "
                       f"passes), evaluated every {p['steps']} steps: counted at {k} x the steps."
                       for m, k in cost.get("step_factors", {}).items()),
             seeds_line(p["seeds"]), checked_line(p)]
    lines += [f"Equal tokens: {line}." for line in p.get("equal_tokens", [])] + [""]
    for r in p["runs"]:
        what = "kept: finished before" if r["kept"] else (
            "evaluates at steps " + ", ".join(map(str, r["evaluations"]))
            + (" (0: the seed's step-0 evaluation, shared by its methods)" if r["step0"] else ""))
        lines += [f"[{r['method']} seed {r['seed']}] {what}", "  " + shlex.join(r["argv"])]
        lines += [f"  would be refused: {why}" for why in r.get("refused", [])]
    return "\n".join(lines)


def seeds_line(seeds: Sequence[int]) -> str:
    """What the seeds can give: the 95% interval over n seeds is the mean +- t(n-1) standard errors (12.7 at two)."""
    if len(seeds) < 2:
        return (f"Seeds: {', '.join(map(str, seeds))}. One seed: each interval is over that seed's held-out prompts, "
                "blind to the spread between training runs.")
    t = t_quantile(0.975, len(seeds) - 1)
    return (f"Seeds: {', '.join(map(str, seeds))} ({len(seeds)}): the 95% interval over seeds is the mean +- {t:.1f} "
            f"standard errors (Student's t at {len(seeds) - 1} degree{'s' if len(seeds) > 2 else ''} of freedom)"
            + (", so it says little; the report states how many seeds a difference would need." if t > 4 else "."))


def checked_line(p: dict) -> str:
    """Whether every command passed train_ppo_ray's parser and the checks of the device the runs take here."""
    refused = [r for r in p["runs"] if r.get("refused")]
    if not refused:
        return (f"Every command checked with train_ppo_ray's parser, OpenRLHF's and COPO's refusals and the device's "
                f"({p['device']}): none refused (the model and data files are read by each run's preflight).")
    return (f"{len(refused)} of {len(p['runs'])} commands would be refused ({p['device']}): the reasons follow each "
            "command below.")
