"""The statistics of a paired comparison: a method minus the baseline, per seed by prompt, then over seeds with a
95% t-interval, and what the seeds could detect. Student's t is scipy's (`scipy.stats.t`)."""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence


def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom (scipy's, imported on first use)."""
    from scipy.stats import t

    return float(t.ppf(p, dof))


#: The differences a report sizes the seeds for (`--target_difference`): how many seeds each would need.
TARGET_DIFFERENCES = (0.02, 0.05)


#: The power at which a report states the smallest difference its seeds could detect (two-sided, 5% level).
POWER = 0.8


def mean_se(values: Sequence[float]) -> tuple:
    """(mean, standard error) of the finite ``values``; NaN where there are none (SE: where fewer than 2)."""
    values = [v for v in values if v == v]
    if not values:
        return float("nan"), float("nan")
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, float("nan")
    var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
    return m, math.sqrt(var / len(values))


def detectable(gains: Sequence[float], targets: Sequence[float] = TARGET_DIFFERENCES, power: float = POWER) -> dict:
    """What seeds with these per-seed differences could tell apart, by the paired t-test over seeds (two-sided, 5%):
    the SD of the per-seed differences; the half-width of the 95% interval (the smallest mean difference that these
    seeds would call non-zero); the smallest true difference they would detect with probability ``power``,
    (t_0.975 + t_power at n-1 dof) x SD / sqrt(n) (the usual shifted-t approximation of the non-central t); and for
    each target difference the fewest seeds n that give that power at this SD. None where it cannot be said: one
    seed has no spread, and a spread of 0 sizes nothing."""
    n = len(gains)
    if n < 2:
        return {"seeds": n, "sd": None, "half_width95": None, "detectable": None, "power": power,
                "seeds_for": {str(t): None for t in targets}}
    sd = mean_se(gains)[1] * math.sqrt(n)

    def reach(k: int) -> float:
        return (t_quantile(0.975, k - 1) + t_quantile(power, k - 1)) * sd / math.sqrt(k)

    def seeds_for(target: float) -> Optional[int]:
        if sd == 0 or target <= 0:
            return None
        from scipy.stats import norm

        # the normal answer, a lower bound, then up to the first n whose t-based reach is within the target
        k = max(2, math.ceil(((norm.ppf(0.975) + norm.ppf(power)) * sd / target) ** 2))
        while reach(k) > target:
            k += 1
        return k

    return {"seeds": n, "sd": sd, "half_width95": t_quantile(0.975, n - 1) * sd / math.sqrt(n),
            "detectable": reach(n), "power": power, "seeds_for": {str(t): seeds_for(t) for t in targets}}


def paired_over_seeds(final: Dict[tuple, dict], a: str, b: str,
                      targets: Sequence[float] = TARGET_DIFFERENCES) -> Optional[dict]:
    """``a`` minus ``b`` at the final evaluation, over the seeds both ran: per seed the paired difference of the
    per-prompt greedy verdicts (`evaluation.metrics.paired_difference`), then their mean with a 95% interval and what
    it is over (``over``): with two seeds or more, over seeds (Student's t at n-1 dof, training randomness included),
    with what these seeds could detect and the seeds each of ``targets`` would need (`detectable`); with one seed,
    over that seed's prompts (1.96 prompt-level SE: the held-out prompts' spread alone, none of the training's).
    ``final``: (method, seed) -> an evaluation point with its ``outcomes``."""
    from openrlhf_copo.evaluation.metrics import paired_difference

    seeds = sorted(s for m, s in final if m == b and (a, s) in final)
    per_seed = [{"seed": s, **paired_difference(final[(b, s)]["outcomes"], final[(a, s)]["outcomes"])}
                for s in seeds]
    if not per_seed:
        return None
    gains = [p["gain"] for p in per_seed]
    mean, se = mean_se(gains)
    if len(per_seed) > 1:
        half, over = t_quantile(0.975, len(per_seed) - 1) * se, "seeds"
    else:
        half, over = 1.96 * per_seed[0]["se"], "prompts (one seed)"
    return {"per_seed": per_seed, "mean": mean, "ci95": (mean - half, mean + half), "over": over,
            "detectable": detectable(gains, targets)}
