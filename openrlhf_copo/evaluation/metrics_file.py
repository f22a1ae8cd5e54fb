"""Reading a run's metrics file (`--copo.metrics_file`): one JSON line per logged step, and one per evaluation (with
"eval": 1), as the metrics-file hook writes them; a run's generated tokens per step and in total (`generated_tokens`,
from whatever the run logged: `TOKEN_SOURCES`). Shared by the CPU demo, the comparison tool and the benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from openrlhf_copo.contract import ADA_TOKENS, GENERATED_TOKENS, GENERATED_TOKENS_TOTAL, PROMPTS_CONSUMED
from openrlhf_copo.evaluation.metrics import parse_outcomes
from openrlhf_copo.files import jsonl_rows

__all__ = ["read_metrics", "train_rows", "eval_rows", "heldout", "greedy", "greedy_by_source", "generated_tokens",
           "tokens_at", "TOKEN_SOURCES"]


def read_metrics(path: Path) -> List[dict]:
    """Every row of the file; [] if it does not exist yet."""
    if not path.exists():
        return []
    return [row for _, row in jsonl_rows(path, partial_last_line=True)]  # the last line may be being written


def train_rows(rows: List[dict]) -> List[dict]:
    """The per-step rows of a metrics file (evaluation rows carry "eval": 1)."""
    return [r for r in rows if not r.get("eval")]


def eval_rows(rows: List[dict]) -> List[dict]:
    return [r for r in rows if r.get("eval")]


def heldout(row: dict) -> tuple:
    """(mean@k, its standard error, k) of an evaluation row (the first data source's)."""
    for key in sorted(row):
        if key.startswith("eval_") and key[:-1].rstrip("0123456789").endswith("_mean") and not key.endswith("_se"):
            k = int(key.rsplit("_mean", 1)[1])
            return float(row[key]), float(row.get(f"{key}_se", float("nan"))), k
    return float("nan"), float("nan"), 0


def greedy_by_source(row: dict) -> dict:
    """{data source: (greedy accuracy, its standard error, per-prompt outcomes or None)} of an evaluation row, in
    the sources' alphabetical order (OpenRLHF evaluates each ``datasource`` of the held-out rows apart)."""
    out = {}
    for key in sorted(row):
        if key.startswith("eval_") and key.endswith("_greedy"):
            outcomes = row.get(f"{key}_outcomes")
            out[key[len("eval_"):-len("_greedy")]] = (float(row[key]), float(row.get(f"{key}_se", float("nan"))),
                                                     parse_outcomes(outcomes) if outcomes else None)
    return out


def greedy(row: dict) -> tuple:
    """(greedy accuracy, its standard error, per-prompt outcomes or None) of an evaluation row (the first data
    source's: the CPU demo's held-out set is one source); NaNs when the row has no greedy evaluation."""
    return next(iter(greedy_by_source(row).values()), (float("nan"), float("nan"), None))


#: Where `generated_tokens` reads a step's generated tokens from, most exact first, and how exact each is.
TOKEN_SOURCES = {
    "counted": f"`{GENERATED_TOKENS}`, counted in the rollout (patch 4): every response drawn for training, DAPO's "
               "dropped groups and Reinforce-Ada's later rounds included, each as long as OpenRLHF's response_length",
    "reinforce_ada": f"`{ADA_TOKENS}`, Reinforce-Ada's own count of every round's responses: the same count, exact",
    "dapo_estimate": "DAPO before the counted metric: the responses drawn (the step's prompts drawn x G) times the "
                     "mean length of the responses kept; an estimate, as the dropped groups' lengths were not logged",
    "rollout": "rollout/num_samples x rollout/response_length_mean: the responses trained on, which are all those "
               "drawn when none is dropped; exact to the float32 mean's rounding (rounded to whole tokens)",
    "unknown": "a step that logged none of these: its tokens, and the run's total from it on, are unknown (NaN)",
}


def generated_tokens(rows: List[dict], samples_per_prompt: Optional[int] = None) -> dict:
    """A run's generated tokens (training rollouts; the held-out evaluation apart), from its metrics rows:
    {"steps": [...], "tokens": [the step's], "cumulative": [the run's total after the step], "sources": [the
    `TOKEN_SOURCES` its steps were read from]}. Each step from the first of these it logged:

    - "counted": `contract.GENERATED_TOKENS` (every run since the metric exists), with the run's own total
      `GENERATED_TOKENS_TOTAL` as the cumulative: exact, every response drawn;
    - "reinforce_ada": `ADA_TOKENS` (Reinforce-Ada runs before it): exact, every round;
    - "dapo_estimate": a step of dynamic filtering (``dynamic_filtering_pass_rate``) before it: the prompts the step
      drew (the change in `PROMPTS_CONSUMED`) x ``samples_per_prompt`` x the kept responses' mean length, an estimate
      (the dropped groups' own lengths were not logged); without ``samples_per_prompt``, counted as "rollout" (the
      kept responses only: a lower bound);
    - "rollout": OpenRLHF's rollout/num_samples x rollout/response_length_mean, rounded: exact where nothing is
      dropped (the mean is float32);
    - "unknown": none of these (NaN).

    The cumulative of the sources other than "counted" is the sum over the steps."""
    rows = train_rows(rows)
    steps, tokens, cumulative, sources = [], [], [], []
    total, consumed = 0.0, 0.0
    for row in rows:
        if row.get(GENERATED_TOKENS) is not None:
            source, step_tokens = "counted", row[GENERATED_TOKENS]
        elif row.get(ADA_TOKENS) is not None:
            source, step_tokens = "reinforce_ada", row[ADA_TOKENS]
        elif row.get("dynamic_filtering_pass_rate") is not None and samples_per_prompt and \
                row.get(PROMPTS_CONSUMED) is not None:
            source = "dapo_estimate"
            step_tokens = (row[PROMPTS_CONSUMED] - consumed) * samples_per_prompt * row["rollout/response_length_mean"]
        elif row.get("rollout/num_samples") is not None and row.get("rollout/response_length_mean") is not None:
            source = "rollout"
            step_tokens = round(row["rollout/num_samples"] * row["rollout/response_length_mean"])
        else:
            source, step_tokens = "unknown", float("nan")
        if row.get(PROMPTS_CONSUMED) is not None:
            consumed = row[PROMPTS_CONSUMED]
        total += step_tokens
        steps.append(row["step"])
        tokens.append(step_tokens)
        cumulative.append(row[GENERATED_TOKENS_TOTAL] if source == "counted" and
                          row.get(GENERATED_TOKENS_TOTAL) is not None else total)
        sources.append(source)
    return {"steps": steps, "tokens": tokens, "cumulative": cumulative, "sources": sorted(set(sources))}


def tokens_at(tokens: dict, step: int) -> float:
    """The tokens a run had generated when it was evaluated at ``step`` (`generated_tokens`'s cumulative at its last
    training step up to it; 0 before the first)."""
    done = [c for s, c in zip(tokens["steps"], tokens["cumulative"]) if s <= step]
    return done[-1] if done else 0.0
