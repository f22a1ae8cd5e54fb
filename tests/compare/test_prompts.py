"""`compare.prompts`: the prompts every run draws, and the file it trains on."""

import collections
import json

import pytest

from compare_support import setting
from openrlhf_copo import compare


def test_the_runs_train_on_exactly_their_prompts(tmp_path):
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cut, episodes = compare.train_file(setting(tmp_path, prompts_per_step=3, steps=2), tmp_path / "out")
    assert [json.loads(x)["prompt"] for x in cut.read_text().splitlines()] == ["q0", "q1", "q2", "q3", "q4", "q5"]
    assert episodes == 1
    assert compare.train_file(setting(tmp_path, prompts_per_step=5, steps=2), tmp_path / "out") == \
        (tmp_path / "train.jsonl", 1)
    with pytest.raises(SystemExit, match="10 prompts, fewer than --prompts_per_step 11"):
        compare.train_file(setting(tmp_path, prompts_per_step=11, steps=1), tmp_path / "out")


def test_whole_passes_that_use_every_prompt_stay_openrlhf_episodes_over_the_same_file(tmp_path, load_args):
    """Where whole passes use every prompt the data and the steps allow, a run is OpenRLHF episodes as before issue
    49, byte for byte: 4 steps of 5 from 10 prompts are 2 passes over the given file, 15 steps of 2 are 3; 2 steps
    of 4 from 10 are one pass over the first 8. (6 steps of 3 were 2 passes over the first 9: now all 10 are drawn.)"""
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = setting(tmp_path, prompts_per_step=5, steps=4)
    assert compare.train_file(s, tmp_path / "out") == (tmp_path / "train.jsonl", 2)
    args = load_args(compare.run_argv(s, "copo", 0, tmp_path / "copo-seed0", tmp_path / "train.jsonl", True, 2))
    assert (args.train.num_episodes, args.rollout.batch_size) == (2, 5)
    assert compare.train_file(setting(tmp_path, prompts_per_step=2, steps=15), tmp_path / "out") == \
        (tmp_path / "train.jsonl", 3)
    cut, episodes = compare.train_file(setting(tmp_path, prompts_per_step=4, steps=2), tmp_path / "out")
    assert cut.read_text() == "".join(json.dumps(r) + "\n" for r in rows[:8]) and episodes == 1
    assert compare.prompt_plan(setting(tmp_path, prompts_per_step=3, steps=6), tmp_path / "out")["distinct"] == 10


def test_more_steps_than_the_prompts_use_every_prompt_in_one_episode_of_whole_passes_and_a_partial_one(tmp_path):
    """12 steps of 3 from 10 prompts: until issue 49, 4 passes over the first 9 prompts; now one episode over 36 rows,
    every prompt 3 times and 6 of them (a fixed choice) a 4th: 10 distinct, 3.6 passes, whole steps only."""
    rows = [{"prompt": f"q{i}", "label": str(i)} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = setting(tmp_path, prompts_per_step=3, steps=12)
    cut, episodes = compare.train_file(s, tmp_path / "out")
    drawn = [json.loads(x)["prompt"] for x in cut.read_text().splitlines()]
    assert (len(drawn), episodes, len(set(drawn))) == (36, 1, 10)
    assert sorted(drawn.count(q) for q in set(drawn)) == [3] * 4 + [4] * 6
    plan = compare.prompt_plan(s, tmp_path / "out")
    assert {k: plan[k] for k in ("source_rows", "distinct", "drawn", "episodes")} == \
        {"source_rows": 10, "distinct": 10, "drawn": 36, "episodes": 1}
    assert plan["passes"] == pytest.approx(3.6)
    assert compare.train_file(s, tmp_path / "again")[0].read_bytes() == cut.read_bytes()  # the same for every run


@pytest.mark.parametrize("steps, old_distinct", [(60, 15_360), (35, 3_584), (61, 512)])
def test_the_issues_numbers_every_prompt_of_dapo_math_17k_is_drawn(tmp_path, steps, old_distinct):
    """Issue 49: 17,398 prompts, 512 per step. The fewest whole passes that divide the steps used 15,360 prompts at 60
    steps, 3,584 at 35 and 512 at 61 (61 passes over the first 512). Now every run draws steps x 512 rows from all
    17,398: 1.77, 1.03 and 1.80 passes, each prompt once or twice, in one episode."""
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "{n}"}}\n' for n in range(17_398)))
    s = setting(tmp_path, prompts_per_step=512, steps=steps)
    plan = compare.prompt_plan(s, tmp_path / "out")
    assert (plan["distinct"], plan["drawn"], plan["episodes"]) == (17_398, steps * 512, 1) and old_distinct < 17_398
    assert plan["passes"] == pytest.approx(steps * 512 / 17_398)
    cut, episodes = compare.train_file(s, tmp_path / "out")
    drawn = [json.loads(x)["prompt"] for x in cut.read_text().splitlines()]
    assert len(drawn) == steps * 512 and len(set(drawn)) == 17_398 and episodes == 1
    assert max(collections.Counter(drawn).values()) == 2


