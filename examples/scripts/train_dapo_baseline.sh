#!/usr/bin/env bash
# The DAPO baseline of the paper's Table 1: OpenRLHF's group_norm with DAPO's dynamic sampling (drop prompts whose
# responses are all right or all wrong), clip-higher (0.2 / 0.28), token-level loss, no KL. The other settings
# (data, batch, lr, lengths, sampling) are the COPO run's, so that only the method differs.
set -euo pipefail
RUN_NAME=${RUN_NAME:-dapo} ESTIMATOR=group_norm KL_COEF=0 LOSS_AGG=token-mean exec "$(dirname "$0")/train_copo_ray.sh" \
  --algo.dynamic_filtering_enable \
  --actor.eps_clip_low_high 0.2 0.28 "$@"
