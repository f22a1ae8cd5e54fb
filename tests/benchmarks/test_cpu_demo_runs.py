"""benchmarks/cpu_demo_runs.py: a fresh run is the README's command with an empty HOME, and its table reads the
committed runs back to the values docs/cpu-demo.md quotes."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
G6 = REPO / "benchmarks" / "results" / "cpu_demo" / "2026-11-25-g6"


def test_a_fresh_run_is_the_readme_command_with_nothing_cached(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENRLHF_COPO_CACHE", "/somewhere/with/the/model")
    monkeypatch.setenv("HF_HOME", "/somewhere/else")
    cmd, env = runs.fresh_command(tmp_path, ["--copo.run_dir", "x"])
    assert env["HOME"] == str(tmp_path) and "OPENRLHF_COPO_CACHE" not in env and "HF_HOME" not in env
    assert " ".join(cmd[1:5]) == "-m openrlhf_copo.cli.train_ppo_ray --advantage_estimator copo"
    assert " ".join(cmd[1:5]) in (REPO / "README.md").read_text()  # the README's main command
    assert cmd[5:] == ["--copo.run_dir", "x"]


def test_the_table_of_the_committed_runs_is_the_docs(runs):
    table = runs.report(G6)
    # Run 1 by hand from its files: 348 s; evaluations' vLLM time 40.97 s and 29.09 s; steps 28.9-40.9 s; greedy
    # 243/480 -> 383/480 (176 gained, 36 lost: +140/480); mean@2 0.286 -> 0.630.
    row = "| 1 | 5.8 min | 41 s, 29 s | 29-41 s | 0.506 -> 0.798 | +0.292 +- 0.027 (176 / 36) | 0.286 -> 0.630 |"
    assert row in table.splitlines()
    assert row in (REPO / "docs" / "cpu-demo.md").read_text()
    assert table.splitlines()[-1] == "greedy held-out gain: 5 of 5: a rise of more than 2 standard errors"


def test_a_failed_or_falling_run_is_counted_as_such(runs, tmp_path):
    import shutil

    for name in ("run1.metrics.jsonl", "run1.summary.json"):
        shutil.copy(G6 / name, tmp_path / name.replace("run1", "run2"))
    (tmp_path / "wall.txt").write_text("run 1 rc=1 wall=30 s start=00:00:00\nrun 2 rc=0 wall=348 s start=00:01:00\n")
    table = runs.report(tmp_path)
    assert "| 1 | 0.5 min | failed (exit 1; see run1.log) |" in table
    assert table.splitlines()[-1] == ("greedy held-out gain: 1 of 2: failed; "
                                      "1 of 2: a rise of more than 2 standard errors")
