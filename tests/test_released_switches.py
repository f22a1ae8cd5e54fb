"""Every `global_flg` value of the authors' released code, as docs/paper.md maps it to flags here.

The test reads the mapping table from docs/paper.md (so the page cannot drift), runs each row's flags through the
real CLI parser and `core.copo_advantages`, and compares the weighted advantages of both terms with the released
formulas, written here from the facts of their `compute_policy_loss_with_global` and
`compute_grpo_outcome_advantage_with_global` (shared/docs/released-code.md), loop by loop:

    A^L_i = (r_i - mean) / (unbiased std + 1e-6), 0 in all-equal groups;  A^G_q likewise over the batch's prompts
    s_q = sigmoid(k (H_q - b)), H_q in bits over the answer strings;  z_i = 1[r_i != 0];  f_i = 1[A^L_i != 0]
    loss = w_i l(A^L_i) + (1 - w_i) kappa l(A^G_q), w_i by global_flg.
"""

import math
import re
import shlex
from pathlib import Path

import pytest
import torch

from openrlhf_copo.core import copo_advantages
from openrlhf_copo.openrlhf_ext.config import copo_settings
from tests_support import copo_argv

PAPER_DOC = Path(__file__).resolve().parents[1] / "docs" / "paper.md"
RELEASED_VALUES = ("no-global", "only-global", "only-soft", "soft-with-zero", "only-zero", "only-forced",
                   "soft-with-forced", "only-soft-with-coef")


def mapping_table():
    """{released value: flags here} and the conventions line's flags, from docs/paper.md."""
    text = PAPER_DOC.read_text()
    section = text[text.index("## Every switch of the released code"):]
    section = section[:section.index("\n## ", 1)]
    common = re.search(r"^Conventions every row shares with their code: `([^`]+)`", section, re.M).group(1)
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[2].startswith("`--"):
            rows[cells[0].strip("`")] = shlex.split(cells[2].strip("`"))
    return rows, shlex.split(common)


# One batch with every group shape (G = 4, the released reward: 1 correct, 0 not), answer strings as ids.
REWARDS = [[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0],
           [0, 1, 0, 1]]
ANSWERS = [[1, 1, 1, 1], [1, 1, 2, 2], [3, 3, 3, 3], [3, 4, 5, 6], [1, 1, 1, 7], [1, 1, 8, 8], [1, 9, 10, 11],
           [2, 1, 3, 1]]


def released_reference(flg, k, b, kappa=1.0, eps=1e-6):
    """(w_i A^L_i, (1 - w_i) kappa A^G_q) per response, from the released formulas."""

    def unbiased_norm(xs):
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        return [0.0 if max(xs) == min(xs) else (x - m) / (sd + eps) for x in xs]

    def entropy_bits(answers):
        n = len(answers)
        return -sum(answers.count(a) / n * math.log2(answers.count(a) / n) for a in set(answers))

    a_global = unbiased_norm([sum(r) / len(r) for r in REWARDS])
    local, glob = [], []
    for q, (rewards, answers) in enumerate(zip(REWARDS, ANSWERS)):
        a_local = unbiased_norm(rewards)
        s = 1 / (1 + math.exp(-k * (entropy_bits(answers) - b)))
        row_l, row_g = [], []
        for r, al in zip(rewards, a_local):
            z, f = float(r != 0), float(al != 0)
            w = {"no-global": 1.0, "only-global": 0.0, "only-soft": s, "soft-with-zero": s * z, "only-zero": z,
                 "only-forced": f, "soft-with-forced": s * f, "only-soft-with-coef": s}[flg]
            global_weight = 0.0 if flg == "no-global" else (1 - w) * (kappa if flg == "only-soft-with-coef" else 1)
            row_l.append(w * al)
            row_g.append(global_weight * a_global[q])
        local.append(row_l)
        glob.append(row_g)
    return local, glob


def test_the_table_covers_every_released_value():
    rows, common = mapping_table()
    assert sorted(rows) == sorted(RELEASED_VALUES)
    assert common == ["--copo.std", "unbiased", "--copo.incorrect", "reward", "--copo.answer_buckets", "string"]


@pytest.mark.parametrize("k, b", [(5.0, 1.0), (20.0, 1.5)])
@pytest.mark.parametrize("flg", RELEASED_VALUES)
def test_each_released_value_gives_the_released_weighted_advantages(load_args, flg, k, b):
    rows, common = mapping_table()
    args = load_args(copo_argv(*rows[flg], *common, "--copo.gamma", str(k), "--copo.rho", str(b)))
    settings = copo_settings(args)
    rewards = torch.tensor(REWARDS, dtype=torch.float32)
    out = copo_advantages(rewards, torch.tensor(ANSWERS), rewards > 0, **settings)
    kappa = float(rows[flg][rows[flg].index("--copo.global_coef") + 1]) if "--copo.global_coef" in rows[flg] else 1.0
    local, glob = released_reference(flg, k, b, kappa)
    torch.testing.assert_close(out.weighted_local, torch.tensor(local), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.weighted_global, torch.tensor(glob), atol=1e-5, rtol=0)


