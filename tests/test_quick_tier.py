"""`pytest --quick` (tests/quick_tier.py): the tests marked heavy are left out, and a test that is not marked but starts
a Ray cluster or a vLLM engine fails, naming what it started. Each case is a pytest of its own, in a fresh process, over
a few tests written for it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import quick_tier

TESTS = Path(__file__).resolve().parent

CONFTEST = """
import quick_tier

def pytest_addoption(parser):
    quick_tier.add_option(parser)

def pytest_configure(config):
    quick_tier.configure(config)
"""

# a process that runs as Ray's raylet does (its executable is named so), and one titled as vLLM's engine process is,
# each living 2 s: what the watch must see, whatever started them
LIGHT_CASES = """
import shutil, subprocess
import pytest

def test_nothing_heavy():
    subprocess.run(["sleep", "1"], check=True)  # a subprocess of its own is fine

def test_an_unmarked_raylet(tmp_path):
    raylet = shutil.copy(shutil.which("sleep"), tmp_path / "raylet")
    subprocess.run([raylet, "2"], check=True)

def test_an_unmarked_vllm_engine():
    subprocess.run(["bash", "-c", "exec -a VLLM::EngineCore sleep 2"], check=True)

@pytest.mark.heavy
def test_a_marked_raylet(tmp_path):
    raylet = shutil.copy(shutil.which("sleep"), tmp_path / "raylet")
    subprocess.run([raylet, "2"], check=True)
"""

REAL_RAY = """
def test_starts_ray_unmarked():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
"""


def run_pytest(folder: Path, cases: str, *flags: str, cache: bool = False) -> str:
    """pytest over ``cases`` in ``folder`` (its test_cases.py; ``cases`` None: the test files already there), with the
    quick tier's plugin as tests/conftest.py registers it, and pytest's cache only if asked; its output."""
    (folder / "conftest.py").write_text(CONFTEST)
    if cases is not None:
        (folder / "test_cases.py").write_text(textwrap.dedent(cases))
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    heavy: starts Ray, vLLM or a training run\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           quick_tier.NESTED_ENV: str(os.getpid())}  # its tests' processes are its own to judge, not this test's
    env.pop("RAY_ADDRESS", None)
    no_cache = [] if cache else ["-p", "no:cacheprovider"]
    out = subprocess.run([sys.executable, "-m", "pytest", *no_cache, "-rA", *flags], cwd=folder,
                         env=env, capture_output=True, text=True, timeout=300)
    return out.stdout + out.stderr


def outcome(out: str) -> dict:
    """pytest's last line as counts, its warnings left out: {"passed": 3, "errors": 2}."""
    counts = re.findall(r"(\d+) (\w+)", out.strip().splitlines()[-1])
    return {what: int(n) for n, what in counts if not what.startswith("warning")}


def test_the_quick_tier_leaves_out_heavy_tests_and_fails_an_unmarked_one_that_starts_ray_or_vllm(tmp_path):
    out = run_pytest(tmp_path, LIGHT_CASES, "--quick")
    assert outcome(out) == {"passed": 3, "deselected": 1, "errors": 2}, out  # an error at each one's teardown
    assert "PASSED test_cases.py::test_nothing_heavy" in out and "ERROR test_cases.py::test_nothing_heavy" not in out
    assert ("test_cases.py::test_an_unmarked_raylet: this test started raylet but is not marked heavy: mark it "
            "(@pytest.mark.heavy, or pytestmark = pytest.mark.heavy for its module) so that `pytest --quick` leaves "
            "it out") in out, out
    assert "test_cases.py::test_an_unmarked_vllm_engine: this test started VLLM::EngineCore but is not marked heavy" \
        in out, out
    assert "test_a_marked_raylet" not in out  # deselected, never run


def test_without_quick_every_test_runs_and_nothing_is_watched(tmp_path):
    out = run_pytest(tmp_path, LIGHT_CASES)
    assert outcome(out) == {"passed": 4}, out


@pytest.mark.heavy(group=2)  # a local Ray cluster, in group 2 for balance (tests/quick_tier.py)
def test_the_quick_tier_fails_an_unmarked_test_that_starts_a_real_ray_cluster(tmp_path):
    out = run_pytest(tmp_path, REAL_RAY, "--quick")
    assert outcome(out) == {"passed": 1, "error": 1}, out
    assert ("test_cases.py::test_starts_ray_unmarked: this test started gcs_server, raylet, ray.init (still connected "
            "at the end) but is not marked heavy") in out, out


# each test writes which xdist worker ran it, heavy ones first: without the heavy tests' groups, xdist's load scheduling
# hands the first two to one worker and the next two to the other
ON_WHICH_WORKER = """
import os
from pathlib import Path
import pytest

def ran(name):
    with open(Path(__file__).parent / "workers.txt", "a") as f:
        f.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")

@pytest.mark.heavy
@pytest.mark.parametrize("i", range(4))
def test_heavy(i):
    ran(f"heavy{i}")

@pytest.mark.heavy(group=2)
@pytest.mark.parametrize("i", range(3))
def test_heavy_of_group_2(i):
    ran(f"apart{i}")

@pytest.mark.parametrize("i", range(4))
def test_light(i):
    ran(f"light{i}")
"""


