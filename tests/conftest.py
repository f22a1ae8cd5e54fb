"""Shared fixtures: real OpenRLHF args, a tiny real model, a one-process gloo group.

The only stand-ins here are for CUDA *device selection* calls that OpenRLHF makes on its
training path and that have no meaning on a CPU (`torch.cuda.set_device`, `synchronize`,
`current_device`, and DeepSpeed's device mesh type). They live in this test environment only
(`cuda_device_calls_on_cpu`); moving a tensor to CUDA or running a CUDA kernel still fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # `tests_support`: helpers shared by the tests

from tests_support import free_port  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def load_args():
    from openrlhf_copo.cli.train_ppo_ray import load_args

    return load_args


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A random 2-layer Qwen2 (hidden 64), saved as an ordinary HF folder."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, attention_dropout=0.0)
    model = AutoModelForCausalLM.from_config(cfg)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def gloo_world():
    """A real torch.distributed group of one process on 127.0.0.1 (what DeepSpeed joins)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0",
                          WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    # left up for the session: DeepSpeed engines keep references to it


@pytest.fixture
def cuda_device_calls_on_cpu(monkeypatch):
    """Device-selection calls of OpenRLHF's training path, made harmless on a CPU (see module doc)."""
    import openrlhf.utils.deepspeed.deepspeed as ds_mod
    from torch.distributed.device_mesh import init_device_mesh

    if torch.cuda.is_available():
        return
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(ds_mod, "init_device_mesh", lambda _type, *a, **k: init_device_mesh("cpu", *a, **k))


@pytest.fixture(scope="session")
def copo_patched():
    from openrlhf_copo.openrlhf_ext import patches

    patches.apply()
    assert patches.is_applied()
    return patches