def test_the_shapes_that_separate_the_values():
    """Spot values by hand (k 5, b 1): the wrong answer of the 3+1 prompt (row 4, R .75) and an all-correct prompt
    with one answer (row 0, H 0), where the released values disagree most."""
    # prompt rewards R = 1, 1, 0, 0, .75, .5, .25, .5: mean .5, unbiased std sqrt(1.125 / 7)
    ag = lambda R: (R - 0.5) / (math.sqrt(1.125 / 7) + 1e-6)  # noqa: E731
    local, glob = released_reference("soft-with-zero", 5, 1)
    assert local[4][3] == 0 and glob[4][3] == pytest.approx(ag(0.75))  # z = 0: the wrong answer is pushed *up*
    local, glob = released_reference("only-soft", 5, 1)
    s = 1 / (1 + math.exp(-5 * (-(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)) - 1)))
    assert local[4][3] == pytest.approx(s * -0.75 / (0.5 + 1e-6)) and glob[4][3] == pytest.approx((1 - s) * ag(0.75))
    local, glob = released_reference("only-forced", 5, 1)
    assert glob[0] == [pytest.approx(ag(1.0))] * 4 and glob[4] == [0.0] * 4  # f = 0 only in all-equal groups


# ---------------------------------------------------------------------------------------------
# The two edge cases where the released code's arithmetic, not its formulas, differs (docs/paper.md, "Two edge
# cases"). Their code computes in float32 with no test for equal values: the group's mean and unbiased std of the
# rewards (torch.mean, torch.std), then (r - mean) / (std + 1e-6); the batch's global statistics the same way over
# its prompts. That reading, written here from those facts:

def released_float32_standardized(values):
    """(x - mean) / (unbiased std + 1e-6) in float32, as the released code computes both advantages."""
    x = torch.tensor(values, dtype=torch.float32)
    return (x - torch.mean(x)) / (torch.std(x) + 1e-6)


@pytest.mark.parametrize("value, g, released", [(0.3, 6, 0.0289), (0.1, 8, -0.0074), (0.1, 6, 0.0)])
def test_equal_rewards_are_exactly_equal_here_not_in_float32_there(load_args, value, g, released):
    """G equal rewards that float32 cannot average exactly (six of 0.3; eight of 0.1, an all formatted-but-wrong
    group under this project's 0 / 0.1 / 1 format reward at G = 8) get a small non-zero local advantage in the
    released code, so its `only-forced` (f_i = 1[A^L_i != 0]) trains them on the local term. Here a group whose
    rewards are all equal has A_local exactly 0 under every row's flags and counts as zero-variance, so `only-forced`
    trains it on the global term alone, as it does a group of equal 0/1 rewards."""
    there = released_float32_standardized([value] * g)
    assert there.tolist() == pytest.approx([released] * g, abs=5e-5)  # 0.0 for six 0.1s: exact by luck there
    rewards = torch.tensor([[value] * g, [1.0] * (g // 2) + [0.0] * (g - g // 2)])  # + one mixed group
    answers = torch.tensor([[1] * g, list(range(g))])
    rows, common = mapping_table()
    for flg in RELEASED_VALUES:
        settings = copo_settings(load_args(copo_argv(*rows[flg], *common)))
        out = copo_advantages(rewards, answers, rewards > 0, **settings)
        assert (out.local_adv[0] == 0).all(), flg  # exactly 0, not round-off / eps
        assert torch.isfinite(out.local_adv).all() and (out.local_adv[1] != 0).all(), flg
        if flg == "only-forced":  # here the global term alone; there f_i = 1 where the released value is not 0
            assert (out.w_local[0] == 0).all() and (out.w_global[0] == 1).all()
            assert (out.weighted_global[0] != 0).all()


@pytest.mark.filterwarnings("ignore:std\\(\\). degrees of freedom")
@pytest.mark.parametrize("flg", RELEASED_VALUES)
def test_a_batch_of_one_prompt_has_global_advantage_zero_here_nan_there(load_args, flg):
    """One prompt in the rollout batch: the released code's unbiased std over one prompt reward is NaN, so its global
    advantages are NaN, and so is its loss wherever the global term enters it (every value but `no-global`: 0 x NaN
    is NaN). Here a batch with no spread of prompt rewards has A_global exactly 0: the global term trains nothing."""
    assert torch.isnan(released_float32_standardized([0.5])).all()
    rows, common = mapping_table()
    settings = copo_settings(load_args(copo_argv(*rows[flg], *common)))
    for group in ([1.0, 0.0, 1.0, 0.0, 1.0, 1.0], [0.0] * 6, [1.0] * 6):
        rewards = torch.tensor([group])
        out = copo_advantages(rewards, torch.tensor([[1, 2, 1, 3, 1, 1]]), rewards > 0, **settings)
        assert (out.global_adv == 0).all() and (out.weighted_global == 0).all()
        for t in (out.local_adv, out.global_adv, out.w_local, out.w_global, out.weighted_local):
            assert torch.isfinite(t).all()
