"""Every example script's command line goes through the real parser (OpenRLHF's + COPO's), no GPU needed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openrlhf_copo.openrlhf_ext.config import copo_settings

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "scripts"
ALL = sorted(p.name for p in SCRIPTS.glob("*.sh") if not p.name.startswith("_"))


def script_args(name, **env):
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    out = subprocess.run(["bash", str(SCRIPTS / name)], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "PATH": path, "COPO_PRINT_ARGS": "1", **env})
    return out.stdout.splitlines()


def test_there_are_scripts():
    assert {"train_copo_ray.sh", "train_grpo_baseline.sh", "train_copo_released_preset.sh"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_script_parses(load_args, name):
    args = load_args(script_args(name))
    assert args.rollout.n_samples_per_prompt == 6 and args.rollout.batch_size == 512


def test_paper_setting(load_args):
    args = load_args(script_args("train_copo_ray.sh"))
    assert copo_settings(args) == dict(mode="copo", gamma=20.0, rho=1.5, zero_control="prompt", std="population",
                                       eps=1e-6, entropy_base=2.0)
    assert args.algo.kl.use_loss and args.actor.loss_agg_mode == "seq-mean-token-mean"
    assert args.rollout.batch_size * args.rollout.n_samples_per_prompt // args.train.batch_size == 32  # mini-batches


def test_released_preset(load_args):
    args = load_args(script_args("train_copo_released_preset.sh"))
    assert copo_settings(args) == dict(mode="copo", gamma=5.0, rho=1.0, zero_control="response", std="unbiased",
                                       eps=1e-6, entropy_base=2.0)
    assert args.algo.kl.init_coef == 0 and args.train.batch_size == 192


def test_grpo_baseline_and_overrides(load_args):
    assert copo_settings(load_args(script_args("train_grpo_baseline.sh")))["mode"] == "grpo"
    args = load_args(script_args("train_copo_qwen2.5_7b.sh", ESTIMATOR="go_only"))
    assert args.actor.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct"
    assert copo_settings(args)["mode"] == "go_only"
