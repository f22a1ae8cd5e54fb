"""`python -m openrlhf_copo.cli.compare` end to end on the CPU: two methods, one seed, three steps each, killed and
run again, through the real Ray pipeline with the tiny random model, as a user would run it on their own model and
data (the GPU path of the same command has not been run)."""

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from openrlhf_copo.files import read_log
from openrlhf_copo.processes import running
from tests_support import REPO, WORKER_IN_ENGINE_CORE, write_prompts

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

#: The OpenRLHF flags a user hands every run after `--`: here, the tiny model's CPU sizes, in fp32 (bf16 runs in slow
#: software paths on a CPU without bf16 units: this file took 257 s in bf16 and 203 s in fp32, alone, 2026-11-28;
#: a bf16 training run is the RL-ZVP one, tests/e2e/test_zero_variance_modes_cpu.py).
CPU_FLAGS = ["--rollout.micro_batch_size", "4", "--train.micro_batch_size", "4", "--rollout.max_new_tokens", "16",
             "--data.max_len", "160", "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1",
             "--vllm.sync_backend", "gloo", "--vllm.enforce_eager", "--ds.zero_stage", "0",
             "--ds.attn_implementation", "sdpa", "--copo.eval_sampled_prompts", "2", "--ds.param_dtype", "fp32"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """One comparison, as a user makes it: two methods, one seed, 3 steps each from a start checkpoint, a checkpoint
    every step. It is killed (SIGTERM) once the second run (copo) has saved its first checkpoint, run again (grpo is
    kept, copo goes on from its checkpoint, the report is written), then run a third time (both kept). Each command
    starts its own runs' Ray clusters and vLLM engines: one comparison serves every test below."""
    tmp = tmp_path_factory.mktemp("compare")
    model = tiny_qwen2(tmp / "tiny-model")
    write_prompts(tmp / "train.jsonl", 7)  # more than the run's 3 steps x 2 prompts: the tool takes the first 6
    # held-out prompts unlike the training ones (a seeded engine counts draws per prompt: a step-0 evaluation sampling
    # a training prompt would shift that prompt's later draws in the one run that made it)
    write_prompts(tmp / "test.jsonl", 11)
    held_out = (tmp / "test.jsonl").read_text().splitlines()[7:]
    (tmp / "test.jsonl").write_text("\n".join(held_out) + "\n")
    out = tmp / "out"
    cmd = [sys.executable, "-m", "openrlhf_copo.cli.compare", "--model", "not-a-model",
           "--start_checkpoint", model, "--train_data", str(tmp / "train.jsonl"), "--eval_data", str(tmp / "test.jsonl"),
           "--reward", str(REPO / "tests" / "fixtures" / "parity_reward.py"), "--methods", "grpo", "copo",
           "--seeds", "0", "--samples_per_prompt", "4", "--prompts_per_step", "2", "--steps", "3", "--eval_every", "3",
           "--save_every", "1", "--lr", "3e-3", "--out", str(out), "--", *CPU_FLAGS]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **WORKER_IN_ENGINE_CORE}

    run = out / "copo-seed0"
    latest = run / "scratch" / "ckpt" / "_actor" / "latest"
    with open(tmp / "first.log", "w") as log:
        first = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 1200
        while not latest.exists():
            if first.poll() is not None or time.time() > deadline:
                first.terminate()  # its run and that run's Ray cluster with it
                first.wait()
                raise AssertionError((tmp / "first.log").read_text()[-3000:])
            time.sleep(0.5)
        tree = psutil.Process(first.pid).children(recursive=True)  # the training child and its Ray cluster
        assert json.loads((run / "run.lock.json").read_text())["child"] in {p.pid for p in tree}
        killed_at = time.time()
        first.send_signal(signal.SIGTERM)
        killed = {"returncode": first.wait(timeout=120), "at": killed_at}
    killed.update(left=[p.pid for p in tree if running(p)], lock_left=(run / "run.lock.json").exists(),
                  done=(run / "done.json").exists(), latest=latest.exists(), log=(tmp / "first.log").read_text())

    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return out, killed, resumed, again


def rows_of(out: Path, method: str) -> list:
    return [json.loads(x) for x in (out / f"{method}-seed0" / "metrics.jsonl").read_text().splitlines()]


def test_both_runs_finish_from_the_start_checkpoint_on_the_same_first_batch(compared):
    out, _, resumed, _ = compared
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    steps = {}
    for method in ("grpo", "copo"):
        rows = rows_of(out, method)
        assert [r["step"] for r in rows if r.get("eval")] == ([0, 3] if method == "grpo" else [3])
        steps[method] = [r for r in rows if not r.get("eval")]
        assert [r["step"] for r in steps[method]] == [1, 2, 3]
        assert not (out / f"{method}-seed0" / "scratch").exists()  # checkpoints and the final model: deleted
    # seeded rollouts: the same first rollout batch for both methods
    assert steps["grpo"][0]["copo_correct"] == steps["copo"][0]["copo_correct"]
    assert steps["grpo"][0]["copo_entropy"] == steps["copo"][0]["copo_entropy"]
    cut, = out.glob("train-6rows-*.jsonl")  # the first 6 prompts, named by the source's sha256
    assert cut.read_text().splitlines() == (out.parent / "train.jsonl").read_text().splitlines()[:6]
    # each run records the weights it began from: the start checkpoint's, the same for both
    starts = {json.loads((out / f"{m}-seed0" / "done.json").read_text())["start_sha256"] for m in ("grpo", "copo")}
    assert len(starts) == 1 and len(starts.pop()) == 64


