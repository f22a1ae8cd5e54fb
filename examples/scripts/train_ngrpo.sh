#!/usr/bin/env bash
# NGRPO (arXiv 2509.18851) in the same pipeline: one virtual reward-1 response in every group's statistics, so an
# all-incorrect group gets a uniform negative advantage; its asymmetric clip (0.16 / 0.24), token-level loss, no KL.
# The other settings are the COPO run's, so that only the method differs (docs/paper.md).
set -euo pipefail
ESTIMATOR=ngrpo KL_COEF=0 LOSS_AGG=token-mean exec "$(dirname "$0")/train_copo_ray.sh" \
  --actor.eps_clip_low_high 0.16 0.24 "$@"
