"""Shared fixtures: real OpenRLHF args, a tiny real model, a one-process gloo group, the CPU path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Nothing here may come from the hub, and this machine cannot reach it: a lookup of a model name that is no folder
# (the driver reads the actor tokenizer's stop tokens; tests pass names like "unused") otherwise waits out the hub
# client's retries, 46 s a call (each case of test_which_patches_a_run_gets: 335 s -> 10 s for its 7 cases). Set
# before anything imports huggingface_hub, which reads it once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # `tests_support`: helpers shared by the tests

import quick_tier  # noqa: E402
from tests_support import free_port  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser):
    quick_tier.add_option(parser)


def pytest_configure(config):
    quick_tier.configure(config)
    # DeepSpeed's JIT ops from setup's build (this environment's folder and ninja), in-process tests included
    from openrlhf_copo.openrlhf_ext import cpu

    cpu.use_this_environments_op_builds()


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


@pytest.fixture
def no_ray_cluster(monkeypatch, tmp_path):
    """No Ray cluster for this test's driver to join, whatever runs on the machine: RAY_ADDRESS unset, and an empty
    Ray temp dir (`RAY_TMPDIR`), so no `ray start` cluster's address file is found (`device.cluster_address`)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))


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


@pytest.fixture(scope="session")
def cpu_path():
    """The package's own CPU device path (what every worker of a CPU run installs), in this process."""
    from openrlhf_copo.openrlhf_ext import cpu

    assert not torch.cuda.is_available(), "these tests exercise the CPU path; this machine has CUDA"
    assert cpu.apply()


@pytest.fixture(scope="session")
def copo_patched():
    """The COPO glue is active: installed at run time, or (OPENRLHF_COPO_FORK_UNDER_TEST=DIR) carried by a
    copy of openrlhf in DIR that has patches/ applied, where the run-time patches must stand aside."""
    import openrlhf

    from openrlhf_copo.openrlhf_ext import runtime_patches

    fork = os.environ.get("OPENRLHF_COPO_FORK_UNDER_TEST")
    applied_now = runtime_patches.apply()
    if fork:
        assert openrlhf.__file__.startswith(fork), f"expected the patched fork under {fork}, got {openrlhf.__file__}"
        assert not applied_now, "the run-time patches went on top of the patched fork"
    assert runtime_patches.is_applied()
    return runtime_patches
