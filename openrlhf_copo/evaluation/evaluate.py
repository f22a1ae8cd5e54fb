"""Sample k responses per prompt with vLLM, score them, and report the paper's table.

Data path: prompt/label jsonl (from `prepare_data` or the embedded demo) -> chat template -> vLLM,
k samples per prompt -> the reward file's scoring (`score_responses`: the same answer extraction,
math-verify check and equivalence-clustered answer ids as in training) -> mean@k / maj@k / pass@k
(`openrlhf_copo.evaluation.metrics`) -> a JSON with every sampled answer and a Markdown table in the
layout of the paper's main table (averages weighted by the number of prompts, as there:
Qwen2.5-3B's "Mean Avg" 45.75 = (500 x 48.35 + 30 x 2.45) / 530).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from openrlhf_copo.evaluation.metrics import maj_at_k, maj_at_k_bootstrap, mean_at_k, pass_at_k
from openrlhf_copo.files import jsonl_rows, write_atomic

#: The paper's k per benchmark (MATH-500 and GSM8K: 8; AIME: 64).
DEFAULT_K = {"math500": 8, "math-500": 8, "gsm8k": 8, "aime24": 64, "aime2024": 64, "aime25": 64, "aime2025": 64}
#: How the paper's table names its columns.
DISPLAY = {"math500": "MATH 500", "math-500": "MATH 500", "gsm8k": "GSM8K", "aime24": "AIME 24", "aime2024": "AIME 24",
           "aime25": "AIME 25", "aime2025": "AIME 25"}


class EvalInputError(ValueError):
    """A missing or malformed model / benchmark (the message names the file), or a vLLM the evaluation cannot call."""


@dataclass
class Benchmark:
    name: str
    path: Path
    k: int
    rows: List[dict]


def parse_benchmark(spec: str, default_k: Optional[int] = None) -> Benchmark:
    """`NAME=PATH[:K]`, e.g. `math500=data/math500.jsonl:8`; K defaults to the paper's for known names."""
    if "=" not in spec:
        raise EvalInputError(f"--benchmark {spec!r}: expected NAME=PATH[:K]")
    name, rest = spec.split("=", 1)
    path, k = rest, None
    if ":" in rest and rest.rsplit(":", 1)[1].isdigit():
        path, k = rest.rsplit(":", 1)
        k = int(k)
    k = k or default_k or DEFAULT_K.get(name.lower())
    if not k:
        raise EvalInputError(f"--benchmark {spec!r}: no k for {name!r}; write {name}={path}:K or pass --k")
    return Benchmark(name, Path(path), k, load_rows(Path(path)))


def load_rows(path: Path) -> List[dict]:
    """Prompt/label jsonl rows; every problem is named with its file and line."""
    if not path.is_file():
        raise EvalInputError(f"benchmark file {path} does not exist")
    rows = []
    for n, row in jsonl_rows(path, EvalInputError):
        for key in ("prompt", "label"):
            if key not in row:
                raise EvalInputError(f"{path}:{n}: missing column '{key}' (expected prepare_data's prompt/label layout)")
        rows.append(row)
    if not rows:
        raise EvalInputError(f"benchmark file {path} is empty")
    return rows


def resolve_model(path: str) -> str:
    """A Hugging Face model folder: the path itself, or the newest one saved under it (a run or checkpoint dir); a
    hub name ("Qwen/Qwen2.5-3B-Instruct": no such local path, one "/", not starting with "." or "/") as it is."""
    p = Path(path)
    if not p.exists():
        if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path):
            return path
        raise EvalInputError(f"model or checkpoint {path} does not exist")
    if (p / "config.json").is_file():
        return str(p)
    found = sorted(p.rglob("config.json"), key=lambda f: f.stat().st_mtime)
    if not found:
        raise EvalInputError(f"{path} holds no Hugging Face model (no config.json; train with --ckpt.save_hf "
                             "or point at --ckpt.output_dir)")
    return str(found[-1].parent)


