"""Helpers shared by the tests (importable as `tests_support`: conftest puts tests/ on sys.path)."""

from __future__ import annotations

import socket
from pathlib import Path

import torch

from openrlhf.trainer.ppo_utils.experience import Experience



REPO = Path(__file__).resolve().parents[1]
REWARD_FILE = REPO / "openrlhf_copo" / "rewards" / "math_reward.py"


def load_by_path(path):
    """A reward file's `reward_func`, loaded exactly as OpenRLHF's SingleTurnAgentExecutor loads --reward.remote_url."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reward_func", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copo_argv(*extra: str, model: str = "unused") -> list:
    """A complete COPO command line (as a user would type it) for the real parser."""
    return [
        "--advantage_estimator", "copo",
        "--actor.model_name_or_path", model,
        "--reward.remote_url", str(REWARD_FILE),
        "--rollout.n_samples_per_prompt", "4",
        "--rollout.batch_size", "4",
        "--train.batch_size", "16",
        "--train.micro_batch_size", "16",
        "--algo.kl.use_loss",
        "--algo.kl.init_coef", "0",
        "--ds.zero_stage", "0",
        "--ds.attn_implementation", "sdpa",
        "--actor.lr_warmup_ratio", "0",
        "--actor.adam.lr", "1e-3",
        *extra,
    ]


def make_rollout(rewards, answer_ids, prompt_len: int = 3, seed: int = 0):
    """One real OpenRLHF `Experience` per response, laid out as OpenRLHF's samples generator makes them:
    [1, T] sequences, prompt then response, per-sample info from the reward function's extra_logs."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for b, (row_r, row_id) in enumerate(zip(rewards, answer_ids)):
        for r, aid in zip(row_r, row_id):
            resp_len = int(torch.randint(2, 6, (1,), generator=g))
            T = prompt_len + resp_len
            seq = torch.randint(1, 120, (1, T), generator=g)
            action_mask = torch.zeros(1, T - 1, dtype=torch.long)
            action_mask[0, prompt_len - 1:] = 1
            samples.append(Experience(
                sequences=seq,
                attention_mask=torch.ones(1, T, dtype=torch.long),
                action_mask=action_mask,
                rewards=torch.tensor([float(r)]),
                scores=torch.tensor([float(r >= 1)]),
                response_length=torch.tensor([resp_len]),
                truncated=torch.tensor([False]),
                total_length=torch.tensor([T]),
                prompts=[f"prompt {b}"],
                labels=["7"],
                info={"reward": torch.tensor([float(r)]), "copo_answer_id": torch.tensor([int(aid)]),
                      "copo_correct": torch.tensor([float(r >= 1)])},
            ))
    return samples
