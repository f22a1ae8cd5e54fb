"""Stopping a command stops all of it (issue 68, part 2b): each entry point a user starts that starts a training run or
a vLLM engine below it, sent SIGTERM (a scheduler's stop: Slurm, Kubernetes, `timeout`, `kill PID`) or SIGINT (a
terminal's Ctrl-C, sent to the command's pid alone here, as `kill -INT` does), ends within a minute and leaves no
process of its tree running: the CPU demo job, `compare`, benchmarks/regimes.py, the probe and the evaluation.

Each case starts the command for real and sends the signal as soon as what it must end has begun: its training
child's Ray cluster (its raylet), or the evaluation's vLLM engine core. Every process seen below the command
from its start to its exit is recorded (psutil, by pid and start time), since a process whose parent dies is
adopted elsewhere and no longer found below it. That a stopped run goes on from its last checkpoint:
tests/e2e/test_compare_cpu.py (a compare stopped by SIGTERM after a checkpoint, rerun)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from openrlhf_copo.processes import running
from quick_tier import heavy_process
from tests_support import REPO, write_prompts

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

#: The tiny model's CPU sizes, which `compare` and the probe hand their runs after `--`.
CPU_FLAGS = ["--rollout.micro_batch_size", "4", "--train.micro_batch_size", "4", "--rollout.max_new_tokens", "16",
             "--data.max_len", "160", "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1",
             "--vllm.sync_backend", "gloo", "--vllm.enforce_eager", "--ds.zero_stage", "0",
             "--ds.attn_implementation", "sdpa", "--ds.param_dtype", "fp32"]
#: Seconds from the signal to the command's exit and its whole tree's end. `processes.GRACE_S` (30 s) bounds the
#: wait for a child that does not end on SIGTERM; the margin is for a loaded 2-core machine.
WITHIN_S = 60
#: Seconds for the command to bring up what the signal must end (Python's imports, Ray's start, vLLM's).
START_S = 600


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("stop-inputs")
    return {"model": tiny_qwen2(tmp / "tiny-model"), "train": write_prompts(tmp / "train.jsonl", 4),
            "test": write_prompts(tmp / "test.jsonl", 4)}


def command(entry: str, inputs: dict, tmp: Path) -> list:
    """The command line of ``entry``, as a user runs it, on the tiny model where the command takes one."""
    python = sys.executable
    data = ["--train_data", str(inputs["train"]), "--reward", str(REPO / "tests" / "fixtures" / "parity_reward.py"),
            "--samples_per_prompt", "4", "--prompts_per_step", "2"]
    if entry == "main_job":  # the README's first command: the CPU demo (SmolLM2-135M) with its train_ppo_ray child
        return [python, "-m", "openrlhf_copo.cli.train_ppo_ray", "--advantage_estimator", "copo", "--copo.run_dir",
                str(tmp / "demo")]
    if entry == "compare":
        return [python, "-m", "openrlhf_copo.cli.compare", "--model", inputs["model"], *data, "--eval_data",
                str(inputs["test"]), "--methods", "grpo", "--seeds", "0", "--steps", "2", "--out", str(tmp / "out"),
                "--", *CPU_FLAGS]
    if entry == "regimes":  # a copy of the script, so that its runs go under tmp, not into the checkout's results
        script = tmp / "benchmarks" / "regimes.py"
        script.parent.mkdir()
        shutil.copy(REPO / "benchmarks" / "regimes.py", script)
        return [python, str(script), "run", "--regime", "hard", "--methods", "grpo", "--seeds", "0"]
    if entry == "probe":
        return [python, "-m", "openrlhf_copo.cli.probe", "--model", inputs["model"], *data, "--device", "cpu",
                "--out", str(tmp / "probe"), "--", *CPU_FLAGS]
    if entry == "evaluate":
        return [python, "-m", "openrlhf_copo.cli.evaluate", "--model", inputs["model"], "--benchmark",
                f"tiny={inputs['test']}:2", "--max_tokens", "16", "--dtype", "float32", "--out", str(tmp / "eval")]
    raise ValueError(entry)


def up(tree: dict) -> bool:
    """Whether what the signal must end has begun: a Ray cluster (its raylet) or a vLLM engine core."""
    names = {heavy_process(p.pid) for p in tree.values() if running(p)}
    return "raylet" in names or any(name and name.startswith("VLLM::EngineCore") for name in names)


def look(pid: int, tree: dict) -> None:
    """Adds to ``tree`` ({(pid, start): psutil.Process}) every process below ``pid`` now."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in below:
        try:
            tree.setdefault((p.pid, p.create_time()), p)
        except psutil.NoSuchProcess:
            pass


def described(processes) -> str:
    out = []
    for p in processes:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
        except psutil.Error:
            out.append(str(p.pid))
    return "; ".join(out)


CASES = [("main_job", signal.SIGTERM), ("main_job", signal.SIGINT), ("compare", signal.SIGTERM),
         ("compare", signal.SIGINT), ("regimes", signal.SIGTERM), ("probe", signal.SIGTERM),
         ("evaluate", signal.SIGTERM)]


@pytest.mark.parametrize("entry, sig", CASES, ids=[f"{entry}-{signal.Signals(sig).name}" for entry, sig in CASES])
def test_a_stopped_command_leaves_nothing_of_its_tree_running(entry, sig, inputs, tmp_path):
    log = tmp_path / "command.log"
    # vLLM's own layout (not WORKER_IN_ENGINE_CORE), as a user gets it: the evaluation's engine core a process of its own
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    tree = {}
    with open(log, "w") as out:
        proc = subprocess.Popen(command(entry, inputs, tmp_path), stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=tmp_path)
    try:
        deadline = time.monotonic() + START_S
        while not up(tree):
            assert proc.poll() is None, f"{entry} ended before its cluster was up:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{entry}: nothing up after {START_S} s:\n{log.read_text()[-3000:]}"
            look(proc.pid, tree)
            time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(sig)
        ended = exited = None  # seconds from the signal to the end of the last process below it, to its own exit
        while time.monotonic() < sent + WITHIN_S and (ended is None or exited is None):
            if proc.poll() is None:
                look(proc.pid, tree)
            elif exited is None:
                exited = time.monotonic() - sent
            if ended is None and not any(running(p) for p in tree.values()):
                ended = time.monotonic() - sent
            time.sleep(0.2)
        left = [p for p in tree.values() if running(p)]
        print(f"{entry} {signal.Signals(sig).name}: {len(tree)} processes below it; the last ended "
              f"{ended if ended is None else round(ended, 1)} s after the signal, the command exited "
              f"{exited if exited is None else round(exited, 1)} s after it")
        assert exited is not None, f"{entry} still running {WITHIN_S} s after {signal.Signals(sig).name}"
        assert not left, (f"{entry}: {len(left)} of the {len(tree)} processes below it still running "
                          f"{WITHIN_S} s after {signal.Signals(sig).name}: {described(left)}")
        assert proc.returncode == 128 + sig, log.read_text()[-2000:]  # as a shell reports a command the signal ended
    finally:  # whatever of this test's command is left (the old code's), by pid and start time, never by name
        if proc.poll() is None:
            proc.kill()
        for p in tree.values():
            try:
                if running(p):
                    p.kill()
            except psutil.Error:
                pass
        proc.wait()
