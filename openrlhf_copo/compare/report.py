"""The report of a comparison's finished runs: per method its final greedy accuracy and its paired difference from the
baseline, pooled over the held-out sources and per source, what its runs saw at their first step; as a table."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from openrlhf_copo.contract import PROMPTS_CONSUMED
from openrlhf_copo.compare.methods import BASELINE, METHODS, stops_early
from openrlhf_copo.compare.provenance import (check_same_environment, check_same_method_flags, check_same_settings,
                                              check_same_start, read_record)
from openrlhf_copo.compare.setting import FLAGS, run_dir
from openrlhf_copo.compare.stats import POWER, TARGET_DIFFERENCES, mean_se, paired_over_seeds


#: What the report reads of a run's first step: the regime it started in.
FIRST_STEP_KEYS = ("copo_zero_std", "copo_all_incorrect", "copo_all_correct", "copo_signal_grpo", "copo_signal_copo",
                   "copo_correct", "dynamic_filtering_pass_rate")


def _pooled(sources: Dict[str, dict]) -> dict:
    """One evaluation over every source's prompts (in source order): greedy accuracy, its SE and the per-prompt
    verdicts, concatenated; a single source's figures as they are. Where a source logged no per-prompt verdicts
    nothing is pooled: greedy None, and the sources without verdicts in ``not_pooled`` (the report says so)."""
    from openrlhf_copo.evaluation.metrics import mean_at_k, mean_at_k_se

    if len(sources) == 1:
        return dict(next(iter(sources.values())))
    missing = [s for s, v in sources.items() if not v["outcomes"]]
    if not sources or missing:
        return {"greedy": None, "greedy_se": None, "outcomes": None, "not_pooled": missing}
    outcomes = [o for v in sources.values() for o in v["outcomes"]]
    scored = [[(None, bool(o))] for o in outcomes]
    return {"greedy": mean_at_k(scored), "greedy_se": mean_at_k_se(scored), "outcomes": outcomes}


def read_run(out: Path, info: dict) -> dict:
    """A finished run's evaluations (step; per source and pooled over the sources: greedy accuracy, its SE and the
    per-prompt verdicts), its first step's regime, its training steps and the prompts it had drawn by its last
    (``info``, its marker, in today's shape: `provenance.read_record`)."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, greedy_by_source, read_metrics, train_rows

    rows = read_metrics(run_dir(out, info["method"], info["seed"]) / "metrics.jsonl")
    evals = []
    for r in eval_rows(rows):
        sources = {s: {"greedy": a, "greedy_se": se, "outcomes": o} for s, (a, se, o) in greedy_by_source(r).items()}
        evals.append({"step": r["step"], "sources": sources, **_pooled(sources)})
    steps = train_rows(rows)
    first = {k: steps[0].get(k) for k in FIRST_STEP_KEYS} if steps else {}
    return {**read_record(info), "evals": evals, "first_step": first, "steps": len(steps),
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
    run's `final_point`: pooled over the held-out sources (``source`` None), or of one source. ``runs``: the runs of
    the seeds the row is over (`paired_seeds`), so that every figure of a row is over the same seeds."""
    points = [(r, final_point(r, source)) for r in runs]
    final = {(r["method"], r["seed"]): p for r, p in points if p and p["outcomes"]}
    mine = [p for r, p in points if r["method"] == method and p and p["greedy"] is not None]
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


def paired_seeds(runs: List[dict], method: str, baseline: str) -> List[int]:
    """The seeds a method's row is over: every seed of the baseline's runs for the baseline; for another method, the
    seeds where both it and the baseline made a final evaluation (a seed without its pair is left out of the row, and
    the report names it: `unpaired`)."""
    evaluated = {(r["method"], r["seed"]) for r in runs if r["evals"]}
    return sorted(s for m, s in evaluated if m == method and (method == baseline or (baseline, s) in evaluated))


def check_steps_made(out: Path, runs: List[dict], settings: Optional[dict]) -> Dict[str, dict]:
    """Refuses a report that would pair a run that stopped short: every run whose method does not stop early by
    design (`methods.stops_early`) made --steps steps (the runs' recorded --steps; where none was recorded, the
    same steps as the others) and evaluated after its last. Returns, per method that does stop early and did, its
    runs' final steps and the prompts they had drawn, for the report to say."""
    expected = (settings or {}).get(FLAGS["steps"])
    early = {r["method"]: stops_early(r["method_flags"] or METHODS.get(r["method"], [])) for r in runs}
    full = [r for r in runs if not early[r["method"]]]
    if expected is None and full:
        expected = max(r["steps"] for r in full)
    for r in runs:
        name = run_dir(out, r["method"], r["seed"]).name
        last = r["evals"][-1]["step"] if r["evals"] else None
        if r["steps"] != expected and not (early[r["method"]] and r["steps"] < expected):
            raise SystemExit(f"{out}: {name} stopped at step {r['steps']} of {expected} (--steps; its metrics file has "
                             f"{r['steps']} training steps): a run that stopped short is not paired; rerun it (it "
                             "goes on from its checkpoint), or leave it out with --methods / --seeds")
        if last != r["steps"]:
            raise SystemExit(f"{out}: {name}'s last evaluation is at step {last}, not after its last step "
                             f"({r['steps']}): its final verdicts are not its final model's")
    short = {}
    for r in runs:
        if early[r["method"]] and r["steps"] < expected:
            short.setdefault(r["method"], {"steps": expected, "final_steps": [], "prompts_consumed": []})
            short[r["method"]]["final_steps"].append(r["steps"])
            short[r["method"]]["prompts_consumed"].append(r["prompts_consumed"])
    return short


def report(out: Path, infos: List[dict], baseline: str = BASELINE, samples_per_prompt: Optional[int] = None,
           targets: Sequence[float] = TARGET_DIFFERENCES, left_out: Sequence[str] = ()) -> dict:
    """Per method: its runs' final greedy accuracy and its paired difference from ``baseline`` (with what its interval
    is over and what its seeds could detect), pooled over every held-out source (OpenRLHF splits evaluation by the
    rows' ``datasource``) and per source, what its runs saw at their first step (DAPO's from its filter, at the
    runs' recorded G, else ``samples_per_prompt``), their final step and machine-hours: every figure of a row over
    the same seeds (`paired_seeds`), the runs without a baseline run of their seed named (``unpaired``). Refuses runs
    that cannot be paired (another start, method flags, environment or settings: `provenance`) and runs that stopped
    short of --steps (`check_steps_made`). Also: the settings the runs share, the prompts each run drew, the
    methods whose runs stopped early by design (``stopped_early``), the sources not pooled (``not_pooled``) and the
    runs under ``out`` that were ``left_out`` (by --methods / --seeds)."""
    infos = [read_record(i) for i in infos]
    check_same_start(out, infos, baseline)
    check_same_method_flags(out, infos)
    check_same_environment(out, infos)
    settings = check_same_settings(out, infos)
    G = samples_per_prompt_of(out, settings, samples_per_prompt)
    runs = [read_run(out, i) for i in infos]
    stopped_early = check_steps_made(out, runs, settings)
    if G:
        for r in runs:
            r["first_step"] = first_step_regime(r["first_step"], G)
    sources = sorted({s for r in runs if r["evals"] for s in r["evals"][-1]["sources"]})
    table = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        seeds = paired_seeds(runs, method, baseline)
        over = [r for r in runs if r["seed"] in seeds and r["method"] in (method, baseline)]
        mine = [r for r in over if r["method"] == method]
        table[method] = {
            "seeds": seeds,
            "unpaired": sorted(r["seed"] for r in runs if r["method"] == method and r["seed"] not in seeds),
            **_summary(over, method, baseline, None, targets),
            "sources": {s: _summary(over, method, baseline, s, targets) for s in sources},
            "first_step": {k: mean_se([r["first_step"].get(k) if r["first_step"].get(k) is not None else float("nan")
                                       for r in mine])[0] for k in FIRST_STEP_KEYS},
            "final_steps": sorted({r["evals"][-1]["step"] for r in mine}),
            "machine_hours": sum(r["wall_seconds"] for r in mine) / 3600,
        }
    prompts = next((i["prompts"] for i in infos if i["prompts"] is not None), None)
    not_pooled = sorted({s for r in runs if r["evals"] for s in r["evals"][-1].get("not_pooled", [])})
    return {"baseline": baseline, "sources": sources, "settings": settings, "samples_per_prompt": G,
            "prompts": prompts, "targets": list(targets), "left_out": list(left_out), "table": table,
            "stopped_early": stopped_early, "not_pooled": not_pooled}


def _cell(method: str, base: str, diff: Optional[dict]) -> str:
    return ("(baseline)" if method == base else "-" if diff is None else
            f"{diff['mean']:+.3f} [{diff['ci95'][0]:+.3f}, {diff['ci95'][1]:+.3f}] over {diff['over']}")


def _final(final: tuple) -> str:
    m, se = final
    if m != m:
        return "-"  # no figure: no seed of the row, or no pooled verdicts (the report says which)
    return f"{m:.3f}" if se != se else f"{m:.3f} +- {se:.3f}"  # one seed: no spread to show


def _steps(steps: Sequence[int]) -> str:
    return "-" if not steps else str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"


def _notes(result: dict) -> List[str]:
    """What a reader of the table must know: the seeds each row is over and the runs left out of it for want of a
    baseline run of their seed, the methods whose runs ended before --steps by design, the sources not pooled, and
    what two seeds' intervals are."""
    base, table = result["baseline"], result["table"]
    notes = ["Seeds of each row (every column of a row is over these; a method's are those its baseline run shares): "
             + "; ".join(f"{m} {', '.join(map(str, row['seeds'])) or 'none'}" for m, row in table.items()) + "."]
    unpaired = [f"{m}-seed{s}" for m, row in table.items() for s in row.get("unpaired", [])]
    if unpaired:
        notes.append(f"Left out of their rows, no {base} run of their seed to pair with: {', '.join(unpaired)}.")
    for method, early in result.get("stopped_early", {}).items():
        consumed = [c for c in early["prompts_consumed"] if c is not None]
        notes.append(f"{method}'s runs ended at steps {_steps(sorted(set(early['final_steps'])))} of {early['steps']}"
                     + (f", having drawn {_steps(sorted({int(c) for c in consumed}))} prompts" if consumed else "")
                     + ": its dynamic filtering drops the groups whose responses all agree and refills the batch from "
                       "later prompts, so a run ends when the prompts run out. Its row compares its final "
                       f"evaluation with {base}'s.")
    if result.get("not_pooled"):
        notes.append(f"No pooled figure: the final evaluations of {', '.join(result['not_pooled'])} logged no "
                     "per-prompt verdicts (--copo.eval_greedy), so the held-out sources cannot be pooled prompt by "
                     "prompt; each source with verdicts has its own row.")
    if any(row["minus_baseline"] and len(row["minus_baseline"]["per_seed"]) == 2 for row in table.values()):
        notes.append("Two seeds: the 95% interval over two seeds is the mean +- 12.7 standard errors (Student's t at "
                     "1 degree of freedom), so it says little; the table of what the seeds can tell gives the seeds "
                     "a difference would need.")
    return [""] + [f"- {n}" for n in notes]


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
    the notes (`_notes`: the seeds of each row, runs that ended early by design, what two seeds can say), what the
    seeds can detect, the training prompts, and the runs left out."""
    base = result["baseline"]
    lines = [f"| method | seeds | final greedy (mean +- SE) | minus {base}, paired (95% CI, and what it is over) | "
             "zero-variance groups at step 1 | all-incorrect | responses with a gradient | machine-hours | "
             "final step |", "|---|---|---|---|---|---|---|---|---|"]

    def share(v):
        return "-" if v != v else f"{v:.2f}"

    for method, row in result["table"].items():
        first = row["first_step"]
        lines.append(f"| {method} | {len(row['seeds'])} | {_final(row['final'])} | "
                     f"{_cell(method, base, row['minus_baseline'])} | "
                     f"{share(first['copo_zero_std'])} | {share(first['copo_all_incorrect'])} | "
                     f"{share(first['copo_signal_copo'])} | {row['machine_hours']:.2f} | "
                     f"{_steps(row.get('final_steps', []))} |")
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
    lines = _prompts_line(result.get("prompts")) + lines + _notes(result) + _detectable_table(result)
    if result.get("left_out"):
        lines += ["", f"Left out by --methods / --seeds: {', '.join(result['left_out'])}."]
    return "\n".join(lines)