def test_under_xdist_each_heavy_group_runs_on_one_worker_and_the_two_side_by_side(tmp_path):
    out = run_pytest(tmp_path, ON_WHICH_WORKER, "-n", "2", "--dist", "loadgroup")
    assert outcome(out) == {"passed": 11}, out
    workers = dict(line.split() for line in (tmp_path / "workers.txt").read_text().splitlines())
    group_1 = {workers[f"heavy{i}"] for i in range(4)}
    group_2 = {workers[f"apart{i}"] for i in range(3)}
    assert len(group_1) == 1 and len(group_2) == 1 and group_1 != group_2, workers


def test_a_heavy_mark_with_another_argument_is_refused_naming_the_test(tmp_path):
    """`heavy(local_ray=False)`, the mark's argument before the groups were balanced, would otherwise put the test in
    group 1 unseen."""
    out = run_pytest(tmp_path, "import pytest\n\n@pytest.mark.heavy(local_ray=False)\ndef test_old(): pass\n",
                     "-n", "2", "--dist", "loadgroup")
    assert outcome(out) == {"error": 1}, out  # failed at its setup
    assert re.search(r"test_cases.py::test_old(@heavy)?: @pytest.mark.heavy takes only group=1 or group=2 .*"
                     r"kwargs \{'local_ray': False\}", out), out


def test_under_xdist_each_worker_watches_what_its_own_tests_start(tmp_path):
    """Also the order's run under xdist: the controller hands its read of the last times to both workers (their orders
    must be equal, or xdist stops), and writes this run's from every worker's reports."""
    times = tmp_path / ".pytest_cache" / "v" / quick_tier.LongestFirst.KEY
    times.parent.mkdir(parents=True)
    times.write_text(json.dumps({"test_cases.py": 1.0, "test_elsewhere.py": 2.0}))
    out = run_pytest(tmp_path, LIGHT_CASES, "--quick", "-n", "2", cache=True)
    assert outcome(out) == {"passed": 3, "errors": 2}, out  # xdist's controller does not count the deselected
    assert "3 items" in out and "test_a_marked_raylet" not in out, out
    assert "test_cases.py::test_an_unmarked_raylet: this test started raylet but is not marked heavy" in out, out
    assert "test_cases.py::test_an_unmarked_vllm_engine: this test started VLLM::EngineCore but is not marked heavy" \
        in out, out
    seconds = json.loads(times.read_text())
    assert set(seconds) == {"test_cases.py", "test_elsewhere.py"} and seconds["test_cases.py"] >= 2, seconds


class Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_modules_run_longest_first_together_and_untimed_ones_after_in_their_order():
    items = [Item(n) for n in ("a.py::t1", "a.py::t2", "b.py::t[1]", "c.py::t", "b.py::t[2]", "d.py::t")]
    quick_tier.longest_modules_first(items, {"a.py": 1.0, "b.py": 30.0, "gone.py": 99.0})
    assert [i.nodeid for i in items] == ["b.py::t[1]", "b.py::t[2]", "a.py::t1", "a.py::t2", "c.py::t", "d.py::t"]


# two files collected short one first; each test writes its name where it runs, in the order they run
SHORT_AND_LONG = {"test_a_short.py": "def test_short():\n    ran('short')\n",
                  "test_b_long.py": "import time\n\ndef test_long():\n    time.sleep(1.5)\n    ran('long')\n"}
RAN = """
from pathlib import Path

def ran(name):
    with open(Path(__file__).parent / "ran.txt", "a") as f:
        f.write(name + "\\n")
"""


def test_the_quick_tier_runs_the_longest_module_of_its_last_run_first(tmp_path):
    for name, code in SHORT_AND_LONG.items():
        (tmp_path / name).write_text("from ran import ran\n" + code)
    (tmp_path / "ran.py").write_text(RAN)
    ran = tmp_path / "ran.txt"

    out = run_pytest(tmp_path, None, "--quick", "-p", "no:xdist", cache=True)
    assert outcome(out) == {"passed": 2}, out
    assert ran.read_text().split() == ["short", "long"]  # no times yet: the collected order
    seconds = json.loads((tmp_path / ".pytest_cache" / "v" / quick_tier.LongestFirst.KEY).read_text())
    assert seconds["test_b_long.py"] >= 1.5 > seconds["test_a_short.py"], seconds

    ran.unlink()
    out = run_pytest(tmp_path, None, "--quick", "-p", "no:xdist", cache=True)
    assert outcome(out) == {"passed": 2}, out
    assert ran.read_text().split() == ["long", "short"]  # under xdist: the next test
