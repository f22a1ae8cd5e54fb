"""`python -m openrlhf_copo.cli.evaluate`: mean@k / maj@k / pass@k of one or more models, in the paper's table layout.

    python -m openrlhf_copo.cli.evaluate --model runs/copo-.../model --model Qwen/Qwen2.5-3B-Instruct \\
        --benchmark math500=data/math500.jsonl --benchmark aime24=data/aime24.jsonl --out eval/

k defaults to the paper's (MATH-500 / GSM8K 8, AIME 64); temperature 1.0 and top-p 1.0 as in the paper.
"""

import argparse
import sys
from pathlib import Path

DTYPES = ("bfloat16", "float16", "float32")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m openrlhf_copo.cli.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True,
                   help="a Hugging Face model folder, or a run / checkpoint directory holding one (repeat to compare)")
    p.add_argument("--name", action="append", help="row label for each --model (default: the path)")
    p.add_argument("--benchmark", action="append", required=True, help="NAME=PATH[:K] (prompt/label jsonl); repeat")
    p.add_argument("--k", type=int, default=None, help="k for benchmarks without a paper default")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--max_tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answer_rule", choices=("strict", "last_number"), default="strict",
                   help="strict: \\boxed{} / 'Answer:' / 'the answer is' (math_reward.py); last_number: else the last "
                        "number written (math_last_number_reward.py). Use the rule the run was trained with")
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16",
                   help="the dtype vLLM samples in. float32 on a CPU without bf16 units (no AVX-512 BF16 or AMX), "
                        "where bf16 runs in slow software paths")
    p.add_argument("--out", type=Path, default=Path("eval"), help="directory for results.json and table.md")
    return p


def main(argv=None) -> int:
    from openrlhf_copo.evaluation.evaluate import EvalInputError, evaluate, parse_benchmark
    from openrlhf_copo.openrlhf_ext.runtime_patches.versions import EVALUATION, VllmVersionError, check_vllm
    from openrlhf_copo.processes import ending_children

    args = build_parser().parse_args(argv)
    try:  # every vLLM function and parameter the evaluation calls (`versions.VLLM_SYMBOLS`), before an engine is built
        check_vllm(EVALUATION)
    except VllmVersionError as e:
        print(f"evaluate: error: {e}", file=sys.stderr)
        return 2
    if args.name and len(args.name) != len(args.model):
        print("evaluate: error: give one --name per --model", file=sys.stderr)
        return 2
    try:
        benchmarks = [parse_benchmark(s, args.k) for s in args.benchmark]
        # vLLM's engine core (and the verifier's workers) are processes below this one: ended with it, also on
        # SIGTERM or SIGINT
        with ending_children():
            evaluate(args.model, benchmarks, args.out, args.temperature, args.top_p, args.max_tokens, args.seed,
                     args.name, answer_rule=args.answer_rule, dtype=args.dtype)
    except EvalInputError as e:
        print(f"evaluate: error: {e}", file=sys.stderr)
        return 2
    print((args.out / "table.md").read_text())
    print(f"every sampled answer: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":  # vLLM spawns processes: the guard keeps them from re-running this
    sys.exit(main())
