"""`openrlhf_copo.processes`: a command's children ended with their whole tree when it ends, on SIGTERM, on SIGINT and
on SIGKILL; the processes a library starts ended with the block that started them; the lock on a folder taken in
one atomic step, refused to a second process with the holder's pid, and let go by the OS when its holder dies.
Stand-in children (sleeping Pythons); the real entry points and their Ray clusters: tests/e2e/test_stop_by_signal_cpu.py."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from openrlhf_copo.processes import FolderLock, RunLock, Stopped, alive, process_start, running
from tests_support import REPO

ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

#: A stand-in training child: a grandchild in its process group (as Ray's workers are) and one that left it for a
#: session of its own (as Ray's log monitor or a daemon may), each sleeping; their pids in a file.
FAKE_CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    in_group = subprocess.Popen(sleep)
    left_group = subprocess.Popen(sleep, start_new_session=True)
    open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {in_group.pid} {left_group.pid}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(120)
""")

#: A command running the stand-in child as `compare.run_one` runs its training child.
PARENT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from openrlhf_copo.processes import RunLock, run_child
    folder = Path(sys.argv[1])
    run_child([sys.executable, "-c", sys.argv[2], str(folder / "pids")], folder / "train.log", RunLock(folder))
""")


def gone(pid: int, within: float = 60.0) -> bool:
    """Whether process ``pid`` has ended (a zombie has), or ends within ``within`` seconds."""
    deadline = time.time() + within
    while alive(pid, None):
        if time.time() > deadline:
            return False
        time.sleep(0.2)
    return True


def kill_if_running(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def parent_with_child(tmp_path: Path):
    """The command, and the pids of its child and of the child's two grandchildren once they run."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), FAKE_CHILD], env=ENV)
    deadline = time.time() + 60
    while not (tmp_path / "pids").exists():
        assert time.time() < deadline and parent.poll() is None
        time.sleep(0.2)
    return parent, *map(int, (tmp_path / "pids").read_text().split())


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_command_stopped_by_a_signal_ends_its_childs_whole_tree(tmp_path, how):
    """Before, the child's process group was ended and a process below the child that had left the group (a session
    of its own) ran on."""
    parent, child, in_group, left_group = parent_with_child(tmp_path)
    try:
        held = json.loads((tmp_path / "run.lock.json").read_text())
        assert held["pid"] == parent.pid and held["child"] == child  # the record names the command and its child
        assert held["child_start"] == process_start(child)
        started = time.monotonic()
        parent.send_signal(how)
        assert parent.wait(timeout=60) == 128 + how  # as a shell reports a process the signal ended
        assert time.monotonic() - started < 15  # the stand-ins end on SIGTERM: no wait for SIGKILL
        assert gone(child, 0) and gone(in_group, 0) and gone(left_group, 5)
        assert not (tmp_path / "run.lock.json").exists()
        with RunLock(tmp_path):  # let go
            pass
    finally:
        kill_if_running(parent.pid, child, in_group, left_group)


def test_a_command_killed_outright_takes_its_child_with_it(tmp_path):
    """SIGKILL leaves no handler to run: the child dies by its parent-death signal (PR_SET_PDEATHSIG)."""
    parent, child, in_group, left_group = parent_with_child(tmp_path)
    parent.kill()
    parent.wait(timeout=60)
    try:
        assert gone(child)
    finally:
        kill_if_running(child, in_group, left_group)


ENDING_CHILDREN = textwrap.dedent("""
    import subprocess, sys, time
    from multiprocessing import resource_tracker
    from openrlhf_copo.processes import ending_children
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    before = subprocess.Popen(sleep)
    with ending_children():
        during = subprocess.Popen(sleep)  # as vLLM starts its engine core
        resource_tracker.ensure_running()  # as vLLM's shared memory starts it
        print(before.pid, during.pid, resource_tracker._resource_tracker._pid, flush=True)
        time.sleep(120)
""")


def test_the_processes_a_library_started_in_the_block_end_with_it_and_no_others(tmp_path):
    """The resource tracker ignores SIGTERM and ends by itself once its process has (after unlinking the shared
    memory left behind): the ending neither waits out the grace period for it nor kills it."""
    proc = subprocess.Popen([sys.executable, "-c", ENDING_CHILDREN], stdout=subprocess.PIPE, text=True, env=ENV)
    before, during, tracker = map(int, proc.stdout.readline().split())
    try:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 15  # processes.GRACE_S is 30
        assert gone(during, 5) and gone(tracker, 10)
        assert alive(before, None)  # not started in the block: not the block's to end
    finally:
        kill_if_running(proc.pid, before, during, tracker)


