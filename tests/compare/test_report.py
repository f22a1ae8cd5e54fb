"""`compare.report` (issue 68, part 1): every column of a row over the same paired seeds, each run's final step, a
run that stopped short refused (a method that stops early by design said instead), sources without per-prompt
verdicts said rather than pooled into NaN, and what two seeds' intervals are."""

import json
from pathlib import Path

import pytest

from compare_support import write_recorded, write_run, write_sources_run
from openrlhf_copo import compare
from openrlhf_copo.compare.runner import check_steps


def finished_run(out: Path, method: str, seed: int, outcomes: str, steps: int = 2, settings: dict = None,
              zero_std: float = 0.5, consumed: float = None, sources: dict = None) -> dict:
    """A finished run of ``steps`` training steps, evaluated after its last: its final greedy verdicts ``outcomes``
    (or, per source, ``sources``: {source: verdicts, None for a source that logged no per-prompt verdicts})."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    rows = [{"step": s, "copo_zero_std": zero_std, **({"prompts_consumed": consumed} if consumed else {})}
            for s in range(1, steps + 1)]
    final = {"step": steps, "eval": 1}
    for source, o in (sources or {"x": outcomes}).items():
        final[f"eval_{source}_greedy"] = 0.5 if o is None else o.count("1") / len(o)
        if o is not None:
            final[f"eval_{source}_greedy_outcomes"] = o
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [final]))
    info = {"method": method, "seed": seed, "wall_seconds": 3600.0, **({"settings": settings} if settings else {})}
    (d / "done.json").write_text(json.dumps(info))
    return info


def test_every_column_of_a_row_is_over_the_seeds_paired_with_the_baseline(tmp_path):
    """GRPO ran seed 0; COPO seeds 0 and 1. COPO's final accuracy averaged both seeds (0.75 and 0.25: 0.5) while its
    difference from GRPO was over seed 0 alone; its machine-hours counted both. Now the row is seed 0's (0.75, one
    machine-hour), and copo-seed1 is named as left out."""
    infos = [finished_run(tmp_path, "grpo", 0, "1000"), finished_run(tmp_path, "copo", 0, "1110"),
             finished_run(tmp_path, "copo", 1, "1000", zero_std=0.0)]
    result = compare.report(tmp_path, infos)
    copo = result["table"]["copo"]
    assert copo["seeds"] == [0] and copo["unpaired"] == [1]
    assert copo["final"][0] == pytest.approx(0.75) and copo["machine_hours"] == pytest.approx(1.0)
    assert copo["first_step"]["copo_zero_std"] == pytest.approx(0.5)  # seed 1's 0.0 left out with it
    assert copo["minus_baseline"]["mean"] == pytest.approx(0.5)
    text = compare.markdown(result)
    assert "| copo | 1 | 0.750 | +0.500 [" in text
    assert "- Left out of their rows, no grpo run of their seed to pair with: copo-seed1." in text
    assert "- Seeds of each row (every column of a row is over these; a method's are those its baseline run shares): " \
           "grpo 0; copo 0." in text


def test_a_run_that_stopped_short_of_its_steps_is_refused_and_each_rows_final_step_shown(tmp_path):
    """A COPO run whose metrics stop at step 2 of --steps 6 printed one clean row beside GRPO's 6 steps. Refused
    now, named with its step; runs that made every step show it in the table."""
    settings = {"--steps": 6, "the flags after --": []}
    infos = [finished_run(tmp_path, "grpo", 0, "1000", steps=6, settings=settings),
             finished_run(tmp_path, "copo", 0, "1100", steps=2, settings=settings)]
    with pytest.raises(SystemExit, match=r"copo-seed0 stopped at step 2 of 6 \(--steps"):
        compare.report(tmp_path, infos)
    # without recorded settings (schema 0), the other runs' steps are the measure
    old = tmp_path / "old"
    infos = [finished_run(old, "grpo", 0, "1000", steps=6), finished_run(old, "copo", 0, "1100", steps=2)]
    with pytest.raises(SystemExit, match=r"copo-seed0 stopped at step 2 of 6"):
        compare.report(old, infos)
    whole = tmp_path / "whole"
    infos = [finished_run(whole, "grpo", 0, "1000", steps=6, settings=settings),
             finished_run(whole, "copo", 0, "1100", steps=6, settings=settings)]
    assert "| 1.00 | 6 |" in compare.markdown(compare.report(whole, infos)).splitlines()[3]


def test_dapo_ends_early_by_design_and_the_report_says_so(tmp_path):
    """DAPO's dynamic filtering refills its batch from later prompts, so its run ends when the prompts run out: kept,
    its final steps shown and said with the prompts it drew; a run of it that made more steps than --steps is not."""
    settings = {"--steps": 6, "the flags after --": []}
    infos = [finished_run(tmp_path, "grpo", 0, "1000", steps=6, settings=settings, consumed=36),
             finished_run(tmp_path, "dapo", 0, "1100", steps=3, settings=settings, consumed=36),
             finished_run(tmp_path, "grpo", 1, "1000", steps=6, settings=settings, consumed=36),
             finished_run(tmp_path, "dapo", 1, "1100", steps=4, settings=settings, consumed=35)]
    result = compare.report(tmp_path, infos)
    assert result["stopped_early"]["dapo"]["final_steps"] == [3, 4]
    text = compare.markdown(result)
    assert "| 2.00 | 3-4 |" in text
    assert "- dapo's runs ended at steps 3-4 of 6, having drawn 35-36 prompts: its dynamic filtering" in text
    assert check_steps(compare.run_dir(tmp_path, "dapo", 0) / "metrics.jsonl", 6, stops_early=True) is None
    assert check_steps(compare.run_dir(tmp_path, "dapo", 0) / "metrics.jsonl", 6) == \
        "it made 3 training steps, not --steps 6"
    assert compare.stops_early(compare.METHODS["dapo"]) and not compare.stops_early(compare.METHODS["copo"])


def test_a_source_without_per_prompt_verdicts_is_said_not_pooled_into_nan(tmp_path):
    """Two held-out sources, one of which logged its accuracy but no per-prompt verdicts: the pooled final accuracy
    was NaN in the table. Now no pooled figure, a note naming the source, and the other source's row as it is."""
    sources = {"aime": None, "math": "1100"}
    infos = [finished_run(tmp_path, "grpo", 0, "", sources=sources),
             finished_run(tmp_path, "copo", 0, "", sources={"aime": None, "math": "1110"})]
    result = compare.report(tmp_path, infos)
    text = compare.markdown(result)
    assert "nan" not in text
    assert result["not_pooled"] == ["aime"]
    assert "| copo | 1 | - | - |" in text
    assert "- No pooled figure: the final evaluations of aime logged no per-prompt verdicts" in text
    assert "| copo | math | 4 | 0.750 | +0.250 [" in text


