"""The report of a comparison's finished runs: per method its final greedy accuracy and its paired difference from the
baseline, pooled over the held-out sources and per source, what its runs saw at their first step; as a table."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from openrlhf_copo.contract import PROMPTS_CONSUMED
from openrlhf_copo.compare.methods import BASELINE
from openrlhf_copo.compare.provenance import (check_same_environment, check_same_method_flags, check_same_settings,
                                              check_same_start)
from openrlhf_copo.compare.setting import FLAGS, run_dir
from openrlhf_copo.compare.stats import POWER, TARGET_DIFFERENCES, mean_se, paired_over_seeds


#: What the report reads of a run's first step: the regime it started in.
FIRST_STEP_KEYS = ("copo_zero_std", "copo_all_incorrect", "copo_all_correct", "copo_signal_grpo", "copo_signal_copo",
                   "copo_correct", "dynamic_filtering_pass_rate")



def _pooled(sources: Dict[str, dict]) -> dict:
    """One evaluation over every source's prompts (in source order): greedy accuracy, its SE and the per-prompt
    verdicts, concatenated; without every source's verdicts, only a single source's figures."""
    from openrlhf_copo.evaluation.metrics import mean_at_k, mean_at_k_se

    if len(sources) == 1:
        return dict(next(iter(sources.values())))
    if not sources or any(not v["outcomes"] for v in sources.values()):
        return {"greedy": float("nan"), "greedy_se": float("nan"), "outcomes": None}
    outcomes = [o for v in sources.values() for o in v["outcomes"]]
    scored = [[(None, bool(o))] for o in outcomes]
    return {"greedy": mean_at_k(scored), "greedy_se": mean_at_k_se(scored), "outcomes": outcomes}



def read_run(out: Path, info: dict) -> dict:
    """A finished run's evaluations (step; per source and pooled over the sources: greedy accuracy, its SE and the
    per-prompt verdicts) and its first step's regime."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, greedy_by_source, read_metrics, train_rows

    rows = read_metrics(run_dir(out, info["method"], info["seed"]) / "metrics.jsonl")
    evals = []
    for r in eval_rows(rows):
        sources = {s: {"greedy": a, "greedy_se": se, "outcomes": o} for s, (a, se, o) in greedy_by_source(r).items()}
        evals.append({"step": r["step"], "sources": sources, **_pooled(sources)})
    steps = train_rows(rows)
    first = {k: steps[0].get(k) for k in FIRST_STEP_KEYS} if steps else {}
    return {**info, "evals": evals, "first_step": first, "steps": len(steps),
            "prompts_consumed": steps[-1].get(PROMPTS_CONSUMED) if steps else None}



def first_step_regime(first: dict, samples_per_prompt: int) -> dict:
    """What a run saw at its first step, with DAPO's read from its filter: OpenRLHF's estimators log no copo_* values,
    and dynamic filtering logs 100 x responses kept / prompts drawn (OpenRLHF 0.11.2, samples_generator.py), so the
    share of groups kept is that over 100 G: the share of drawn responses with a gradient; the rest had zero variance."""
    out = dict(first)
    rate = first.get("dynamic_filtering_pass_rate")
    if rate is not None and first.get("copo_signal_copo") is None:
        kept = rate / (100 * samples_per_prompt)
        out.update({"copo_signal_copo": kept, "copo_zero_std": 1 - kept})
    return out



def final_point(run: dict, source: Optional[str] = None) -> Optional[dict]:
    """A run's last evaluation (greedy accuracy, its SE, the per-prompt verdicts: `read_run`), pooled over every
    held-out source when ``source`` is None, else of that source alone; None where the run made no evaluation, or
    none of that source."""
    if not run["evals"]:
        return None
    last = run["evals"][-1]
    return last if source is None else last["sources"].get(source)



