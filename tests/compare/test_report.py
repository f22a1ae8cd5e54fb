"""`compare.report` (issue 68, part 1): every column of a row over the same paired seeds, each run's final step, a
run that stopped short refused (a method that stops early by design said instead), sources without per-prompt
verdicts said rather than pooled into NaN, and what two seeds' intervals are."""

import json
from pathlib import Path

import pytest

from openrlhf_copo import compare
from openrlhf_copo.compare.runner import check_steps


def write_run(out: Path, method: str, seed: int, outcomes: str, steps: int = 2, settings: dict = None,
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
    infos = [write_run(tmp_path, "grpo", 0, "1000"), write_run(tmp_path, "copo", 0, "1110"),
             write_run(tmp_path, "copo", 1, "1000", zero_std=0.0)]
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
    infos = [write_run(tmp_path, "grpo", 0, "1000", steps=6, settings=settings),
             write_run(tmp_path, "copo", 0, "1100", steps=2, settings=settings)]
    with pytest.raises(SystemExit, match=r"copo-seed0 stopped at step 2 of 6 \(--steps"):
        compare.report(tmp_path, infos)
    # without recorded settings (schema 0), the other runs' steps are the measure
    old = tmp_path / "old"
    infos = [write_run(old, "grpo", 0, "1000", steps=6), write_run(old, "copo", 0, "1100", steps=2)]
    with pytest.raises(SystemExit, match=r"copo-seed0 stopped at step 2 of 6"):
        compare.report(old, infos)
    whole = tmp_path / "whole"
    infos = [write_run(whole, "grpo", 0, "1000", steps=6, settings=settings),
             write_run(whole, "copo", 0, "1100", steps=6, settings=settings)]
    assert "| 1.00 | 6 |" in compare.markdown(compare.report(whole, infos)).splitlines()[3]


def test_dapo_ends_early_by_design_and_the_report_says_so(tmp_path):
    """DAPO's dynamic filtering refills its batch from later prompts, so its run ends when the prompts run out: kept,
    its final steps shown and said with the prompts it drew; a run of it that made more steps than --steps is not."""
    settings = {"--steps": 6, "the flags after --": []}
    infos = [write_run(tmp_path, "grpo", 0, "1000", steps=6, settings=settings, consumed=36),
             write_run(tmp_path, "dapo", 0, "1100", steps=3, settings=settings, consumed=36),
             write_run(tmp_path, "grpo", 1, "1000", steps=6, settings=settings, consumed=36),
             write_run(tmp_path, "dapo", 1, "1100", steps=4, settings=settings, consumed=35)]
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
    infos = [write_run(tmp_path, "grpo", 0, "", sources=sources),
             write_run(tmp_path, "copo", 0, "", sources={"aime": None, "math": "1110"})]
    result = compare.report(tmp_path, infos)
    text = compare.markdown(result)
    assert "nan" not in text
    assert result["not_pooled"] == ["aime"]
    assert "| copo | 1 | - | - |" in text
    assert "- No pooled figure: the final evaluations of aime logged no per-prompt verdicts" in text
    assert "| copo | math | 4 | 0.750 | +0.250 [" in text


def test_the_report_says_what_two_seeds_can_tell(tmp_path):
    infos = [write_run(tmp_path, m, seed, o) for seed in (0, 1) for m, o in (("grpo", "1000"), ("copo", "1100"))]
    text = compare.markdown(compare.report(tmp_path, infos))
    assert "- Two seeds: the 95% interval over two seeds is the mean +- 12.7 standard errors (Student's t at 1 " \
           "degree of freedom), so it says little" in text