def test_the_report_says_what_two_seeds_can_tell(tmp_path):
    infos = [finished_run(tmp_path, m, seed, o) for seed in (0, 1) for m, o in (("grpo", "1000"), ("copo", "1100"))]
    text = compare.markdown(compare.report(tmp_path, infos))
    assert "- Two seeds: the 95% interval over two seeds is the mean +- 12.7 standard errors (Student's t at 1 " \
           "degree of freedom), so it says little" in text


def test_the_report_pairs_each_method_with_grpo_prompt_by_prompt_and_over_seeds(tmp_path):
    """Two seeds, 4 held-out prompts. COPO - GRPO per prompt: seed 0 (1100 - 1000) = [0, 1, 0, 0], gain 0.25;
    seed 1 (1110 - 0110) = [1, 0, 0, 0], gain 0.25; seed-level mean 0.25, SE 0: interval [0.25, 0.25]. NGRPO, seed 0
    only (0000 - 1000 = [-1, 0, 0, 0]): gain -0.25, std 0.5 (ddof 1), prompt-level SE 0.25, interval -0.25 +- 1.96 x
    0.25. GRPO's final accuracy: 0.25 and 0.5, mean 0.375, SE 0.125."""
    first = {"copo_zero_std": 0.75, "copo_all_incorrect": 0.5, "copo_signal_copo": 0.25}
    infos = [write_run(tmp_path, "grpo", 0, "1000", first), write_run(tmp_path, "copo", 0, "1100", first),
             write_run(tmp_path, "ngrpo", 0, "0000", first), write_run(tmp_path, "grpo", 1, "0110", first),
             write_run(tmp_path, "copo", 1, "1110", {**first, "copo_zero_std": 0.25})]
    result = compare.report(tmp_path, infos)
    copo = result["table"]["copo"]
    assert copo["minus_baseline"]["mean"] == pytest.approx(0.25) and copo["minus_baseline"]["ci95"] == \
        pytest.approx((0.25, 0.25))
    assert [p["gain"] for p in copo["minus_baseline"]["per_seed"]] == pytest.approx([0.25, 0.25])
    assert copo["first_step"]["copo_zero_std"] == pytest.approx(0.5)  # (0.75 + 0.25) / 2
    assert copo["final"][0] == pytest.approx((0.5 + 0.75) / 2)
    ngrpo = result["table"]["ngrpo"]["minus_baseline"]
    assert ngrpo["mean"] == pytest.approx(-0.25) and ngrpo["ci95"] == pytest.approx((-0.25 - 1.96 * 0.25,
                                                                                     -0.25 + 1.96 * 0.25))
    text = compare.markdown(result)
    # no run logged its generated tokens: no equal-token figure, and no table of tokens
    assert "| grpo | 2 | 0.375 +- 0.125 | (baseline) | (baseline) | 0.75 | 0.50 | 0.25 | 0.20 |" in text
    assert "| copo | 2 | 0.625 +- 0.125 | +0.250 [+0.250, +0.250] over seeds | tokens not logged | 0.50 |" in text
    assert "Generated tokens of the training rollouts" not in text
    assert "| ngrpo | 1 | 0.000 | -0.250 [-0.740, +0.240] over prompts (one seed) |" in text