def _summary(runs: List[dict], method: str, baseline: str, source: Optional[str], targets: Sequence[float]) -> dict:
    """A method's final greedy accuracy (mean, SE over seeds) and its paired difference from the baseline, at each
    run's `final_point`: pooled over the held-out sources (``source`` None), or of one source."""
    points = [(r, final_point(r, source)) for r in runs]
    final = {(r["method"], r["seed"]): p for r, p in points if p and p["outcomes"]}
    mine = [p for r, p in points if r["method"] == method and p]
    return {"final": mean_se([p["greedy"] for p in mine]),
            "minus_baseline": paired_over_seeds(final, method, baseline, targets) if method != baseline else None,
            "prompts": len(mine[0]["outcomes"]) if mine and mine[0]["outcomes"] else None}



def samples_per_prompt_of(out: Path, settings: Optional[dict], given: Optional[int]) -> Optional[int]:
    """The G the runs were made with: their recorded one (done.json's settings), else ``given``; refused when both
    are there and differ (a report that read DAPO's filter at another G would give shares above 1)."""
    recorded = (settings or {}).get(FLAGS["samples_per_prompt"])
    if recorded and given and recorded != given:
        raise SystemExit(f"{out}: --samples_per_prompt {given}, but the runs there were made with {recorded}: leave "
                         "it out, the report reads the runs' own")
    return recorded or given



def report(out: Path, infos: List[dict], baseline: str = BASELINE, samples_per_prompt: Optional[int] = None,
           targets: Sequence[float] = TARGET_DIFFERENCES, left_out: Sequence[str] = ()) -> dict:
    """Per method: its runs' final greedy accuracy and its paired difference from ``baseline`` (with what its interval
    is over and what its seeds could detect), pooled over every held-out source (OpenRLHF splits evaluation by the
    rows' ``datasource``) and per source, and what its runs saw at their first step (DAPO's from its filter, at the
    runs' recorded G, else ``samples_per_prompt``); the settings the runs share, the prompts each run drew, and the
    runs under ``out`` that were ``left_out`` (by --methods / --seeds)."""
    check_same_start(out, infos, baseline)
    check_same_method_flags(out, infos)
    check_same_environment(out, infos)
    settings = check_same_settings(out, infos)
    G = samples_per_prompt_of(out, settings, samples_per_prompt)
    runs = [read_run(out, i) for i in infos]
    if G:
        for r in runs:
            r["first_step"] = first_step_regime(r["first_step"], G)
    sources = sorted({s for r in runs if r["evals"] for s in r["evals"][-1]["sources"]})
    table = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method and r["evals"]]
        table[method] = {
            "seeds": sorted(r["seed"] for r in mine),
            **_summary(runs, method, baseline, None, targets),
            "sources": {s: _summary(runs, method, baseline, s, targets) for s in sources},
            "first_step": {k: mean_se([r["first_step"].get(k) if r["first_step"].get(k) is not None else float("nan")
                                       for r in mine])[0] for k in FIRST_STEP_KEYS},
            "machine_hours": sum(r["wall_seconds"] for r in mine) / 3600,
        }
    prompts = next((i["prompts"] for i in infos if "prompts" in i), None)
    return {"baseline": baseline, "sources": sources, "settings": settings, "samples_per_prompt": G,
            "prompts": prompts, "targets": list(targets), "left_out": list(left_out), "table": table}



def _cell(method: str, base: str, diff: Optional[dict]) -> str:
    return ("(baseline)" if method == base else "-" if diff is None else
            f"{diff['mean']:+.3f} [{diff['ci95'][0]:+.3f}, {diff['ci95'][1]:+.3f}] over {diff['over']}")



def _final(final: tuple) -> str:
    m, se = final
    return f"{m:.3f}" if se != se else f"{m:.3f} +- {se:.3f}"  # one seed: no spread to show