# --- a process by pid and start time ---


def test_a_process_is_its_pid_and_start_time():
    me = os.getpid()
    assert alive(me, process_start(me)) and alive(me, None)
    assert not alive(me, process_start(me) - 10)  # the pid, reused by another process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_start(child.pid) is None and not alive(child.pid, None)
    assert running(psutil.Process()) is True


# --- locks on folders ---

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from openrlhf_copo.processes import RunLock
    lock = RunLock(Path(sys.argv[1]))  # kept: a lock that is garbage-collected lets go
    lock.acquire()
    print("held", flush=True)
    time.sleep(120)
""")


def test_a_second_claim_on_a_folder_is_refused_at_once_naming_the_holder(tmp_path):
    """Taking the lock is one step. Before, each claimant checked the lock file, then wrote it: two that checked
    before either wrote both went ahead (check, then act)."""
    first, second = RunLock(tmp_path), RunLock(tmp_path)
    first.refuse_if_running()
    with pytest.raises(SystemExit, match=rf"^{tmp_path}: its run is still going \(pid {os.getpid()}, "):
        second.refuse_if_running()
    first.release()
    second.refuse_if_running()  # free again
    second.release()


def test_another_process_holding_the_lock_is_named_and_the_os_lets_go_when_it_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=ENV)
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        with pytest.raises(SystemExit, match=rf"its run is still going \(pid {holder.pid}, .*kill {holder.pid}\)"):
            RunLock(tmp_path).acquire()
        assert time.monotonic() - started < 1  # refused at once, not after a wait
        holder.kill()  # no handler runs: the OS releases the lock, and the record it left names a dead process
        holder.wait()
        with RunLock(tmp_path) as lock:
            assert json.loads(lock.record.read_text())["pid"] == os.getpid()
    finally:
        holder.kill()


def test_a_child_outliving_its_killed_command_keeps_the_folder_locked(tmp_path):
    """The command was killed outright and its child has not ended yet: the folder is still in use. A record naming
    a pid that another process now has (another start time) or no process at all is stale."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    lock = RunLock(tmp_path)
    try:
        lock.record.write_text(json.dumps({"pid": 1, "child": live.pid, "child_start": process_start(live.pid)}))
        with pytest.raises(SystemExit, match=rf"its run is still going \(pid {live.pid}, .*kill -- -{live.pid}\)"):
            lock.acquire()
        lock.record.write_text(json.dumps({"pid": 1, "child": live.pid, "child_start": 1.0}))  # a reused pid
        with lock:
            pass
    finally:
        live.kill()
        live.wait()
    lock.record.write_text(json.dumps({"pid": 1, "child": live.pid, "child_start": process_start(os.getpid())}))
    with lock:  # the child has ended
        assert "child" not in json.loads(lock.record.read_text())
    assert not lock.record.exists()


def test_nested_claims_in_one_process_count_and_the_last_release_lets_go(tmp_path):
    lock = FolderLock(tmp_path / "out", "compare", "another comparison is running in this folder",
                      "before running another")
    with lock:
        with lock:
            lock.hold(os.getpid())
            assert json.loads(lock.record.read_text())["child"] == os.getpid()
        assert "child" not in json.loads(lock.record.read_text())  # the inner release forgets the child
        with pytest.raises(SystemExit, match=rf"out: another comparison is running in this folder \(pid "
                                             rf"{os.getpid()}, .*compare.lock\): wait for it or stop it \(kill "
                                             rf"{os.getpid()}\) before running another$"):
            FolderLock(tmp_path / "out", "compare", "another comparison is running in this folder",
                       "before running another").acquire()
    assert not lock.record.exists() and lock.path.exists()  # the locked file stays, free
    assert lock.files == ("compare.lock", "compare.lock.json")


def test_a_stop_is_an_exit_with_the_shells_status():
    stop = Stopped(signal.SIGINT)
    assert isinstance(stop, SystemExit) and stop.code == 130 and stop.name == "SIGINT"
