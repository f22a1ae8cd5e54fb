"""Every example script's command line goes through the real parser (OpenRLHF's + COPO's), no GPU needed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openrlhf_copo.openrlhf_ext.config import copo_settings

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "scripts"
ALL = sorted(p.name for p in SCRIPTS.glob("*.sh") if not p.name.startswith("_"))
TRAIN = [n for n in ALL if n.startswith(("train_", "sweep_"))]


def script_runs(name, **env):
    """The command line(s) a script would submit (a sweep submits several, separated by '---')."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    out = subprocess.run(["bash", str(SCRIPTS / name)], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "PATH": path, "COPO_PRINT_ARGS": "1", **env})
    runs, current = [], []
    for line in out.stdout.splitlines():
        if line == "---":
            runs.append(current)
            current = []
        else:
            current.append(line)
    return runs + ([current] if current else [])


def script_args(name, **env):
    (only,) = script_runs(name, **env)
    return only


def test_there_are_scripts():
    assert {"train_copo_ray.sh", "train_grpo_baseline.sh", "train_copo_released_preset.sh"} <= set(ALL)


@pytest.mark.parametrize("name", TRAIN)
def test_training_script_parses(load_args, name):
    for argv in script_runs(name):
        args = load_args(argv)
        assert args.rollout.n_samples_per_prompt == 6 and args.rollout.batch_size == 512


def test_every_script_is_covered():
    assert set(ALL) == set(TRAIN) | {"evaluate_run.sh", "prepare_data.sh"}


def test_prepare_data_script_parses():
    from openrlhf_copo.cli.prepare_data import build_parser

    runs = [build_parser().parse_args(argv) for argv in script_runs("prepare_data.sh", TEMPLATE="dapo")]
    assert [r.source for r in runs] == ["dapo_math_17k", "math500", "aime24", "aime25", "gsm8k"]
    assert {r.template for r in runs} == {"dapo"}


def test_evaluate_script_parses():
    from openrlhf_copo.cli.evaluate import build_parser

    args = build_parser().parse_args(script_args("evaluate_run.sh", MODELS="a b", WITH_AIME25="1"))
    assert args.model == ["a", "b"] and args.temperature == 1.0 and args.top_p == 1.0
    assert args.benchmark == ["math500=data/math500.jsonl:8", "aime24=data/aime24.jsonl:64",
                              "aime25=data/aime25.jsonl:64"]


def test_sweep_covers_table_4(load_args):
    pairs = [(copo_settings(a)["gamma"], copo_settings(a)["rho"])
             for a in map(load_args, script_runs("sweep_gamma_rho.sh"))]
    assert pairs == [(3, 1), (5, 1), (10, 1), (20, 0.5), (20, 1.2), (20, 1.5)]


@pytest.mark.parametrize("ablation", ["go_selective", "go_blended", "go_only", "copo_selective"])
def test_ablation_scripts(load_args, ablation):
    assert copo_settings(load_args(script_args(f"train_ablation_{ablation}.sh")))["mode"] == ablation


def test_dapo_baseline(load_args):
    args = load_args(script_args("train_dapo_baseline.sh"))
    assert args.algo.advantage.estimator == "group_norm" and args.algo.dynamic_filtering_enable
    assert args.actor.eps_clip_low_high == [0.2, 0.28] and args.actor.loss_agg_mode == "token-mean"
    assert args.algo.kl.init_coef == 0


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
    assert args.copo.incorrect == "reward"
    assert load_args(script_args("train_copo_ray.sh")).copo.incorrect == "answer"  # the paper's reading


def test_grpo_baseline_and_overrides(load_args):
    assert copo_settings(load_args(script_args("train_grpo_baseline.sh")))["mode"] == "grpo"
    args = load_args(script_args("train_copo_qwen2.5_7b.sh", ESTIMATOR="go_only"))
    assert args.actor.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct"
    assert copo_settings(args)["mode"] == "go_only"


def test_checkpoint_and_data_paths_are_absolute(tmp_path):
    """A job runs in Ray's per-session copy of the working dir: a relative SAVE_DIR would hide the checkpoint
    from a resubmitted job. Local data becomes absolute too; a hub dataset name is left alone."""
    repo = SCRIPTS.parents[1]
    data = tmp_path / "train.jsonl"
    data.write_text("")
    args = script_args("train_copo_ray.sh", SAVE_DIR="runs/x", DATA=os.path.relpath(data, repo))
    assert args[args.index("--ckpt.path") + 1] == str(repo / "runs" / "x" / "ckpt")
    assert args[args.index("--ckpt.output_dir") + 1] == str(repo / "runs" / "x")
    given = args[args.index("--data.prompt_dataset") + 1]
    assert os.path.isabs(given) and os.path.realpath(given) == os.path.realpath(data)
    args = script_args("train_copo_ray.sh", DATA="BytedTsinghua-SIA/DAPO-Math-17k")
    assert args[args.index("--data.prompt_dataset") + 1] == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert args[args.index("--ckpt.path") + 1].startswith(str(repo) + "/checkpoints/")


@pytest.mark.parametrize("nodes", ["1", "4"])
def test_multi_node_run_has_one_engine_per_actor_gpu(load_args, nodes):
    """The scripts colocate everything (--train.colocate_all), where OpenRLHF asserts that vLLM's GPUs equal the
    actor's: NNODES=4 must get 32 engines, not 8."""
    args = load_args(script_args("train_copo_ray.sh", NNODES=nodes))
    assert args.actor.num_nodes == int(nodes) and args.train.colocate_all
    assert args.vllm.num_engines * args.vllm.tensor_parallel_size == args.actor.num_nodes * args.actor.num_gpus_per_node
