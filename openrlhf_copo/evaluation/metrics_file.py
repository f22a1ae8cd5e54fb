"""Reading a run's metrics file (`--copo.metrics_file`): one JSON line per logged step, and one per evaluation (with
"eval": 1), as the metrics-file hook writes them. Shared by the CPU demo, the comparison tool and the benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import List

from openrlhf_copo.evaluation.metrics import parse_outcomes
from openrlhf_copo.files import jsonl_rows

__all__ = ["read_metrics", "train_rows", "eval_rows", "heldout", "greedy", "greedy_by_source"]


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
