#!/usr/bin/env bash
# Evaluate finished runs as in the paper's Table 1: MATH-500 mean@8 / maj@8 and AIME24 mean@64 / maj@64,
# temperature 1.0, top-p 1.0, 2048 new tokens, side by side with the base model.
# MODELS: space-separated model folders or run/checkpoint directories; DATA_DIR: prepare_data's output
# (see prepare_data.sh). Writes $OUT/results.json (every sampled answer) and $OUT/table.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data}
ARGS=()
for m in ${MODELS:-Qwen/Qwen2.5-3B-Instruct checkpoints/copo-Qwen2.5-3B-Instruct}; do ARGS+=(--model "$m"); done
ARGS+=(--benchmark "math500=$DATA_DIR/math500.jsonl:8" --benchmark "aime24=$DATA_DIR/aime24.jsonl:64")
[ -n "${WITH_AIME25:-}" ] && ARGS+=(--benchmark "aime25=$DATA_DIR/aime25.jsonl:64")
[ -n "${WITH_GSM8K:-}" ] && ARGS+=(--benchmark "gsm8k=$DATA_DIR/gsm8k.jsonl:8")
ARGS+=(--temperature 1.0 --top_p 1.0 --max_tokens 2048 --out "${OUT:-eval}" "$@")
if [ "${COPO_PRINT_ARGS:-0}" = "1" ]; then printf '%s\n' "${ARGS[@]}"; exit 0; fi
exec python3 -m openrlhf_copo.cli.evaluate "${ARGS[@]}"
