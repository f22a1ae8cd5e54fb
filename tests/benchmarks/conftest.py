"""The benchmark scripts are files, not a package: each test module loads its script by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lc():
    return load_benchmark("learning_curve")


@pytest.fixture(scope="module")
def runs():
    return load_benchmark("cpu_demo_runs")


@pytest.fixture(scope="module")
def sim():
    return load_benchmark("sim_policy")


@pytest.fixture(scope="module")
def regimes():
    return load_benchmark("regimes")
