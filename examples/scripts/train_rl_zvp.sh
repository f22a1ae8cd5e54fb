#!/usr/bin/env bash
# RL-ZVP (arXiv 2509.21880) in the same pipeline: GRPO on mixed groups, an entropy-scaled advantage on zero-variance
# ones (alpha 0.1: --copo.zvp_alpha). --actor.entropy_coef 0 makes OpenRLHF's training forward compute the token
# entropy without adding an entropy loss. Its appendix's clip-higher (0.2 / 0.28), token-level loss, no KL; the
# other settings are the COPO run's (docs/paper.md).
set -euo pipefail
ESTIMATOR=rl_zvp KL_COEF=0 LOSS_AGG=token-mean exec "$(dirname "$0")/train_copo_ray.sh" \
  --actor.entropy_coef 0 --actor.eps_clip_low_high 0.2 0.28 "$@"
