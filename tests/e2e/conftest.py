"""The first end-to-end run, shared by the tests that read it: tests/e2e/test_train_ppo_ray_cpu.py (its metrics,
evaluation, weights, wandb file and checkpoint), tests/e2e/test_probe_cpu.py (its step 1, against the probe) and
tests/e2e/test_reinforce_ada_cpu.py (its step 1's responses, against Reinforce-Ada's first round)."""

import pytest

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from tests_support import RECORDED_RESPONSES, REPO, train, write_prompts

#: The first run also evaluates (before training and at step 2), trains in fp32 (the CPU path's
#: --ds.param_dtype), draws seeded rollouts, and logs to wandb in offline mode (no network), as a user turning wandb
#: on would.
FIRST_RUN_EXTRA = ("--eval.steps", "2", "--eval.n_samples_per_prompt", "2", "--eval.temperature", "1.0",
                   "--copo.eval_before_train", "--copo.eval_greedy", "--copo.eval_sampled_prompts", "3",
                   "--copo.seeded_rollouts",
                   "--ds.param_dtype", "fp32",
                   "--logger.wandb.key", "offline-not-a-key", "--logger.wandb.project", "copo-e2e",
                   "--logger.wandb.run_name", "e2e")
#: Its prompts: 6 in the file, of which --data.max_samples 4 are trained on (2 steps of 2 prompts x 4 samples).
ROWS, MAX_SAMPLES = 6, 4
#: Its reward: the parity reward, through the fixture that also records every response it scores (to
#: RECORDED_RESPONSES in the run's folder), so that a run of another method with the same seed can be compared with it
#: response by response.
RECORDING_REWARD = REPO / "tests" / "fixtures" / "recording_reward.py"


@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    """(folder, model, training prompts, the finished process). Its held-out prompts are none of the training ones:
    a seeded engine counts draws per prompt, so a step-0 evaluation sampling a training prompt would change what
    step 1 draws for it, and the probe's batch (which no evaluation precedes) would differ from step 1."""
    tmp = tmp_path_factory.mktemp("e2e")
    model = tiny_qwen2(tmp / "tiny-model")
    data = write_prompts(tmp / "prompts.jsonl", ROWS)
    held_out = write_prompts(tmp / "held_out.jsonl", ROWS + 4)
    held_out.write_text("\n".join(held_out.read_text().splitlines()[ROWS:]) + "\n")
    first = train(tmp, model, data, MAX_SAMPLES, "--eval.dataset", str(held_out), *FIRST_RUN_EXTRA,
                  "--reward.remote_url", str(RECORDING_REWARD),
                  env={"WANDB_MODE": "offline", "WANDB_DIR": str(tmp), "WANDB_SILENT": "true",
                       "COPO_TEST_RECORD": str(tmp / RECORDED_RESPONSES), "COPO_TEST_SCORER": "parity_reward.py"},
                  vllm_worker_process=True)
    return tmp, model, data, first
