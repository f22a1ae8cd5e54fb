#!/usr/bin/env bash
# Evaluate finished runs as in the paper's Table 1: MATH-500 mean@8 / maj@8 and AIME24 mean@64 / maj@64,
# temperature 1.0, top-p 1.0, 2048 new tokens, side by side with the base model.
# MODELS: space-separated hub names, model folders or run directories (a run's SAVE_DIR: its final model); default
# the base model and the default SAVE_DIRs of train_copo_ray.sh and train_grpo_baseline.sh. DATA_DIR: prepare_data's
# output (default <repo>/data).
# WITH_AIME25=1, WITH_GSM8K=1 add those benchmarks (0, or unset: not). Writes $OUT/results.json (every sampled answer) and $OUT/table.md
# (default OUT: <repo>/eval). Relative paths are read from the repository root (docs/gpu-recipe.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/_paths.sh
ARGS=()
RUNS="$(copo_abspath checkpoints/copo-Qwen2.5-3B-Instruct) $(copo_abspath checkpoints/grpo-Qwen2.5-3B-Instruct)"
for m in ${MODELS:-Qwen/Qwen2.5-3B-Instruct $RUNS}; do
  ARGS+=(--model "$(copo_local "$m")")
done
ARGS+=(--benchmark "math500=$DATA_DIR/math500.jsonl:8" --benchmark "aime24=$DATA_DIR/aime24.jsonl:64")
if copo_switch WITH_AIME25 "${WITH_AIME25:-0}"; then ARGS+=(--benchmark "aime25=$DATA_DIR/aime25.jsonl:64"); fi
if copo_switch WITH_GSM8K "${WITH_GSM8K:-0}"; then ARGS+=(--benchmark "gsm8k=$DATA_DIR/gsm8k.jsonl:8"); fi
ARGS+=(--temperature 1.0 --top_p 1.0 --max_tokens 2048 --out "$(copo_abspath "${OUT:-eval}")" "$@")
copo_run python3 -m openrlhf_copo.cli.evaluate "${ARGS[@]}"
