"""The SmolLM2 folder the demo's tests share: built once per test run, whichever worker asks first."""

from __future__ import annotations

import pytest

from openrlhf_copo.cpu_demo.models import smollm2_instruct


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_cache) -> str:
    """SmolLM2 built into the run's own cache (tests/conftest.py), never taken from the user's: these tests check the
    build itself. A worker that finds the other one building waits for it (`smollm2_instruct`'s lock on the cache,
    which must hold nothing but the build: test_models.py checks that)."""
    return smollm2_instruct(smollm2_cache)
