"""The GPU suite (`pytest -m gpu`): for a user checking a GPU install, and for us where a GPU is lent.

Every test here carries the `gpu` marker, which the CPU test command deselects (pyproject's addopts:
`-m "not gpu"`). Run on a machine without CUDA, the suite fails at once, loudly: it never skips."""

import os

import pytest
import torch

from openrlhf_copo.openrlhf_ext.worker_hook import deepspeed_arch_list
from tests_support import free_port

# The training-step tests build DeepSpeed in this process, where the worker hook does not run.
deepspeed_arch_list()


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cuda():
    if not torch.cuda.is_available():
        pytest.fail("the GPU suite (pytest -m gpu) needs a CUDA device; this machine has none")
    return torch.device("cuda", 0)


@pytest.fixture(scope="session")
def nccl_world(cuda):
    """A real NCCL process group of one process (what DeepSpeed joins on a GPU node)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0",
                          WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        torch.cuda.set_device(cuda)
        dist.init_process_group("nccl", rank=0, world_size=1)
    assert dist.get_backend() == "nccl"
    yield