def _prompts_line(prompts: Optional[dict]) -> List[str]:
    """What each run trained on, in words (`prompt_plan`), or nothing for runs that did not record it."""
    if not prompts:
        return []
    return [f"Training prompts of every run: {prompts['drawn']:,} drawn, {prompts['distinct']:,} distinct of the "
            f"file's {prompts['source_rows']:,} ({prompts['passes']:.2f} passes; {prompts['episodes']} OpenRLHF "
            f"episode{'s' if prompts['episodes'] > 1 else ''}).", ""]



def _detectable_table(result: dict) -> List[str]:
    """Per method: what its seeds could detect and how many seeds each target difference would need (`detectable`)."""
    base, targets = result["baseline"], result.get("targets", TARGET_DIFFERENCES)
    rows = [(m, row["minus_baseline"]["detectable"]) for m, row in result["table"].items()
            if row["minus_baseline"] and "detectable" in row["minus_baseline"]]
    if not rows:
        return []

    def num(v, fmt="{:.3f}"):
        return "-" if v is None else fmt.format(v)

    lines = ["", f"What the seeds can tell (minus {base}, pooled; two-sided paired t-test over seeds at 5%, from the "
             "SD of the per-seed differences): the 95% interval's half-width (the smallest observed difference these "
             f"seeds call non-zero), the smallest true difference they detect with {POWER:.0%} power, and the seeds "
             "a true difference would need at this SD. One seed has no spread over seeds: none of it can be said.",
             "", "| method | seeds | SD of per-seed difference | 95% half-width | detectable at "
             f"{POWER:.0%} power | " + " | ".join(f"seeds for {t:g}" for t in targets) + " |",
             "|---|---|---|---|---|" + "---|" * len(targets)]
    for method, d in rows:
        need = [num(d["seeds_for"].get(str(t)), "{}") for t in targets]
        lines.append(f"| {method} | {d['seeds']} | {num(d['sd'])} | {num(d['half_width95'])} | "
                     f"{num(d['detectable'])} | " + " | ".join(need) + " |")
    return lines



def markdown(result: dict) -> str:
    """The report as a table, one row per method (pooled over the held-out sources), then, with more than one
    source, one row per method and source; each interval says what it is over (seeds, or one seed's prompts); then
    what the seeds can detect, the training prompts, and the runs left out."""
    base = result["baseline"]
    lines = [f"| method | seeds | final greedy (mean +- SE) | minus {base}, paired (95% CI, and what it is over) | "
             "zero-variance groups at step 1 | all-incorrect | responses with a gradient | machine-hours |",
             "|---|---|---|---|---|---|---|---|"]

    def share(v):
        return "-" if v != v else f"{v:.2f}"

    for method, row in result["table"].items():
        first = row["first_step"]
        lines.append(f"| {method} | {len(row['seeds'])} | {_final(row['final'])} | "
                     f"{_cell(method, base, row['minus_baseline'])} | "
                     f"{share(first['copo_zero_std'])} | {share(first['copo_all_incorrect'])} | "
                     f"{share(first['copo_signal_copo'])} | {row['machine_hours']:.2f} |")
    sources = result.get("sources", [])
    if len(sources) > 1:
        lines = [f"Held-out prompts of {len(sources)} sources, pooled in the first table (every prompt weighs the "
                 "same), each alone in the second.", ""] + lines
        lines += ["", f"| method | source | prompts | final greedy (mean +- SE) | minus {base}, paired (95% CI) |",
                  "|---|---|---|---|---|"]
        for method, row in result["table"].items():
            for source, cell in row["sources"].items():
                lines.append(f"| {method} | {source} | {cell['prompts'] or '-'} | {_final(cell['final'])} | "
                             f"{_cell(method, base, cell['minus_baseline'])} |")
    lines = _prompts_line(result.get("prompts")) + lines + _detectable_table(result)
    if result.get("left_out"):
        lines += ["", f"Left out by --methods / --seeds: {', '.join(result['left_out'])}."]
    return "\n".join(lines)
