#!/usr/bin/env bash
# The authors' released run script (a patched verl, verl/run_copo.sh): soft-with-zero, gamma 5, rho 1, no KL, zero control for every
# response with reward 0, unbiased std, their answer strings, dual clip 3, PPO mini-batch of 32 prompts (192
# responses). GAMMA, RHO, ZERO_CONTROL, KL_COEF, ESTIMATOR, COPO_MODE select their other scripts (docs/paper.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN_NAME=${RUN_NAME:-copo_released} GAMMA=${GAMMA:-5} RHO=${RHO:-1} ZERO_CONTROL=${ZERO_CONTROL:-response} \
  INCORRECT=reward STD=unbiased KL_COEF=${KL_COEF:-0} \
  exec examples/scripts/train_copo_ray.sh --train.batch_size 192 --copo.answer_buckets string --actor.dual_clip 3 "$@"
