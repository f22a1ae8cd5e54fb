"""openrlhf_copo/compare/tokens.py: each method's generated tokens beside GRPO's, and the equal-tokens column's
matching rule, on crafted runs that logged their tokens as patch 4 does (tests/compare_support.py)."""

import pytest

from compare_support import write_token_run
from openrlhf_copo import compare


@pytest.fixture
def result(tmp_path):
    """Two seeds, 4 held-out prompts, 2 steps of GRPO at 100 tokens a step (200 in all):

    - copo draws 105 a step: x1.05 GRPO's tokens, within 10%: compared with GRPO itself;
    - reinforce_ada draws 400 a step (x4.0); grpo_4xg (more samples) 380, so reinforce_ada has 800 / 760 = x1.05 its
      tokens; grpo_4xsteps (more steps: 8 steps of 100, seed 0 only, evaluated at 2, 4, 6, 8) reaches 800 at step 8;
    - go_only draws 150 a step (300, x1.5): GRPO's 200 is x1.5 away, grpo_4xsteps' nearest evaluation (step 4, 400)
      x0.75, grpo_4xg's 760 x0.39: none within a factor 1.25."""
    infos = []
    for seed, base in ((0, "1000"), (1, "1100")):
        infos.append(write_token_run(tmp_path, "grpo", seed, 100, 2, {0: "0000", 2: base}))
    infos += [write_token_run(tmp_path, "copo", 0, 105, 2, {2: "1100"}),
              write_token_run(tmp_path, "copo", 1, 105, 2, {2: "1100"}),
              write_token_run(tmp_path, "reinforce_ada", 0, 400, 2, {2: "1110"}),
              write_token_run(tmp_path, "reinforce_ada", 1, 400, 2, {2: "1111"}),
              write_token_run(tmp_path, "grpo_4xg", 0, 380, 2, {2: "1100"}, sample_factor=4),
              write_token_run(tmp_path, "grpo_4xg", 1, 380, 2, {2: "1100"}, sample_factor=4),
              write_token_run(tmp_path, "grpo_4xsteps", 0, 100, 8, {2: "1000", 4: "1000", 6: "1000", 8: "1010"},
                              step_factor=4),
              write_token_run(tmp_path, "go_only", 0, 150, 2, {2: "0000"})]
    return compare.report(tmp_path, infos)


def test_each_method_has_its_tokens_at_its_final_evaluation_beside_grpos(result):
    table = result["table"]
    assert table["grpo"]["tokens"]["final"] == 200 and table["grpo"]["tokens"]["sources"] == ["counted"]
    assert table["copo"]["tokens"]["ratio"] == pytest.approx((1.05, 1.05, 1.05))
    assert table["reinforce_ada"]["tokens"]["final"] == 800 and table["reinforce_ada"]["tokens"]["ratio"][0] == 4
    # the step control trains 4 x the steps: its tokens at its final evaluation are 4 x GRPO's
    assert table["grpo_4xsteps"]["tokens"]["final"] == 800 and table["grpo_4xsteps"]["final_steps"] == [8]
    # its curve: every evaluation, from the seed's shared step-0 evaluation (GRPO's run made it) at 0 tokens
    assert [(p["step"], p["tokens"], p["greedy"]) for p in table["grpo_4xsteps"]["token_curve"]] == \
        [(0, 0, 0.0), (2, 200, 0.25), (4, 400, 0.25), (6, 600, 0.25), (8, 800, 0.5)]
    text = compare.markdown(result)
    assert "| reinforce_ada | 2 | 800 | x4.00 | counted |" in text and "| grpo | 2 | 200 | (baseline) | counted |" in text


def test_a_method_within_ten_percent_of_grpos_tokens_is_compared_with_grpo_itself(result):
    """copo at x1.05: its equal-tokens difference is its same-steps one (seed 0: 1100 - 1000 = +0.25; seed 1: 1100
    - 1100 = 0; mean +0.125), no control needed."""
    eq = result["table"]["copo"]["equal_tokens"]
    assert eq["same"] and eq["cells"][0]["minus"] is result["table"]["copo"]["minus_baseline"]
    assert eq["cells"][0]["minus"]["mean"] == pytest.approx(0.125)
    assert compare.equal_tokens_cell("copo", "grpo", result["table"]["copo"]) == \
        "= same steps: draws grpo's tokens (x1.05)"


