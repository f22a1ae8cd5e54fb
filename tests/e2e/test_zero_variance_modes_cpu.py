"""End to end on the CPU for the modes of issue 32: one run per family through the real Ray pipeline (DeepSpeed
actor, vLLM-CPU engine, experience maker, the COPO loss), as `python -m openrlhf_copo.cli.train_ppo_ray` runs them.

- the zero-variance peers: `rl_zvp`, whose second term needs the policy's token entropy from OpenRLHF's training
  forward, on a reward where every group has zero variance (so GRPO would learn nothing and RL-ZVP's term is all);
- the released code's switches train in the CLI's killed-worker run and its rerun
  (tests/e2e/test_train_ppo_ray_cpu.py, `RELEASED_SWITCHES`), which asserts what a run of their own here did."""

import math

import pytest
import torch

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from tests_support import REPO, load_weights, metrics, train, write_prompts

# starts Ray, a vLLM engine and a training run: left out by `pytest --quick`; group 2 for balance (tests/quick_tier.py)
pytestmark = pytest.mark.heavy(group=2)

#: No checkpoint, and bf16, the CPU path's default: the one training run of the suite in bf16 end to end (DeepSpeed's
#: bf16 section, vLLM's bf16 engine, the weight sync in bf16); the others train in fp32, several times faster on a
#: CPU without bf16 units.
BF16_NO_CHECKPOINT = ("--ckpt.save_steps", "-1")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zero-variance-modes")
    return tmp, tiny_qwen2(tmp / "tiny-model"), write_prompts(tmp / "prompts.jsonl", 4)


def test_rl_zvp_trains_on_groups_grpo_learns_nothing_from(setup):
    base, model, data = setup
    tmp = base / "rl_zvp"
    tmp.mkdir()
    out = train(tmp, model, data, 4, "--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0",
                "--actor.eps_clip_low_high", "0.2", "0.28",
                "--reward.remote_url", str(REPO / "tests" / "fixtures" / "uniform_reward.py"), *BF16_NO_CHECKPOINT)
    assert out.returncode == 0, (tmp / "train.log").read_text()[-4000:]
    assert "its paper clips" not in out.stderr  # run as published: no clip warning
    rows = metrics(tmp)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["copo_zero_std"] == 1 and row["copo_signal_grpo"] == 0  # GRPO: nothing to learn
        assert row["copo_loss_local"] == 0 and row["copo_loss_global"] != 0  # RL-ZVP: the entropy-scaled term
        assert row["copo_w_global"] == 1 and abs(row["copo_weighted_global_adv"]) < 0.1 + 1e-6  # +-alpha
        assert math.isfinite(row["policy_loss"]) and row["actor_grad_norm"] > 0
    trained = load_weights(tmp / "final")
    assert any(not torch.equal(v, trained[k]) for k, v in load_weights(model).items() if k in trained)
