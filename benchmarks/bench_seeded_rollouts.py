"""What a vLLM seed on every request (`--copo.seeded_rollouts`) costs generation: seeded against unseeded, one run.

    .venv/bin/python benchmarks/bench_seeded_rollouts.py [--prompts 24] [--samples 6] [--repeats 4]

One vLLM-CPU engine (SmolLM2-135M-Instruct, fp32, eager, the CPU path's core binding, chunked prefill off as a seeded
CPU run has it: `openrlhf_ext.cpu`) samples the CPU demo's first training prompts, G requests per prompt as OpenRLHF
sends them, at temperature 1 with the demo's 48 new tokens, every response made to run the full 48 (`ignore_eos`,
so both arms decode the same number of tokens whatever they draw). The seeded arm gives each request its own seed
as a run does (`runtime_patches.rollout.seeded_sampling_params`, the run's draw index); the unseeded arm sends the
same requests without. The arms alternate within each repeat, starting with the other one each time, so a machine
slowing down costs both alike. Prints each repeat's seconds and ratio, then the ratio seeded / unseeded: median and
range over the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def requests(prompts: int, samples: int):
    """(prompt texts, one per request) of the demo's first ``prompts`` training prompts, each ``samples`` times."""
    from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts
    from openrlhf_copo.cpu_demo.job import DATA_VERSION, HELD_OUT_ROWS, PROMPTS_PER_STEP, STEPS
    from openrlhf_copo.cpu_demo.models import cache_dir

    train, _ = make_arithmetic_prompts(cache_dir() / "data" / DATA_VERSION, n_train=PROMPTS_PER_STEP * STEPS,
                                       n_test=HELD_OUT_ROWS, seed=0)
    rows = [json.loads(line) for line in open(train)][:prompts]
    return [r["prompt"] for r in rows for _ in range(samples)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=24)
    p.add_argument("--samples", type=int, default=6, help="G: requests per prompt")
    p.add_argument("--max_tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=4)
    args = p.parse_args()

    from openrlhf_copo.contract import ROLLOUT_SEED_ENV
    from openrlhf_copo.cpu_demo.models import smollm2_instruct
    from openrlhf_copo.vllm_cpu import vllm_cpu_env

    os.environ.update({"HF_HUB_OFFLINE": "1", ROLLOUT_SEED_ENV: "0", **vllm_cpu_env()})
    from vllm import LLM, SamplingParams

    from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import seeded_sampling_params

    llm = LLM(model=smollm2_instruct(), dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
              enable_chunked_prefill=False)
    tok = llm.get_tokenizer()
    chats = requests(args.prompts, args.samples)
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    base = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=args.max_tokens, ignore_eos=True)

    def seeded(repeat: int):
        # each repeat draws on: draw index = repeat x G + place in the group, as a run's later episodes do
        return [seeded_sampling_params(base, c, repeat * args.samples + i % args.samples) for i, c in enumerate(chats)]

    arms = {"seeded": seeded, "unseeded": lambda r: [base] * len(texts)}
    llm.generate(texts[: args.samples], base, use_tqdm=False)  # warm-up, not timed
    seconds = {name: [] for name in arms}
    for r in range(args.repeats):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            params = arms[name](r)
            t0 = time.perf_counter()
            out = llm.generate(texts, params, use_tqdm=False)
            seconds[name].append(time.perf_counter() - t0)
            assert all(len(o.outputs[0].token_ids) == args.max_tokens for o in out)
        print(f"repeat {r + 1}: seeded {seconds['seeded'][-1]:.1f} s, unseeded {seconds['unseeded'][-1]:.1f} s, "
              f"ratio {seconds['seeded'][-1] / seconds['unseeded'][-1]:.3f}", flush=True)
    ratios = [s / u for s, u in zip(seconds["seeded"], seconds["unseeded"])]
    print(f"\n{len(texts)} requests ({args.prompts} prompts x {args.samples}), {args.max_tokens} tokens each, "
          f"{os.cpu_count()} cores, {args.repeats} repeats:")
    for name, s in seconds.items():
        print(f"  {name:9s} median {statistics.median(s):.1f} s ({min(s):.1f}-{max(s):.1f})")
    print(f"  ratio seeded / unseeded: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-"
          f"{max(ratios):.3f})")


if __name__ == "__main__":
    main()
