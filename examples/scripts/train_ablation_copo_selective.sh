#!/usr/bin/env bash
# The paper's ablation copo_selective (Table 3, Qwen2.5-3B-Instruct, MATH-500): the COPO setting with --advantage_estimator copo_selective.
set -euo pipefail
ESTIMATOR=copo_selective exec "$(dirname "$0")/train_copo_ray.sh" "$@"
