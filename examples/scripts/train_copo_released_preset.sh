#!/usr/bin/env bash
# The authors' released run script (a patched verl): gamma 5, rho 1, no KL, zero control for every
# response with reward 0, unbiased std, PPO mini-batch of 32 prompts (192 responses).
set -euo pipefail
cd "$(dirname "$0")/../.."
GAMMA=5 RHO=1 ZERO_CONTROL=response INCORRECT=reward STD=unbiased KL_COEF=0 \
  exec examples/scripts/train_copo_ray.sh --train.batch_size 192 "$@"