def test_dapos_first_step_is_read_from_its_filter(tmp_path):
    """DAPO (OpenRLHF's group_norm) logs no copo_* values; its filter logs 100 x responses kept / prompts drawn. At
    G = 6, 240 means 2.4 of 6 responses per drawn prompt kept: 0.4 of the responses carry a gradient, 0.6 of the
    groups had zero variance."""
    infos = [write_run(tmp_path, "grpo", 0, "1000", {"copo_zero_std": 0.5, "copo_signal_copo": 0.5}),
             write_run(tmp_path, "dapo", 0, "1100", {"dynamic_filtering_pass_rate": 240.0})]
    first = compare.report(tmp_path, infos, samples_per_prompt=6)["table"]["dapo"]["first_step"]
    assert first["copo_signal_copo"] == pytest.approx(0.4) and first["copo_zero_std"] == pytest.approx(0.6)
    unread = compare.report(tmp_path, infos)["table"]["dapo"]["first_step"]  # G unknown: not guessed
    assert unread["copo_signal_copo"] != unread["copo_signal_copo"]


def test_the_report_gives_every_held_out_source_and_the_pooled_result(tmp_path):
    """COPO +0.1 on 10 AIME prompts and -0.5 on 50 MATH-500 prompts: pooled over the 60 prompts, (1 - 25) / 60 = -0.4,
    not AIME's +0.100 (the first eval_*_greedy key in alphabetical order, all that was read before)."""
    grpo = {"aime24": "0" * 10, "math500": "1" * 25 + "0" * 25}
    copo = {"aime24": "1" + "0" * 9, "math500": "0" * 50}
    infos = [write_sources_run(tmp_path, "grpo", 0, grpo), write_sources_run(tmp_path, "copo", 0, copo)]
    result = compare.report(tmp_path, infos)
    row = result["table"]["copo"]
    assert row["minus_baseline"]["mean"] == pytest.approx(-0.4)
    assert result["sources"] == ["aime24", "math500"] and row["prompts"] == 60
    assert row["final"][0] == pytest.approx(1 / 60)
    assert row["sources"]["aime24"]["minus_baseline"]["mean"] == pytest.approx(0.1)
    assert row["sources"]["math500"]["minus_baseline"]["mean"] == pytest.approx(-0.5)
    assert row["sources"]["math500"]["prompts"] == 50
    text = compare.markdown(result)
    assert "| copo | 1 | 0.017 | -0.400 [" in text
    assert "| copo | aime24 | 10 | 0.100 | +0.100 [" in text and "| copo | math500 | 50 | 0.000 | -0.500 [" in text


def test_report_only_reports_every_run_there_at_its_recorded_g_and_names_what_a_filter_leaves_out(tmp_path):
    """3 methods x 3 seeds made at G = 16: --report_only alone reported grpo and copo of seeds 0 and 1 (the run
    defaults) and read DAPO's filter at G = 6 (a share of 1.33). Now all 9 runs at G = 16: 480 / (100 x 16) = 0.3;
    --methods / --seeds filter and the report names the runs they left out."""
    from openrlhf_copo.cli import compare as cli

    settings = {"--samples_per_prompt": 16, "--steps": 1, "the flags after --": []}
    for seed in range(3):
        write_recorded(tmp_path, "grpo", seed, "1000", {"copo_zero_std": 0.5}, settings)
        write_recorded(tmp_path, "copo", seed, "1100", {"copo_zero_std": 0.5}, settings)
        write_recorded(tmp_path, "dapo", seed, "1010", {"dynamic_filtering_pass_rate": 480.0}, settings)
    assert cli.main(["--report_only", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert {m: row["seeds"] for m, row in saved["table"].items()} == {m: [0, 1, 2] for m in ("grpo", "copo", "dapo")}
    assert saved["samples_per_prompt"] == 16 and saved["left_out"] == []
    assert saved["table"]["dapo"]["first_step"]["copo_signal_copo"] == pytest.approx(0.3)
    assert cli.main(["--report_only", "--out", str(tmp_path), "--methods", "grpo", "copo", "--seeds", "0", "1"]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert list(saved["table"]) == ["grpo", "copo"] and saved["table"]["copo"]["seeds"] == [0, 1]
    assert sorted(saved["left_out"]) == ["copo-seed2", "dapo-seed0", "dapo-seed1", "dapo-seed2", "grpo-seed2"]
    assert "Left out by --methods / --seeds: " in (tmp_path / "report.md").read_text()
    with pytest.raises(SystemExit, match="--samples_per_prompt 6, but the runs there were made with 16"):
        cli.main(["--report_only", "--out", str(tmp_path), "--samples_per_prompt", "6"])
