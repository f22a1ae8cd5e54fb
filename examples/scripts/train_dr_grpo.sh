#!/usr/bin/env bash
# Dr. GRPO (arXiv 2503.20783) in the same pipeline, with this package's metrics: r - mean_G r (no std), token-level
# loss over the step (every token weighs the same), no KL. OpenRLHF's own `--advantage_estimator dr_grpo` computes
# the same advantage without them (docs/paper.md).
set -euo pipefail
COPO_MODE=dr_grpo KL_COEF=0 LOSS_AGG=token-mean exec "$(dirname "$0")/train_copo_ray.sh" "$@"