def test_the_report_pairs_copo_with_grpo_and_a_rerun_resumes(compared):
    out, killed, resumed, again = compared
    assert resumed.returncode == 0
    report = json.loads((out / "report.json").read_text())
    copo = report["table"]["copo"]
    assert copo["seeds"] == [0] and copo["minus_baseline"]["per_seed"][0]["n"] == 4  # the 4 held-out prompts
    low, high = copo["minus_baseline"]["ci95"]
    assert low <= copo["minus_baseline"]["mean"] <= high
    assert 0 <= copo["first_step"]["copo_zero_std"] <= 1
    assert report["methods"]["copo"] == ["--advantage_estimator", "copo"]
    assert report["prompts"]["distinct"] == 6 and report["samples_per_prompt"] == 4
    assert copo["minus_baseline"]["over"] == "prompts (one seed)"
    text = (out / "report.md").read_text()
    assert "| grpo | 1 |" in text and "(baseline)" in text and "| copo | 1 |" in text
    # the killed command had finished grpo; the next one kept it and finished copo
    assert killed["log"].count("done in") == 1 and "kept: finished before" not in killed["log"]
    assert resumed.stdout.count("kept: finished before") == 1 and resumed.stdout.count("done in") == 1
    # the same command again finds both runs finished and only writes the report
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("kept: finished before") == 2 and "done in" not in again.stdout
    assert (out / "report.md").read_text() == text


def test_a_killed_compare_ends_its_run_and_the_rerun_goes_on_from_its_checkpoint(compared):
    """Issue 49 item 6 through the real pipeline: a compare killed (SIGTERM) after its run saved a checkpoint ends
    every process below it (its training child and that child's Ray cluster) before it exits; the same command again goes on from that checkpoint: the steps up to it are not
    made again (their metrics rows are those written before the kill), the steps after it are, and the metrics file
    holds every step once."""
    out, killed, resumed, _ = compared
    run = out / "copo-seed0"
    assert killed["returncode"] != 0
    assert not killed["left"] and not killed["lock_left"]  # the run's processes ended with it, before it exited
    assert not killed["done"] and killed["latest"]  # unfinished, its checkpoints kept
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    info = json.loads((run / "done.json").read_text())
    step = info["resumed_from_step"]
    assert 1 <= step < 3
    assert f"going on from the checkpoint of step {step}" in read_log(run / "train.log")  # finished: maybe compacted
    steps = [r for r in rows_of(out, "copo") if not r.get("eval")]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(r["time"] < killed["at"] for r in steps if r["step"] <= step)  # not made again
    assert all(r["time"] > killed["at"] for r in steps if r["step"] > step)
    assert [r["prompts_consumed"] for r in steps] == [2, 4, 6]  # the prompts drawn go on from the checkpoint
    assert not (run / "scratch").exists()  # deleted once the run finished


def test_every_step_logs_the_tokens_its_rollout_generated_and_the_total_goes_on_through_the_resume(compared):
    """Issue 69 item 1 through the real pipeline: each step's `copo_generated_tokens` (patch 4, counted as the rollout
    turns each vLLM response into an experience) is the sum of its rollout's response lengths, which OpenRLHF logs
    as rollout/num_samples x rollout/response_length_mean (nothing is dropped here; the evaluations' responses, at
    step 0 and after step 3, are not counted); `copo_generated_tokens_total` is their running sum, across the copo
    run's resume from its checkpoint too; the report reads them (its table of tokens, from the counted metric) and
    plots accuracy against them."""
    out, _, resumed, _ = compared
    assert resumed.returncode == 0
    totals = {}
    for method in ("grpo", "copo"):
        steps = [r for r in rows_of(out, method) if not r.get("eval")]
        assert all(r["copo_generated_tokens"] == round(r["rollout/num_samples"] * r["rollout/response_length_mean"])
                   > 0 for r in steps), steps
        assert [r["copo_generated_tokens_total"] for r in steps] == \
            list(itertools.accumulate(r["copo_generated_tokens"] for r in steps))
        totals[method] = steps[-1]["copo_generated_tokens_total"]
    report = json.loads((out / "report.json").read_text())
    copo = report["table"]["copo"]["tokens"]
    assert copo["final"] == totals["copo"] and copo["sources"] == ["counted"]
    assert copo["ratio"][0] == pytest.approx(totals["copo"] / totals["grpo"])
    assert "Generated tokens of the training rollouts" in (out / "report.md").read_text()
    assert (out / "report_tokens.png").stat().st_size > 10_000
