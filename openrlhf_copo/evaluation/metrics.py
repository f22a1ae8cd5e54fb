"""mean@k, maj@k and pass@k over k sampled responses per prompt (pure Python + numpy).

Each prompt contributes ``k`` samples, each an ``(answer_id, correct)`` pair: ``answer_id`` is the
equivalence-clustered id of the extracted final answer (`openrlhf_copo.rewards`), ``None`` when the
response has no answer; ``correct`` is whether it is equivalent to the label.

- **mean@k**: the mean correctness of the k samples of a prompt, averaged over prompts (the paper's
  mean@8 / mean@64).
- **maj@k** (exact): the prompt counts as solved when the most frequent answer among its k samples is
  correct. Votes are over equivalence clusters, so `1/2` and `0.5` vote together; responses with no
  answer do not vote (a prompt where none answered is unsolved). Ties go to the answer seen first in
  sample order — the released code's rule (`max` over vote counts keeps the first).
- **maj@k** (bootstrap, the released code's estimate): for each prompt, 1000 resamples of size k drawn
  with replacement from its samples with `numpy.random.RandomState(42)` (the code seeds the global
  generator with 42 before each prompt's resampling), majority-correctness averaged over resamples.
- **mean@k standard error**: the standard deviation of the per-prompt correct fractions (n - 1 in
  the denominator) over the square root of the number of prompts: prompts are the independent
  units (a prompt's k samples share its difficulty), so this is the error of mean@k as an estimate
  of the accuracy on the prompts' population.
- **pass@k**: the unbiased estimator 1 - C(n - c, k) / C(n, k) from n samples with c correct
  (Chen et al., 2021), averaged over prompts.
- **paired difference** of two evaluations of the same prompts (greedy before / after training, or two
  methods from the same start): the mean of the per-prompt differences d_i = after_i - before_i, with
  the standard error std(d, ddof=1) / sqrt(n). Prompts both evaluations solve or both miss add 0 to
  every d_i, so the error comes from the discordant prompts alone (McNemar's test counts those), and
  is several times smaller than that of the difference of two independent accuracies.
"""

from __future__ import annotations

from math import comb
from typing import Hashable, List, Optional, Sequence, Tuple

import numpy as np

Sample = Tuple[Optional[Hashable], bool]

__all__ = ["mean_at_k", "mean_at_k_se", "maj_at_k", "maj_at_k_bootstrap", "pass_at_k", "majority_correct",
           "paired_difference", "outcome_string", "parse_outcomes"]


def _check(prompts: Sequence[Sequence[Sample]]) -> None:
    if not prompts:
        raise ValueError("no prompts to score: the benchmark is empty")
    for i, samples in enumerate(prompts):
        if not samples:
            raise ValueError(f"prompt {i} has no samples")


def mean_at_k(prompts: Sequence[Sequence[Sample]]) -> float:
    """Mean over prompts of the fraction of correct samples."""
    _check(prompts)
    return sum(sum(bool(c) for _, c in s) / len(s) for s in prompts) / len(prompts)


def mean_at_k_se(prompts: Sequence[Sequence[Sample]]) -> float:
    """Standard error of `mean_at_k` with prompts as the units: std(per-prompt fractions, ddof=1) / sqrt(n).
    0 for a single prompt (no spread to measure)."""
    _check(prompts)
    fractions = [sum(bool(c) for _, c in s) / len(s) for s in prompts]
    if len(fractions) < 2:
        return 0.0
    return float(np.std(fractions, ddof=1) / np.sqrt(len(fractions)))


def majority_correct(samples: Sequence[Sample]) -> bool:
    """Whether the majority answer among ``samples`` is correct (no-answer samples do not vote; first seen wins ties)."""
    votes: dict = {}
    correct_of: dict = {}
    for answer, correct in samples:
        if answer is None:
            continue
        votes[answer] = votes.get(answer, 0) + 1
        correct_of[answer] = correct_of.get(answer, False) or bool(correct)
    if not votes:
        return False
    best = max(votes, key=votes.get)  # dicts keep insertion order: ties go to the first seen
    return correct_of[best]


def maj_at_k(prompts: Sequence[Sequence[Sample]]) -> float:
    """Exact majority vote over all k samples of each prompt, averaged over prompts."""
    _check(prompts)
    return sum(majority_correct(s) for s in prompts) / len(prompts)


def maj_at_k_bootstrap(prompts: Sequence[Sequence[Sample]], k: Optional[int] = None, n_bootstrap: int = 1000,
                       seed: int = 42) -> float:
    """The released code's bootstrap estimate of maj@k (k defaults to each prompt's sample count)."""
    _check(prompts)
    total = 0.0
    for samples in prompts:
        size = k or len(samples)
        rng = np.random.RandomState(seed)
        hits = 0
        for _ in range(n_bootstrap):
            idx = rng.choice(len(samples), size=size, replace=True)
            hits += majority_correct([samples[i] for i in idx])
        total += hits / n_bootstrap
    return total / len(prompts)


def pass_at_k(prompts: Sequence[Sequence[Sample]], k: int) -> float:
    """Unbiased pass@k from n >= k samples per prompt."""
    _check(prompts)
    scores: List[float] = []
    for samples in prompts:
        n, c = len(samples), sum(bool(x) for _, x in samples)
        if n < k:
            raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
        scores.append(1.0 - comb(n - c, k) / comb(n, k))
    return sum(scores) / len(scores)


def paired_difference(before: Sequence[float], after: Sequence[float]) -> dict:
    """The paired comparison of two evaluations of the same n prompts, per-prompt scores in the same order:

        d_i = after_i - before_i,  gain = mean(d),  se = std(d, ddof=1) / sqrt(n)

    with, for 0/1 scores, McNemar's discordant counts: ``gained`` (0 -> 1) and ``lost`` (1 -> 0)."""
    if len(before) != len(after):
        raise ValueError(f"a paired difference needs the same prompts: {len(before)} scores before, "
                         f"{len(after)} after")
    if len(before) < 2:
        raise ValueError(f"a paired difference needs at least 2 prompts, got {len(before)}")
    d = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    return {"n": len(d), "gain": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))),
            "gained": int((d > 0).sum()), "lost": int((d < 0).sum())}


def outcome_string(correct: Sequence[bool]) -> str:
    """Per-prompt 0/1 outcomes as one string ("0110..."): one evaluation's prompts, kept compactly in a
    metrics file so that a later evaluation of the same prompts can be paired with it."""
    return "".join("1" if c else "0" for c in correct)


def parse_outcomes(text: str) -> List[int]:
    """The inverse of `outcome_string`."""
    if set(text) - {"0", "1"}:
        raise ValueError(f"per-prompt outcomes must be a string of 0 and 1, got {text[:40]!r}")
    return [int(c) for c in text]