@pytest.mark.parametrize("rows, per_step, steps, passes", [
    (17_398, 512, 33, 1), (17_398, 512, 35, None), (17_398, 512, 60, None), (17_398, 512, 61, None),
    (17_408, 512, 34, 1), (17_408, 512, 68, 2), (17_408, 512, 102, 3), (17_408, 512, 35, None),
    (10, 5, 4, 2), (10, 5, 3, None), (10, 2, 15, 3), (10, 4, 2, 1), (10, 3, 6, None)])
def test_whole_passes_are_whole_steps_that_fill_the_run(rows, per_step, steps, passes):
    """Worked by hand: 33 x 512 = 16,896 fit in DAPO-Math-17k's 17,398 prompts, one pass; 17,398 is no multiple of
    512, so from 34 steps on no pass is whole steps. 17,408 = 34 x 512: 68 steps are 2 passes, 102 are 3, 35 are no
    whole number of them. 10 prompts of 5 a step: a pass is 2 steps, so 4 steps are 2 passes and 3 steps none."""
    assert compare.whole_passes(steps, per_step, rows) == passes


def test_a_rerun_with_other_training_data_gets_its_rows_not_a_stale_cut(tmp_path):
    """The cut is named by the sha256 of its source's bytes and the layout: a rerun in the same --out with another
    --train_data (or the same path rewritten) trains on the new rows; it was reused by its row count alone."""
    for name, prefix in (("a.jsonl", "a"), ("b.jsonl", "b")):
        (tmp_path / name).write_text("".join(f'{{"prompt": "{prefix}{n}", "label": "1"}}\n' for n in range(10)))
    cut_a, _ = compare.train_file(compare.Setting(model="m", train=tmp_path / "a.jsonl", test=tmp_path / "t.jsonl",
                                                  prompts_per_step=3, steps=2), tmp_path / "out")
    cut_b, _ = compare.train_file(compare.Setting(model="m", train=tmp_path / "b.jsonl", test=tmp_path / "t.jsonl",
                                                  prompts_per_step=3, steps=2), tmp_path / "out")
    assert [json.loads(x)["prompt"] for x in cut_b.read_text().splitlines()] == [f"b{n}" for n in range(6)]
    assert cut_a != cut_b and cut_a.read_text().startswith('{"prompt": "a0"')
    (tmp_path / "a.jsonl").write_text("".join(f'{{"prompt": "c{n}", "label": "1"}}\n' for n in range(10)))
    cut_c, _ = compare.train_file(compare.Setting(model="m", train=tmp_path / "a.jsonl", test=tmp_path / "t.jsonl",
                                                  prompts_per_step=3, steps=2), tmp_path / "out")
    assert cut_c.read_text().startswith('{"prompt": "c0"')
