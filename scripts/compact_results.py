"""The committed benchmark results in their compact form, in place (`openrlhf_copo.files`):

    .venv/bin/python scripts/compact_results.py                 # benchmarks/results
    .venv/bin/python scripts/compact_results.py --results DIR   # another results folder

- every finished run (a folder with its `done.json`): its `train.log` as `train.log.gz`, progress-bar redraws dropped
  (`files.compact_finished_run`, what the comparison tool's runner does once a run finishes);
- the reports' JSON (`regimes.json`, `learning_curve.json`) on one line (`files.write_json`, what their writers write
  now), the values unchanged;
- every PNG in 256 colours (`files.compact_png`, what the reports' `save_figure` writes now).

Written for the results made before their writers were compact; safe to run again (each step leaves a compact file
as it is), e.g. after a merge brings back an indented report. Prints the size of the results before and after.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrlhf_copo.files import compact_finished_run, compact_png, write_json  # noqa: E402

#: The reports whose JSON is generated from the runs (benchmarks/regimes.py report, benchmarks/learning_curve.py).
REPORT_JSON = ("regimes.json", "learning_curve.json")


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def compact_results(results: Path) -> None:
    """Every finished run's log, every report's JSON and every PNG under ``results``, compact."""
    for marker in sorted(results.rglob("done.json")):
        compact_finished_run(marker.parent)
    for name in REPORT_JSON:
        for path in sorted(results.rglob(name)):
            write_json(path, json.loads(path.read_text()))
    for path in sorted(results.rglob("*.png")):
        compact_png(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        p.error(f"--results {args.results}: not a folder")
    before = size(args.results)
    compact_results(args.results)
    print(f"{args.results}: {before / 2**20:.1f} MiB -> {size(args.results) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
