"""`runtime_patches.patches_for`: which run-time patches a run's workers install. A COPO run gets all ten; a run of any
other estimator gets OpenRLHF's own functions wherever a patch would change what it does, unless a flag asks."""

import json
import os
import subprocess
import sys

import pytest

from openrlhf_copo.contract import PATCHES_ENV
from openrlhf_copo.openrlhf_ext import device, driver
from openrlhf_copo.openrlhf_ext.runtime_patches import patches_env, patches_for
from tests_support import copo_argv


@pytest.mark.parametrize("extra, expected", [
    ([], set(range(1, 11))),  # COPO: every patch but Reinforce-Ada's rounds
    (["--advantage_estimator", "reinforce_ada"], set(range(1, 12))),  # and them for the mode that samples adaptively
    (["--advantage_estimator", "reinforce_ada_copo"], set(range(1, 12))),  # and with COPO's global term
    (["--advantage_estimator", "reinforce_ada_uniform"], set(range(1, 12))),  # and its selection control
    (["--advantage_estimator", "knapsack"], set(range(1, 12))),  # and for the mode that allocates its budget
    (["--advantage_estimator", "group_norm"], {1, 5, 7}),  # a baseline: the log-only patches alone
    (["--advantage_estimator", "group_norm", "--copo.same_pipeline"], {1, 4, 5, 6, 7, 8, 9, 10}),
    (["--advantage_estimator", "group_norm", "--copo.metrics_file", "m.jsonl"], {1, 4, 5, 7}),
    (["--advantage_estimator", "group_norm", "--copo.eval_greedy", "--eval.dataset", "t.jsonl"], {1, 5, 7, 8}),
    (["--advantage_estimator", "dr_grpo", "--copo.eval_before_train", "--eval.dataset", "t.jsonl"], {1, 5, 6, 7}),
])
def test_which_patches_a_run_gets(load_args, extra, expected):
    args = load_args(copo_argv(*extra))
    assert set(patches_for(args)) == expected
    on_cuda = device.DeviceDecision(device.CUDA, "--copo.device cuda")
    env = driver.ray_init_kwargs(args, {}, on_cuda)["runtime_env"]["env_vars"]
    assert env[PATCHES_ENV] == ",".join(map(str, sorted(expected)))


WORKER = """
import inspect, json, sys
from openrlhf_copo.openrlhf_ext.worker_hook import ray_worker_setup
ray_worker_setup()
import openrlhf.trainer.ppo_trainer as ppo_trainer
import openrlhf.utils.agent as agent
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
functions = {
    1: RemoteExperienceMaker.compute_advantages_and_returns, 2: ActorPPOTrainer.__init__,
    3: ActorPPOTrainer.training_step, 4: ppo_trainer.BasePPOTrainer.save_logs_and_checkpoints,
    5: ppo_trainer.compute_eval_metrics, 6: ppo_trainer.BasePPOTrainer.init_checkpoint_states,
    7: agent.SingleTurnAgentExecutor.execute, 8: SamplesGenerator.generate_eval_samples,
    9: SamplesGenerator._dispatch_prompts_to_vllm, 10: ppo_trainer.prepare_datasets,
    11: SamplesGenerator._generate_vllm}
print(json.dumps({n: "openrlhf_copo" in inspect.getsourcefile(f) for n, f in functions.items()}))
"""


@pytest.mark.parametrize("extra", [[], ["--copo.same_pipeline"]])
def test_a_baseline_worker_runs_openrlhfs_own_functions_unless_a_flag_asks(load_args, extra):
    """A fresh interpreter, as a Ray worker starts, with the variable the driver sets for a group_norm run: each of
    OpenRLHF's functions that a patch would change is OpenRLHF's own (its source file is openrlhf's), and only the
    log-only patches are ours; with --copo.same_pipeline, those of a COPO run's pipeline (4-10) too."""
    args = load_args(copo_argv("--advantage_estimator", "group_norm", *extra))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENRLHF_COPO_CPU", "PYTORCH_NVML_BASED_CUDA_CHECK")}
    env[PATCHES_ENV] = patches_env(patches_for(args))
    out = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    ours = {int(n) for n, patched in json.loads(out.stdout.strip().splitlines()[-1]).items() if patched}
    assert ours == ({1, 5, 7} if not extra else {1, 4, 5, 6, 7, 8, 9, 10})