def test_a_method_that_draws_more_is_paired_with_each_control_at_its_nearest_budget(result):
    """reinforce_ada (x4.0): against grpo_4xg (more samples), its final evaluation, x1.05: seed 0 1110 - 1100 = +0.25,
    seed 1 1111 - 1100 = +0.5: mean 0.375, SE 0.125, the t-interval at 1 degree of freedom (+-12.706 SE); against
    grpo_4xsteps (more steps), seed 0 only, its evaluation nearest 800 tokens is step 8 (800: x1.00), 1110 - 1010 =
    +0.25, over that seed's prompts (SE 0.25, +-1.96 SE). GRPO itself (x4.0) is out of reach and not a cell."""
    eq = result["table"]["reinforce_ada"]["equal_tokens"]
    assert not eq["same"] and eq["ratio_to_baseline"][0] == 4
    wide, longer = eq["cells"][1], eq["cells"][2]
    assert eq["cells"][0]["control"] == "grpo" and not eq["cells"][0]["within"] and eq["cells"][0]["minus"] is None
    assert (wide["control"], wide["kind"], wide["within"]) == ("grpo_4xg", "more samples", True)
    assert wide["ratio"] == pytest.approx((800 / 760,) * 3)
    assert wide["minus"]["mean"] == pytest.approx(0.375) and wide["minus"]["over"] == "seeds"
    assert wide["minus"]["ci95"] == pytest.approx((0.375 - 12.7062 * 0.125, 0.375 + 12.7062 * 0.125), abs=1e-4)
    assert (longer["control"], longer["kind"], longer["steps"], longer["ratio"]) == \
        ("grpo_4xsteps", "more steps", [8], (1.0, 1.0, 1.0))
    assert [p["seed"] for p in longer["minus"]["per_seed"]] == [0] and longer["minus"]["mean"] == 0.25
    assert longer["minus"]["ci95"] == pytest.approx((0.25 - 1.96 * 0.25, 0.25 + 1.96 * 0.25))
    cell = compare.equal_tokens_cell("reinforce_ada", "grpo", result["table"]["reinforce_ada"])
    assert cell == ("+0.375 [-1.213, +1.963] over seeds vs grpo_4xg (more samples; tokens x1.05 grpo_4xg's); "
                    "+0.250 [-0.240, +0.740] over prompts (one seed) vs grpo_4xsteps at step 8 (more steps; tokens "
                    "x1.00 grpo_4xsteps's)")


def test_no_uniform_grpo_within_reach_is_said_with_the_nearest_of_each(result):
    """go_only (x1.5): no run within a factor 1.25 of its 300 tokens; the cell says so, with the nearest evaluation of
    each control (grpo_4xsteps' step 4: 300 / 400 = x0.75)."""
    cell = compare.equal_tokens_cell("go_only", "grpo", result["table"]["go_only"])
    assert cell == ("no equal-token grpo run (tokens x1.50 grpo's; nearest grpo_4xg: tokens x0.39 grpo_4xg's; "
                    "nearest grpo_4xsteps at step 4: tokens x0.75 grpo_4xsteps's)")
    assert compare.equal_tokens_cell("grpo_4xg", "grpo", result["table"]["grpo_4xg"]) == "(budget control)"


def test_no_control_at_all_says_no_equal_token_run(tmp_path):
    infos = [write_token_run(tmp_path, "grpo", 0, 100, 2, {0: "0000", 2: "1000"}),
             write_token_run(tmp_path, "reinforce_ada", 0, 350, 2, {2: "1100"})]
    row = compare.report(tmp_path, infos)["table"]["reinforce_ada"]
    assert compare.equal_tokens_cell("reinforce_ada", "grpo", row) == "no equal-token grpo run (tokens x3.50 grpo's)"


def test_the_plot_draws_one_line_per_method(result, tmp_path):
    compare.plot_tokens({"crafted": result, "again": result}, tmp_path / "tokens.png")
    assert (tmp_path / "tokens.png").stat().st_size > 10_000
