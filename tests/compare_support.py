"""Helpers of the comparison tool's tests (tests/compare/, tests/cli/test_compare.py): settings and finished runs
written as the tool writes them, on small files."""

import json
from pathlib import Path

from openrlhf_copo import compare

def setting(tmp_path, **kw):
    return compare.Setting(model="base-model", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", **kw)


def write_run(out: Path, method: str, seed: int, outcomes: str, first_step: dict, hours: float = 0.1) -> dict:
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": 0, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": "0101"},
            {"step": 1, **first_step},
            {"step": 1, "eval": 1, "eval_x_greedy": outcomes.count("1") / 4, "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"method": method, "seed": seed, "wall_seconds": hours * 3600}
    (d / "done.json").write_text(json.dumps(info))
    return info


def write_sources_run(out: Path, method: str, seed: int, outcomes: dict, settings: dict = None) -> dict:
    """A finished run whose final evaluation has one greedy evaluation per data source, as OpenRLHF logs a held-out
    file that mixes `datasource`s (eval_<source>_greedy and its per-prompt outcomes), made in this environment."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    row = {"step": 1, "eval": 1}
    for source, o in outcomes.items():
        row.update({f"eval_{source}_greedy": o.count("1") / len(o), f"eval_{source}_greedy_outcomes": o})
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "copo_zero_std": 0.5}) + "\n" + json.dumps(row) + "\n")
    info = {"method": method, "seed": seed, "wall_seconds": 60.0, **({"settings": settings} if settings else {}),
            "environment": compare.environment()}
    (d / "done.json").write_text(json.dumps(info))
    return info


#: What the CPU path needs of a run that OpenRLHF's defaults do not give (cpu.cpu_problems refuses nccl and
#: flash-attention); fp32 is the CPU demo's dtype.
CPU_FLAGS = ["--vllm.sync_backend", "gloo", "--ds.attn_implementation", "sdpa", "--ds.param_dtype", "fp32"]


def _data(tmp_path, rows: int = 10) -> None:
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(rows)))
    (tmp_path / "test.jsonl").write_text('{"prompt": "t", "label": "1"}\n' * 4)


def write_recorded(out: Path, method: str, seed: int, outcomes: str, first: dict, settings: dict) -> None:
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": 1, **first}, {"step": 1, "eval": 1, "eval_x_greedy": outcomes.count("1") / len(outcomes),
                                   "eval_x_greedy_outcomes": outcomes}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "done.json").write_text(json.dumps({"method": method, "seed": seed, "wall_seconds": 60.0,
                                             "settings": settings}))



def write_token_run(out: Path, method: str, seed: int, tokens_per_step: int, steps: int, evals: dict,
                    **record) -> dict:
    """A finished run that logged its generated tokens as patch 4 does (``tokens_per_step`` each of its ``steps``
    steps, with the running total), evaluated at each step of ``evals`` ({step: per-prompt greedy verdicts});
    ``record``: what else its done.json holds (``sample_factor``, ``step_factor``)."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": s, "copo_zero_std": 0.5, "copo_generated_tokens": tokens_per_step,
             "copo_generated_tokens_total": tokens_per_step * s} for s in range(1, steps + 1)]
    rows += [{"step": s, "eval": 1, "eval_x_greedy": o.count("1") / len(o), "eval_x_greedy_outcomes": o}
             for s, o in evals.items()]
    rows.sort(key=lambda r: (r["step"], r.get("eval", 0)))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"method": method, "seed": seed, "wall_seconds": 60.0, **record}
    (d / "done.json").write_text(json.dumps(info))
    return info
