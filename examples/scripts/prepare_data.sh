#!/usr/bin/env bash
# Prepare the paper's data as prompt/label jsonl in $DATA_DIR (default data/): DAPO-Math-17k for training,
# MATH-500, AIME 2024, AIME 2025 and GSM8K for evaluation, all with one template (TEMPLATE=boxed | dapo; the
# same at training and evaluation time). Needs access to the Hugging Face hub; without it, pass local files:
#   python -m openrlhf_copo.cli.prepare_data --source math500 --input MATH-500/test.jsonl --out data/math500.jsonl
set -euo pipefail
DATA_DIR=${DATA_DIR:-data}
T=${TEMPLATE:-boxed}
RUNS=(
  "--source dapo_math_17k --hf_name BytedTsinghua-SIA/DAPO-Math-17k --split train --out $DATA_DIR/dapo_math_17k.jsonl"
  "--source math500 --hf_name HuggingFaceH4/MATH-500 --split test --out $DATA_DIR/math500.jsonl"
  "--source aime24 --hf_name HuggingFaceH4/aime_2024 --split train --out $DATA_DIR/aime24.jsonl"
  "--source aime25 --hf_name opencompass/AIME2025 --hf_config AIME2025-I --split test --out $DATA_DIR/aime25.jsonl"
  "--source gsm8k --hf_name openai/gsm8k --hf_config main --split test --out $DATA_DIR/gsm8k.jsonl"
)
for run in "${RUNS[@]}"; do
  # shellcheck disable=SC2086
  if [ "${COPO_PRINT_ARGS:-0}" = "1" ]; then printf '%s\n' $run --template "$T"; echo "---"; continue; fi
  # shellcheck disable=SC2086
  python3 -m openrlhf_copo.cli.prepare_data $run --template "$T"
done
