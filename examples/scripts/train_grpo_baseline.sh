#!/usr/bin/env bash
# The GRPO baseline of the paper's tables, through the same pipeline and reward, so that only the
# advantage differs: w_local = 1, w_global = 0 (COPO's metrics are still logged, e.g. the share of
# responses with a gradient signal). OpenRLHF's own `--advantage_estimator group_norm` differs only
# in its std (unbiased + 1e-9).
set -euo pipefail
COPO_MODE=grpo exec "$(dirname "$0")/train_copo_ray.sh" "$@"
