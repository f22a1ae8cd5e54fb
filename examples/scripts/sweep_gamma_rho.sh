#!/usr/bin/env bash
# The paper's soft-blending sweep (Table 4, Qwen2.5-3B-Instruct): one COPO run per (gamma, rho), one after the
# other, each with its own SAVE_DIR. PAIRS overrides the list ("gamma,rho gamma,rho ...").
set -euo pipefail
HERE="$(dirname "$0")"
for pair in ${PAIRS:-3,1 5,1 10,1 20,0.5 20,1.2 20,1.5}; do
  GAMMA=${pair%,*} RHO=${pair#*,} SAVE_DIR="${SAVE_ROOT:-checkpoints/sweep}/gamma${pair%,*}-rho${pair#*,}" \
    "$HERE/train_copo_ray.sh" "$@"
done
