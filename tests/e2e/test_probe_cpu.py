"""`python -m openrlhf_copo.cli.probe` end to end on the CPU, against step 1 of a real training run: the first
end-to-end run (tests/e2e/conftest.py: the tiny random model, the parity reward (reward 1 for a response of even
length), its 4 prompts, 2 per step, G = 4, seeded rollouts, OpenRLHF's default seed 42, fp32).
The probe's shares and every per-response metric of its batch must be the training run's step 1 (the same prompts
drawn in the seed's order, the same seeded responses, the same rewards and answer ids), and the probe must stop
before any training (no final model saved)."""

import json
import os
import subprocess
import sys
import time

import pytest

from openrlhf_copo.probe import shares
from tests_support import REPO, WORKER_IN_ENGINE_CORE, metrics

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

#: the first run's seed (OpenRLHF's default --train.seed), prompts per step and G
SEED, PROMPTS, G = "42", 2, 4
#: The OpenRLHF flags the probe hands its run after `--`: the tiny model's CPU sizes and dtype, as the training run's.
CPU_FLAGS = ["--rollout.micro_batch_size", "4", "--train.micro_batch_size", "4", "--rollout.max_new_tokens", "16",
             "--data.max_len", "160", "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1",
             "--vllm.sync_backend", "gloo", "--vllm.enforce_eager", "--ds.zero_stage", "0",
             "--ds.attn_implementation", "sdpa", "--algo.advantage.is_correction_level", "token",
             "--ds.param_dtype", "fp32"]
#: The step metrics the advantage step logs from the batch alone (no training involved).
BATCH_METRICS = ["copo_zero_std", "copo_all_correct", "copo_all_incorrect", "copo_correct", "copo_entropy",
                 "copo_w_local", "copo_w_global", "copo_signal_grpo", "copo_signal_copo", "copo_mixed_local_lost",
                 "copo_local_adv", "copo_global_adv_raw"]


@pytest.fixture(scope="module")
def runs(first_run, tmp_path_factory):
    trained_dir, model, data, trained = first_run
    tmp = tmp_path_factory.mktemp("probe")
    # the rows the run trained on, as the probe's whole file: its --data.max_samples (tests/e2e/conftest.py's
    # MAX_SAMPLES) keeps the file's first ones, and its last step says how many it consumed
    consumed = int(metrics(trained_dir)[-1]["prompts_consumed"]) if trained.returncode == 0 else 0
    rows = data.read_text().splitlines()[:consumed]
    (tmp / "prompts.jsonl").write_text("\n".join(rows) + "\n")
    cmd = [sys.executable, "-m", "openrlhf_copo.cli.probe", "--model", model, "--train_data", str(tmp / "prompts.jsonl"),
           "--reward", str(REPO / "tests" / "fixtures" / "parity_reward.py"), "--samples_per_prompt", str(G),
           "--prompts_per_step", str(PROMPTS), "--seed", SEED, "--device", "cpu", "--out", str(tmp / "probe"),
           "--filtered_train_data", str(tmp / "filtered.jsonl"), "--", *CPU_FLAGS]
    t0 = time.time()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **WORKER_IN_ENGINE_CORE}
    probed = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    print(f"probe: {time.time() - t0:.0f} s")
    return tmp, trained_dir, trained, probed, len(rows)


def test_the_probes_batch_is_step_1_of_a_training_run_with_the_same_seed(runs):
    tmp, trained_dir, trained, probed, _ = runs
    assert trained.returncode == 0, (trained_dir / "train.log").read_text()[-3000:]
    assert probed.returncode == 0, probed.stdout[-2000:] + probed.stderr[-2000:] + \
        (tmp / "probe" / "probe.log").read_text()[-3000:]
    step1 = metrics(trained_dir)[0]
    record = json.loads((tmp / "probe" / "probe.json").read_text())
    assert len(record["groups"]) == PROMPTS and record["G"] == G and record["seed"] == int(SEED)
    for key in BATCH_METRICS:  # OpenRLHF averages them in float32 over micro-batches: equal up to its rounding
        assert record["metrics"][key] == pytest.approx(step1[key], abs=1e-6), key
    s = shares(record["groups"])
    # rewards of both kinds, so the shares and rewards compared say something. Which groups come out mixed depends on
    # what the vLLM version draws from a seed
    assert 0 < s["mixed"] and 0 < sum(r for g in record["groups"] for r in g["rewards"]) < G * PROMPTS
    assert s["mixed"] == pytest.approx(1 - step1["copo_zero_std"], abs=1e-6)
    assert s["all_correct"] == pytest.approx(step1["copo_all_correct"], abs=1e-6)
    assert s["all_incorrect"] == pytest.approx(step1["copo_all_incorrect"], abs=1e-6)
    # the parity reward is 0/1 on the response's length: correct share and rewards agree response by response
    rewards = [r for g in record["groups"] for r in g["rewards"]]
    assert sum(rewards) / len(rewards) == pytest.approx(step1["copo_correct"], abs=1e-6)


def test_the_probe_stops_before_training_and_reports(runs):
    tmp, _, _, probed, rows = runs
    assert probed.returncode == 0
    out = tmp / "probe"
    assert not (out / "scratch" / "model").exists()  # stopped before the final save (and so before any step)
    assert "stopped before any training step" in (out / "probe.log").read_text()
    text = (out / "report.md").read_text()
    assert text.strip() in probed.stdout
    for split in ("| 4 |", "| 3+1 |", "| 2+2 |", "| 2+1+1 |", "| 1+1+1+1 |"):  # every answer split of G = 4
        assert split in text
    assert "Nearest regime:" in text and "Took" in text
    record = json.loads((out / "probe.json").read_text())
    solved = sum(1 for g in record["groups"] if all(g["correct"]))
    kept = (tmp / "filtered.jsonl").read_text().splitlines()
    assert len(kept) == rows - solved and f"without the {solved} that every response solved" in text
