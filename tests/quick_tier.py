"""The quick tier, `pytest --quick`: every test but those marked `heavy` (they start a Ray cluster, a vLLM engine or a
training run), with a watch that fails an unmarked test which starts one anyway, so the tier stays quick whoever
adds a test. A plugin that tests/conftest.py registers; it imports nothing heavy, so a test can run it in a fresh
pytest of its own."""

from __future__ import annotations

import os
import sys
import threading
from typing import Optional, Tuple

import psutil
import pytest

MARK = "heavy"  # registered in pyproject.toml
OPTION = "--quick"
# What a Ray cluster and a vLLM engine run as, whoever starts them (ray.init, `ray start`, the CLI in a subprocess):
# Ray's GCS and raylet executables, and the process title vLLM gives its engine (vllm.utils.system_utils).
RAY_EXECUTABLES = ("gcs_server", "raylet")
VLLM_TITLE = "VLLM::"
NESTED_ENV = "QUICK_TIER_NESTED"
POLL_S = 0.5  # a Ray cluster or a vLLM engine takes seconds to start and lives for as long


def descendants(pid: int, pruned=lambda pid: False) -> set:
    """The pids of every process below ``pid`` (a run's driver: its local Ray cluster and workers; psutil), leaving out
    those for which ``pruned`` is true and everything below them. Tests kill only their own run's workers, never
    another Ray job's on the same machine."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    out = {p.pid for p in below}
    for p in below:
        if p.pid in out and pruned(p.pid):
            try:
                out -= {p.pid} | {q.pid for q in p.children(recursive=True)}
            except psutil.NoSuchProcess:
                out.discard(p.pid)
    return out


def judged_apart(pid: int, watcher: int) -> bool:
    """Whether ``pid`` is a pytest that a test of the pytest ``watcher`` runs to judge tests of its own
    (tests/test_quick_tier.py runs one over tests written to start such processes): started with NESTED_ENV set to
    ``watcher``'s pid. What it and its tests start is its to judge, not ``watcher``'s."""
    try:
        return psutil.Process(pid).environ().get(NESTED_ENV) == str(watcher)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def heavy_process(pid: int) -> str | None:
    """What process ``pid`` is if it belongs to a Ray cluster or a vLLM engine ("raylet", "VLLM::EngineCore"), else
    None: the executable's name for Ray's, the title vLLM sets (its argv, as psutil reads it back) for its engine."""
    try:
        process = psutil.Process(pid)
        name, argv = process.name(), process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):  # ended meanwhile
        return None
    if name in RAY_EXECUTABLES:
        return name
    title = argv[0].split()[0] if argv and argv[0].split() else ""
    return title if title.startswith(VLLM_TITLE) else None


def add_option(parser) -> None:
    parser.addoption(OPTION, action="store_true",
                     help=f"the quick tier: leave out the tests marked {MARK} (Ray clusters, vLLM engines, training "
                          f"runs), and fail any other test that starts one")


class Watch:
    """Which heavy processes appeared below this pytest process during each test, set up and teardown included
    (a module's fixture may start the cluster): a thread looks every POLL_S seconds, so that a cluster a test starts
    and stops before it ends is seen too."""

    def __init__(self):
        self.pid = os.getpid()
        self.current = None
        self.seen = {}  # nodeid -> names of the heavy processes seen while it ran
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quick-tier-watch", daemon=True)
        self._thread.start()

    def look(self) -> None:
        below = descendants(self.pid, lambda pid: judged_apart(pid, self.pid))
        names = {name for pid in below if (name := heavy_process(pid))}
        with self._lock:
            if names and self.current is not None:
                self.seen.setdefault(self.current, set()).update(names)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.look()

    def start(self, nodeid: str) -> None:
        with self._lock:
            self.current = nodeid

    def end(self, nodeid: str) -> set:
        """The heavy processes seen during ``nodeid``, with a last look now."""
        self.look()
        with self._lock:
            self.current = None
            return self.seen.pop(nodeid, set())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def ray_connected() -> bool:
    """Whether this process is still a Ray driver (it joined a cluster, even one it did not start). Asked only if a
    test imported Ray: the quick tier need not import it."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def why_heavy(seen: set, connected: bool) -> str:
    """The one line that fails a test not marked heavy: what it started, and the marker to add."""
    what = sorted(seen) + (["ray.init (still connected at the end)"] if connected else [])
    return (f"this test started {', '.join(what)} but is not marked {MARK}: mark it (@pytest.mark.{MARK}, or "
            f"pytestmark = pytest.mark.{MARK} for its module) so that `pytest {OPTION}` leaves it out")


def module_of(nodeid: str) -> str:
    """The test file of a node id: "tests/test_core.py" for "tests/test_core.py::test_x[a]"."""
    return nodeid.split("::", 1)[0]


def longest_modules_first(items: list, seconds: dict) -> None:
    """Sort ``items`` in place so that the modules that took longest (``seconds``: module -> seconds, the last run's)
    come first, a module's tests staying together and in their order, and modules without a time after the timed ones
    in their collected order. Why: pytest-xdist hands out tests in their order, so a long module collected last (the
    fork's tests, tests/test_patches.py: 60 s) would keep one worker busy after the other had run out of tests; started
    first, it runs while the other worker takes the many short tests."""
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(module_of(item.nodeid), i)
    items.sort(key=lambda item: (-seconds.get(module_of(item.nodeid), 0.0), first_seen[module_of(item.nodeid)]))


class QuickTier:
    """The plugin, registered only under --quick, in the processes that run tests."""

    def __init__(self):
        self.watch = Watch()

    def pytest_collection_modifyitems(self, config, items):
        kept = [item for item in items if item.get_closest_marker(MARK) is None]
        left = [item for item in items if item.get_closest_marker(MARK) is not None]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept

    def pytest_runtest_logstart(self, nodeid, location):
        self.watch.start(nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when != "teardown":
            return
        seen, connected = self.watch.end(item.nodeid), ray_connected()
        if seen or connected:
            report = outcome.get_result()
            report.outcome, report.longrepr = "failed", f"{item.nodeid}: {why_heavy(seen, connected)}"

    def pytest_unconfigure(self, config):
        self.watch.stop()


class LongestFirst:
    """Registered under --quick in every process: the tests run longest module first (`longest_modules_first`), by each
    module's seconds in the quick tier's last run, which pytest's cache keeps. Under xdist the controller reads the
    cache once and hands the same times to every worker (xdist requires the workers' orders to be equal; a run ending
    beside this one could rewrite the file between two workers' reads). The process that gets every test's report
    (xdist's controller, or a pytest without xdist) writes this run's times at the end. Under -p no:cacheprovider the
    collected order is kept."""

    #: the cache key, and the worker input's: {module: seconds (set up, call and teardown of its tests)}
    KEY = "openrlhf_copo/quick_tier_module_seconds"

    def __init__(self, config):
        self.config = config
        self.seconds = {}

    def last_seconds(self):
        """The last run's seconds by module, or None where there is no cache to read them from."""
        if hasattr(self.config, "workerinput"):
            return self.config.workerinput.get(self.KEY)
        cache = getattr(self.config, "cache", None)
        return None if cache is None else cache.get(self.KEY, {})

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, on its controller, once per worker
    def pytest_configure_node(self, node):
        node.workerinput[self.KEY] = self.last_seconds()

    @pytest.hookimpl(trylast=True)  # after the quick tier has left out the heavy tests
    def pytest_collection_modifyitems(self, items):
        seconds = self.last_seconds()
        if seconds is not None:
            longest_modules_first(items, seconds)

    def pytest_runtest_logreport(self, report):
        module = module_of(report.nodeid)
        self.seconds[module] = self.seconds.get(module, 0.0) + report.duration

    def pytest_sessionfinish(self):
        cache = getattr(self.config, "cache", None)
        # a worker's reports are only its own part of the run: the controller writes
        if cache is not None and self.seconds and not hasattr(self.config, "workerinput"):
            kept = cache.get(self.KEY, {})  # a run of a few files keeps the others' times
            cache.set(self.KEY, {**kept, **{m: round(s, 2) for m, s in self.seconds.items()}})


HEAVY_GROUPS = {1: "heavy", 2: "heavy-2"}  # the xdist groups of the heavy tests: heavy (group 1) and heavy(group=2)


def heavy_group(marker) -> Tuple[str, Optional[str]]:
    """(the xdist group of a test marked ``heavy``, what is wrong with its mark or None): ``heavy`` alone is group 1,
    ``heavy(group=2)`` group 2. Any other argument is wrong (a misspelt one would otherwise put the test in group 1
    unseen); such a test goes to group 1, the safe one, and fails at its setup naming the mark."""
    group = marker.kwargs.get("group", 1)
    if set(marker.kwargs) - {"group"} or marker.args or group not in HEAVY_GROUPS:
        return HEAVY_GROUPS[1], (f"@pytest.mark.heavy takes only group=1 or group=2 (tests/quick_tier.py, HeavyGroups);"
                                 f" got args {marker.args}, kwargs {marker.kwargs}")
    return HEAVY_GROUPS[group], None


class HeavyGroups:
    """Under pytest-xdist's ``--dist loadgroup`` (the README's `pytest -n 2 --dist loadgroup`), the heavy tests join two
    xdist groups: ``heavy`` (marked ``heavy``) and ``heavy-2`` (marked ``heavy(group=2)``). Each group runs on one
    worker, one test at a time and in their order, the two groups side by side; the light tests fill what is left, on
    whichever worker is free (xdist hands the two groups, its largest units of work, out first).

    Which group a test joins is a matter of balance, within three rules:

    - Tests that share a module or session fixture stay in one group, or the fixture is made twice: the first
      end-to-end run's readers (tests/e2e/conftest.py) are all in ``heavy``.
    - `scripts/ray_cluster.sh` heads all take Ray's client port 10001, so the tests that start them are in one group
      (``heavy-2``), one at a time.
    - Two local Ray clusters, one per group, may run at once: neither finds the other (a local cluster writes no
      address file; a bare `ray.init()` reads only the default temp dir's, which no test's `ray start` writes), their
      GCS and worker ports are free ones, and the one port they share, the dashboard agent's HTTP port 52365, the later
      agent gives up after about 3 s of retries and lives on (Ray 2.55, dashboard/http_server_agent.py). Only
      `ray job submit` needs that port, and the tests that submit jobs start `ray start` clusters with ports of their
      own. tests/openrlhf_ext/test_cpu.py runs two at once and checks this.

    Why two groups and not one: a tiny training run keeps about 1.3 of the 2 cores busy (its start-up is a driver and
    an engine importing one at a time), so one heavy test at a time left a core half idle once the light tests were
    done. Two heavy files side by side took 320 s against 362 s one after the other (2026-12-05). Balance: a group
    longer than half of the suite's test-seconds leaves its worker alone at the end; evening them out (2026-12-05,
    benchmarks/results/suite_times.md, pair 8) removed that tail but not measurably the suite's time, since a heavy
    test beside another heavy test takes longer."""

    WRONG_MARK = pytest.StashKey[str]()

    @pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group off each test (xdist/remote.py)
    def pytest_collection_modifyitems(self, config, items):
        for item in items:
            marker = item.get_closest_marker(MARK)
            if marker is not None and item.get_closest_marker("xdist_group") is None:
                group, wrong = heavy_group(marker)
                item.add_marker(pytest.mark.xdist_group(group))
                if wrong:
                    item.stash[self.WRONG_MARK] = wrong

    def pytest_runtest_setup(self, item):
        # a collection error raised in an xdist worker ends in an INTERNALERROR without its message: fail the test
        if self.WRONG_MARK in item.stash:
            pytest.fail(f"{item.nodeid}: {item.stash[self.WRONG_MARK]}", pytrace=False)


def xdist_controller(config) -> bool:
    """Whether this pytest is pytest-xdist's controller (``-n N``, N > 0), which hands tests to workers and runs none."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def configure(config) -> None:
    """Register the heavy tests' xdist groups, and where --quick is given the quick tier's plugin (in the processes that
    run tests: under xdist, each worker watches what its own tests start) and its order, longest module first."""
    config.pluginmanager.register(HeavyGroups(), "heavy_groups")
    if config.getoption(OPTION):
        config.pluginmanager.register(LongestFirst(config), "longest_first")
        if not xdist_controller(config):
            config.pluginmanager.register(QuickTier(), "quick_tier")
