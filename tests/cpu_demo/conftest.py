"""The SmolLM2 folder the demo's tests share: built once per test run, whichever worker asks first."""

from __future__ import annotations

import os

import pytest

from openrlhf_copo.cpu_demo.models import smollm2_instruct


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory):
    """One project cache for the test run, under pytest's base temp dir. Under pytest-xdist each worker has a base
    temp dir of its own inside the run's: the cache goes one level up, so that both workers share one build (about
    25 s of a core; test_models.py and test_data.py land on either worker)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / "openrlhf_copo_cache"


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_cache) -> str:
    """SmolLM2 built into the shared cache; a worker that finds the other one building waits for it (the lock sits
    beside the cache, which must hold nothing but the build: test_models.py checks that)."""
    from filelock import FileLock

    with FileLock(str(smollm2_cache) + ".lock"):
        return smollm2_instruct(smollm2_cache)
