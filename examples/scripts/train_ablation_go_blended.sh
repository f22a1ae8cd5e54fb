#!/usr/bin/env bash
# The paper's ablation go_blended (Table 3, Qwen2.5-3B-Instruct, MATH-500): the COPO setting with --advantage_estimator go_blended.
set -euo pipefail
ESTIMATOR=go_blended exec "$(dirname "$0")/train_copo_ray.sh" "$@"
