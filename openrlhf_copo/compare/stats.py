"""The statistics of a paired comparison: a method minus the baseline, per seed by prompt, then over seeds with a
95% t-interval, and what the seeds could detect."""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence


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



def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz; Numerical Recipes'
    betacf), on the side where it converges fast (x < (a + 1) / (a + b + 2)), by symmetry on the other: Student's t
    distribution function without scipy, which the environment does not have."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    return front * h / a



def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with ``dof`` degrees of freedom: 1 - I_{dof/(dof+t^2)}(dof/2, 1/2) / 2 for t > 0."""
    tail = 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail



def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom, exact to 1e-10 (bisection on `t_cdf`), for
    any dof: a table that stops at 10 and uses 1.96 beyond makes a 12-seed interval 11% too narrow (2.201)."""
    if not 0 < p < 1 or dof <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and dof > 0, got p={p}, dof={dof}")
    if p < 0.5:
        return -t_quantile(1 - p, dof)
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        low, high = high, 2 * high
    while high - low > 1e-10 * max(1.0, high):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, dof) < p else (low, mid)
    return (low + high) / 2



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
        k = max(2, math.ceil(((1.959964 + 0.841621) * sd / target) ** 2))  # the normal answer: a lower bound
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
