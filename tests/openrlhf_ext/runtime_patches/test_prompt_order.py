"""Patch 10 (`openrlhf_ext/runtime_patches/prompt_order.py`): the training prompts' order comes from --train.seed."""

import os

from tests_support import copo_argv

PROMPT_ORDER = r"""
import json, sys, torch
import openrlhf.trainer.ppo_trainer as ppo_trainer
from openrlhf.utils import get_strategy, get_tokenizer
from openrlhf_copo.cli.train_ppo_ray import load_args
from openrlhf_copo.openrlhf_ext.runtime_patches import prompt_order

argv, model = json.loads(sys.argv[1]), sys.argv[2]

def first_prompts(seed, drawn_before):
    # OpenRLHF's own prompt loader, built as in the PPOTrainer actor (torch.distributed not initialized there),
    # after the process's global torch generator drew `drawn_before` numbers
    args = load_args(argv + ["--train.seed", str(seed)])
    strategy = get_strategy(args)
    tokenizer = get_tokenizer(model, None, "left", strategy)
    torch.manual_seed(1234)
    torch.rand(drawn_before)
    prompts_dataloader, _, _ = ppo_trainer.prepare_datasets(strategy, tokenizer)
    return [p for _, batch, _, _ in prompts_dataloader for p in batch][:8]

unpatched = first_prompts(0, 0) == first_prompts(0, 3)
prompt_order.apply_seeded_prompt_order()
patched = first_prompts(0, 0) == first_prompts(0, 3)
print("RESULT", json.dumps({"unpatched_same": unpatched, "patched_same": patched,
                            "seed_1_differs": first_prompts(1, 0) != first_prompts(0, 0)}))
"""


def test_the_training_prompts_order_follows_the_seed_not_the_process(tmp_path, tiny_model_dir):
    """OpenRLHF builds the prompt loader in the PPOTrainer actor, where its sampler seeds itself from the
    process's global torch generator, which nothing there seeds with --train.seed: the benchmark's COPO and GRPO
    runs of one seed drew different first batches. With patch 10, two processes that drew differently before
    build the same order, and another --train.seed gives another order."""
    import json
    import subprocess
    import sys

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "label": str(2 * i)}) + "\n" for i in range(40)))
    argv = copo_argv("--data.prompt_dataset", str(data), "--data.input_key", "prompt", "--data.label_key", "label",
                     model=tiny_model_dir)
    out = subprocess.run([sys.executable, "-c", PROMPT_ORDER, json.dumps(argv), tiny_model_dir],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, (out.stdout + out.stderr)[-4000:]
    assert json.loads(lines[-1][len("RESULT "):]) == {"unpatched_same": False, "patched_same": True,
                                                       "seed_1_differs": True}