def chat_prompts(tokenizer, rows: Sequence[dict]) -> List[str]:
    """The same rendering as OpenRLHF's `--data.apply_chat_template` (a string becomes one user turn)."""
    out = []
    for row in rows:
        chat = row["prompt"]
        if isinstance(chat, str):
            chat = [{"role": "user", "content": chat}]
        out.append(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    return out


def sample(model: str, benchmarks: Sequence[Benchmark], temperature: float, top_p: float, max_tokens: int,
           seed: int, dtype: str = "bfloat16") -> Dict[str, List[List[str]]]:
    """k responses per prompt, per benchmark, from one vLLM engine (the CPU build where there is no GPU)."""
    import torch

    cpu = not torch.cuda.is_available()
    if cpu:
        from openrlhf_copo.vllm_cpu import vllm_cpu_env

        os.environ.update(vllm_cpu_env())
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, seed=seed, enforce_eager=cpu, trust_remote_code=True)
    tok = llm.get_tokenizer()
    out = {}
    for b in benchmarks:
        params = SamplingParams(n=b.k, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        results = llm.generate(chat_prompts(tok, b.rows), params)
        out[b.name] = [[o.text for o in r.outputs] for r in results]
    return out


#: `--answer_rule`: how a final answer is read, as the training reward read it.
ANSWER_RULES = ("strict", "last_number")


def score(benchmark: Benchmark, responses: List[List[str]], answer_rule: str = "strict") -> dict:
    """Every sample's extracted answer, id and correctness, and the benchmark's metrics."""
    from openrlhf_copo.contract import sample_outcome
    from openrlhf_copo.rewards.answers import extract_answer
    from openrlhf_copo.rewards.math_reward import score_responses

    prompts_samples, records = [], []
    for row, outs in zip(benchmark.rows, responses):
        last_number = answer_rule == "last_number"
        scored = score_responses(outs, [""] * len(outs), [row["label"]] * len(outs), last_number=last_number)
        samples = []
        for i, text in enumerate(outs):
            answer_id, correct = sample_outcome(scored["extra_logs"], i)
            samples.append((answer_id, correct))
            records.append({"prompt_index": len(prompts_samples), "label": row["label"], "response": text,
                            "answer": extract_answer(text, last_number=last_number), "answer_id": answer_id, "correct": correct})
        prompts_samples.append(samples)
    k = benchmark.k
    metrics = {
        "n_prompts": len(prompts_samples), "k": k,
        f"mean@{k}": mean_at_k(prompts_samples),
        f"maj@{k}": maj_at_k(prompts_samples),
        f"maj@{k}_bootstrap": maj_at_k_bootstrap(prompts_samples, k=k),
        f"pass@{k}": pass_at_k(prompts_samples, k),
        "pass@1": pass_at_k(prompts_samples, 1),
    }
    return {"metrics": metrics, "samples": records}


def weighted_average(results: Dict[str, dict], key: str) -> float:
    """The paper's "Mean Avg" / "Maj Avg": benchmarks weighted by their number of prompts."""
    total = sum(r["metrics"]["n_prompts"] for r in results.values())
    return sum(r["metrics"][key.format(k=r["metrics"]["k"])] * r["metrics"]["n_prompts"]
               for r in results.values()) / total


def markdown_table(all_results: Dict[str, Dict[str, dict]]) -> str:
    """Rows = models, columns = each benchmark's mean@k and maj@k, then Mean Avg and Maj Avg (in %)."""
    first = next(iter(all_results.values()))
    names = list(first)
    head = ["Method"] + [f"{DISPLAY.get(n.lower(), n)} {m}@{first[n]['metrics']['k']}" for n in names
                         for m in ("mean", "maj")] + ["Mean Avg", "Maj Avg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, results in all_results.items():
        cells = [model]
        for n in names:
            k = results[n]["metrics"]["k"]
            cells += [f"{100 * results[n]['metrics'][f'mean@{k}']:.2f}", f"{100 * results[n]['metrics'][f'maj@{k}']:.2f}"]
        cells += [f"{100 * weighted_average(results, 'mean@{k}'):.2f}", f"{100 * weighted_average(results, 'maj@{k}'):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    extra = ["", "| Method | " + " | ".join(f"{DISPLAY.get(n.lower(), n)} maj@{first[n]['metrics']['k']} (bootstrap) | "
                                            f"{DISPLAY.get(n.lower(), n)} pass@{first[n]['metrics']['k']}"
                                            for n in names) + " |",
             "|" + "---|" * (1 + 2 * len(names))]
    for model, results in all_results.items():
        cells = [model]
        for n in names:
            k = results[n]["metrics"]["k"]
            cells += [f"{100 * results[n]['metrics'][f'maj@{k}_bootstrap']:.2f}",
                      f"{100 * results[n]['metrics'][f'pass@{k}']:.2f}"]
        extra.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + extra) + "\n"


def evaluate(models: Sequence[str], benchmarks: Sequence[Benchmark], out_dir: Path, temperature: float = 1.0,
             top_p: float = 1.0, max_tokens: int = 2048, seed: int = 0, names: Optional[Sequence[str]] = None,
             answer_rule: str = "strict", dtype: str = "bfloat16") -> dict:
    """Evaluate each model on every benchmark; write `results.json` and `table.md` into ``out_dir``."""
    resolved = [resolve_model(m) for m in models]  # fail on a missing checkpoint before any sampling
    names = list(names or models)
    all_results: Dict[str, Dict[str, dict]] = {}
    for name, model in zip(names, resolved):
        responses = sample(model, benchmarks, temperature, top_p, max_tokens, seed, dtype)
        all_results[name] = {b.name: score(b, responses[b.name], answer_rule) for b in benchmarks}
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"settings": {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "seed": seed,
                            "answer_rule": answer_rule, "dtype": dtype,
                            "models": dict(zip(names, resolved)),
                            "benchmarks": {b.name: {"path": str(b.path), "k": b.k} for b in benchmarks}},
               "results": all_results}
    table = markdown_table(all_results)
    write_atomic(out_dir / "results.json", json.dumps(payload, indent=1))
    write_atomic(out_dir / "table.md", table)
    return payload

