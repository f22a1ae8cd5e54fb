"""Shared fixtures: real OpenRLHF args, a tiny real model, a one-process gloo group, the CPU path."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# Nothing here may come from the hub, and this machine cannot reach it: a lookup of a model name that is no folder
# (the driver reads the actor tokenizer's stop tokens; tests pass names like "unused") otherwise waits out the hub
# client's retries, 46 s a call (each case of test_which_patches_a_run_gets: 335 s -> 10 s for its 7 cases). Set
# before anything imports huggingface_hub, which reads it once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # `tests_support`: helpers shared by the tests

import quick_tier  # noqa: E402
from tests_support import free_port, smollm2_build_key  # noqa: E402

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

    import torch

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, attention_dropout=0.0)
    model = AutoModelForCausalLM.from_config(cfg)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def smollm2_cache(request, tmp_path_factory):
    """The tests' own project cache, where the demo's tests build SmolLM2 (about 40 s of a core). It is kept between
    runs in pytest's cache folder (.pytest_cache, git-ignored), under a key of the build's code and libraries
    (`smollm2_build_key`), so that the inner loop (`pytest --quick`) builds again only after a change to what the
    build depends on; builds under other keys are removed. A fresh clone, CI's, builds once: both pytest-xdist workers
    ask for the same folder, and `smollm2_instruct` lets one build while the other waits. Under `-p no:cacheprovider`
    (no cache folder) it is the run's own, under pytest's base temp dir, one level up under xdist (each worker's base
    temp dir lies inside the run's)."""
    cache = getattr(request.config, "cache", None)
    if cache is None:
        base = tmp_path_factory.getbasetemp()
        return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "openrlhf_copo_cache"
    kept = cache.mkdir("openrlhf_copo")
    key = f"build-{smollm2_build_key()}"
    for old in kept.glob("build-*"):
        if old.name != key:
            shutil.rmtree(old, ignore_errors=True)  # the other worker may be removing it too
    return kept / key


@pytest.fixture(scope="session", autouse=True)
def project_cache(smollm2_cache):
    """Where the tests' tiny models take their tokenizer, and the evaluation and reward tests SmolLM2, from (the
    default cache of `smollm2_instruct` and `tiny_qwen2`): the user's cache if it already holds SmolLM2 (a developer's
    machine: nothing to build), else the tests' own (`smollm2_cache`, set as `OPENRLHF_COPO_CACHE`), which the demo's
    tests build into anyway (tests/cpu_demo/conftest.py). So a fresh machine, CI's, builds SmolLM2 once, not once more
    for a user's cache, and the tests fill no cache outside the checkout that the user did not fill. A cache the user
    names in `OPENRLHF_COPO_CACHE` is kept."""
    from openrlhf_copo.cpu_demo.models import is_model_dir, smollm2_path

    if "OPENRLHF_COPO_CACHE" not in os.environ and not is_model_dir(smollm2_path()):
        os.environ["OPENRLHF_COPO_CACHE"] = str(smollm2_cache)


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

    import torch

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
