"""`python -m openrlhf_copo.cli.prepare_data`: a math data set -> OpenRLHF prompt/label jsonl.

    python -m openrlhf_copo.cli.prepare_data --source dapo_math_17k --input dapo-math-17k.parquet --out data/train.jsonl
    python -m openrlhf_copo.cli.prepare_data --source math500 --hf_name HuggingFaceH4/MATH-500 --split test \\
        --out data/math500.jsonl
    python -m openrlhf_copo.cli.prepare_data --source aime25 --hf_name opencompass/AIME2025 \\
        --hf_config AIME2025-I AIME2025-II --split test --out data/aime25.jsonl

Use the same --template for the training and the evaluation files. Layouts and templates: openrlhf_copo/data_prep.py.
"""

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    from openrlhf_copo.data_prep import SOURCES, TEMPLATES

    p = argparse.ArgumentParser(prog="prepare_data", description=__doc__.splitlines()[0])
    p.add_argument("--source", required=True, choices=list(SOURCES), help="which data set layout to read")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", type=Path, nargs="+", help="local .parquet, .json or .jsonl files (read in order)")
    src.add_argument("--hf_name", help="a Hugging Face data set name, loaded with datasets.load_dataset")
    p.add_argument("--hf_config", nargs="+", default=None,
                   help="its configuration (e.g. 'main' for openai/gsm8k); several are read one after the other "
                        "(opencompass/AIME2025: AIME2025-I AIME2025-II)")
    p.add_argument("--split", default=None, help="its split (needed when it has more than one)")
    p.add_argument("--out", type=Path, required=True, help="output .jsonl (rejected rows go to OUT.rejected.jsonl)")
    p.add_argument("--template", choices=list(TEMPLATES), default="boxed",
                   help="boxed: question + 'Please reason step by step, and put your final answer within \\boxed{}.'; "
                        "dapo: DAPO-Math's 'Answer: $Answer' wrapping (default: %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="write at most N rows")
    return p


def main(argv=None) -> int:
    from openrlhf_copo.data_prep import DataPrepError, prepare

    args = build_parser().parse_args(argv)
    if args.limit is not None and args.limit < 1:
        print("prepare_data: error: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        report = prepare(args.source, args.out, input_path=args.input, hf_name=args.hf_name, split=args.split,
                         hf_config=args.hf_config, template=args.template, limit=args.limit)
    except DataPrepError as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    print(report.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
