"""mean@k, maj@k, pass@k: the tables' definitions, pinned with hand-computed values."""

import pytest

from openrlhf_copo.evaluation.metrics import (maj_at_k, maj_at_k_bootstrap, majority_correct, mean_at_k, mean_at_k_se,
                                              pass_at_k)

# Two prompts, k = 4. Answers are equivalence-cluster ids; None = no answer.
P1 = [("a", True), ("b", False), ("a", True), ("c", False)]   # 2/4 correct, majority "a" (2 votes) correct
P2 = [("x", False), ("x", False), ("y", True), (None, False)]  # 1/4 correct, majority "x" wrong
BATCH = [P1, P2]


def test_mean_at_k_by_hand():
    # (2/4 + 1/4) / 2 = 0.375
    assert mean_at_k(BATCH) == pytest.approx(0.375)


def test_maj_at_k_by_hand():
    # P1 solved, P2 not -> 0.5
    assert maj_at_k(BATCH) == pytest.approx(0.5)


def test_majority_tie_goes_to_the_first_seen_answer():
    assert majority_correct([("w", False), ("r", True), ("r", True), ("w", False)]) is False
    assert majority_correct([("r", True), ("w", False), ("w", False), ("r", True)]) is True


def test_no_answer_does_not_vote():
    assert majority_correct([(None, False), (None, False), ("r", True)]) is True
    assert majority_correct([(None, False), (None, False)]) is False


def test_pass_at_k_by_hand():
    # P1: n=4, c=2: pass@1 = 1 - C(2,1)/C(4,1) = 0.5; pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6
    # P2: n=4, c=1: pass@1 = 0.25;                  pass@2 = 1 - C(3,2)/C(4,2) = 0.5
    assert pass_at_k(BATCH, 1) == pytest.approx((0.5 + 0.25) / 2)
    assert pass_at_k(BATCH, 2) == pytest.approx((5 / 6 + 0.5) / 2)
    assert pass_at_k(BATCH, 4) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k(BATCH, 5)


def test_pass_at_1_equals_mean_at_k():
    assert pass_at_k(BATCH, 1) == pytest.approx(mean_at_k(BATCH))


def test_bootstrap_is_the_released_codes_seeded_procedure():
    import numpy as np

    # the released code: np.random.seed(42) then np.random.choice(len(data), size=k, replace=True), 1000 times
    np.random.seed(42)
    expected = np.mean([majority_correct([P1[i] for i in np.random.choice(4, size=4, replace=True)])
                        for _ in range(1000)])
    assert maj_at_k_bootstrap([P1]) == pytest.approx(expected)
    # a prompt whose samples are all one correct answer is always solved; all wrong, never
    assert maj_at_k_bootstrap([[("r", True)] * 3]) == 1.0
    assert maj_at_k_bootstrap([[("w", False)] * 3]) == 0.0
    # the bootstrap of a split vote lies strictly between the extremes
    assert 0.0 < maj_at_k_bootstrap([P1]) < 1.0


def test_empty_benchmark_is_refused():
    with pytest.raises(ValueError, match="benchmark is empty"):
        mean_at_k([])
    with pytest.raises(ValueError, match="prompt 0 has no samples"):
        maj_at_k([[]])


def test_mean_at_k_standard_error_by_hand():
    # per-prompt fractions 1/2, 0, 1: mean 1/2, sample std (ddof 1) = sqrt((1/4 + 1/4 + 0) / 2) = 1/2,
    # SE = (1/2) / sqrt(3) = 0.288675...
    prompts = [[(1, True), (2, False)], [(3, False), (3, False)], [(4, True), (4, True)]]
    assert mean_at_k(prompts) == pytest.approx(0.5)
    assert mean_at_k_se(prompts) == pytest.approx(0.5 / 3 ** 0.5)
    assert mean_at_k_se(prompts[:1]) == 0.0  # one prompt: no spread to measure


def test_paired_difference_by_hand():
    """before 1 0 0 1 0, after 1 1 0 0 1: d = 0 1 0 -1 1, mean 0.2; squared deviations .04 .64 .04 1.44 .64 sum to
    2.8, / 4 = 0.7, sqrt = 0.83666, / sqrt(5) = 0.374166; two prompts gained, one lost (McNemar's discordant pairs)."""
    from openrlhf_copo.evaluation.metrics import paired_difference

    p = paired_difference([1, 0, 0, 1, 0], [1, 1, 0, 0, 1])
    assert p["n"] == 5 and p["gain"] == pytest.approx(0.2) and p["se"] == pytest.approx(0.374166, abs=1e-6)
    assert (p["gained"], p["lost"]) == (2, 1)
    # concordant prompts only dilute: 95 more prompts both evaluations solve give a gain of 0.01, error sqrt((3 - 0.01) / 99) / 10
    q = paired_difference([1, 0, 0, 1, 0] + [1] * 95, [1, 1, 0, 0, 1] + [1] * 95)
    assert q["gain"] == pytest.approx(0.01) and q["se"] == pytest.approx(0.017379, abs=1e-6)
    with pytest.raises(ValueError, match="same prompts: 2 scores before, 3 after"):
        paired_difference([1, 0], [1, 0, 1])


def test_outcome_strings_round_trip_and_refuse_other_characters():
    from openrlhf_copo.evaluation.metrics import outcome_string, parse_outcomes

    assert outcome_string([True, False, True]) == "101"
    assert parse_outcomes("101") == [1, 0, 1]
    with pytest.raises(ValueError, match="string of 0 and 1"):
        parse_outcomes("10x")
