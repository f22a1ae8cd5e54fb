"""`compare.stats`: Student's t intervals over seeds, and what the seeds could detect."""

import pytest

from compare_support import write_run
from openrlhf_copo import compare


@pytest.mark.parametrize("dof, quantile", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (10, 2.2281), (11, 2.2010),
                                           (50, 2.0086), (1000, 1.9623)])
def test_the_t_quantiles_are_exact_for_any_number_of_seeds(dof, quantile):
    """Student's t, two-sided 95% (the 0.975 quantile), against the published tables; the old table stopped at 10 dof
    and used 1.96 beyond (11 dof: 2.201, the interval 11% too narrow). And the 0.8 quantile (power): 0.8791 at 10."""
    assert compare.t_quantile(0.975, dof) == pytest.approx(quantile, abs=1e-4)
    assert compare.t_quantile(0.8, 10) == pytest.approx(0.8791, abs=1e-4)


def test_twelve_seeds_get_the_exact_interval_and_the_report_says_what_each_interval_is_over(tmp_path):
    """12 seeds of 4 held-out prompts, COPO minus GRPO +0.25 on 6 seeds and 0 on 6: mean 0.125, SD 0.1306 (ddof 1),
    SE 0.0377; the interval is 0.125 +- 2.201 x SE (11 dof), not 1.96 x SE."""
    infos = []
    for seed in range(12):
        infos.append(write_run(tmp_path, "grpo", seed, "1000", {"copo_zero_std": 0.5}))
        infos.append(write_run(tmp_path, "copo", seed, "1100" if seed < 6 else "1000", {"copo_zero_std": 0.5}))
    d = compare.report(tmp_path, infos)["table"]["copo"]["minus_baseline"]
    se = (sum((g - 0.125) ** 2 for g in [0.25] * 6 + [0.0] * 6) / 11 / 12) ** 0.5
    assert d["ci95"][1] - d["mean"] == pytest.approx(2.20099 * se, rel=1e-5) and d["over"] == "seeds"


def test_the_report_states_what_the_seeds_could_detect_and_the_seeds_a_difference_needs(tmp_path):
    """Per-seed differences with SD 0.1 (two seeds: 0.05 and 0.05 + 0.1 x sqrt 2): the 95% half-width is
    12.706 x 0.1 / sqrt 2; at 80% power they detect (12.706 + 1.376) x 0.1 / sqrt 2 = 0.996; a true difference of
    0.1 (one SD) needs 10 seeds and 0.05 needs 34, as G*Power's paired t-test gives (d = 1 and 0.5, 80%, 5%)."""
    d = compare.detectable([0.05, 0.05 + 0.1 * 2 ** 0.5], targets=(0.1, 0.05))
    assert d["sd"] == pytest.approx(0.1) and d["half_width95"] == pytest.approx(12.7062 * 0.1 / 2 ** 0.5, rel=1e-4)
    assert d["detectable"] == pytest.approx((12.7062 + 1.3764) * 0.1 / 2 ** 0.5, rel=1e-4)
    assert d["seeds_for"] == {"0.1": 10, "0.05": 34}
    assert compare.detectable([0.1])["detectable"] is None  # one seed: no spread over seeds

    infos = [write_run(tmp_path, m, seed, o, {"copo_zero_std": 0.5})
             for seed, (g, c) in enumerate([("1000", "1100"), ("0000", "1100")]) for m, o in (("grpo", g), ("copo", c))]
    result = compare.report(tmp_path, infos, targets=(0.02, 0.05))
    assert result["table"]["copo"]["minus_baseline"]["detectable"]["seeds"] == 2
    text = compare.markdown(result)
    assert "smallest true difference they detect with 80% power" in text
    assert "| seeds for 0.02 | seeds for 0.05 |" in text
    sd = 0.25 / 2 ** 0.5
    assert f"| copo | 2 | {sd:.3f} | {12.7062 * 0.125:.3f} | {(12.7062 + 1.3764) * 0.125:.3f} |" in text
