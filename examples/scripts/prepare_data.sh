#!/usr/bin/env bash
# Prepare the paper's data as prompt/label jsonl in $DATA_DIR (default <repo>/data, where the training and evaluation
# scripts read it): DAPO-Math-17k for training, MATH-500, AIME 2024 (30 problems), AIME 2025 (both parts, 30) and
# GSM8K for evaluation, all with one template (TEMPLATE=boxed | dapo; the same at training and evaluation time).
# Needs access to the Hugging Face hub; without it, pass local copies:
#   python -m openrlhf_copo.cli.prepare_data --source math500 --input MATH-500/test.jsonl --out data/math500.jsonl
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/_paths.sh
T=${TEMPLATE:-boxed}
prep() {
  copo_run python3 -m openrlhf_copo.cli.prepare_data "$@" --template "$T"
}
prep --source dapo_math_17k --hf_name BytedTsinghua-SIA/DAPO-Math-17k --split train \
  --out "$DATA_DIR/dapo_math_17k.jsonl"
prep --source math500 --hf_name HuggingFaceH4/MATH-500 --split test --out "$DATA_DIR/math500.jsonl"
prep --source aime24 --hf_name HuggingFaceH4/aime_2024 --split train --out "$DATA_DIR/aime24.jsonl"
prep --source aime25 --hf_name opencompass/AIME2025 --hf_config AIME2025-I AIME2025-II --split test \
  --out "$DATA_DIR/aime25.jsonl"
prep --source gsm8k --hf_name openai/gsm8k --hf_config main --split test --out "$DATA_DIR/gsm8k.jsonl"
