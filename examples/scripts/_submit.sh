# Shared by the example scripts (sourced, not run). Submits
#   python -m openrlhf_copo.cli.train_ppo_ray "${ARGS[@]}"
# as a Ray job, or, with COPO_PRINT_ARGS=1, prints the arguments one per line and exits (the
# test suite runs every script that way through the real parser, so no script can drift from
# the flags).

# The reward file ships inside the installed package, and the vLLM engine actors load it by path on
# whatever node they run: install openrlhf-copo at the same path on every node (one container image, or
# one shared virtualenv), or set REWARD_FILE to a copy on storage every node mounts.
REWARD_FILE=${REWARD_FILE:-$(python3 -c 'import os, openrlhf_copo.rewards as r; print(os.path.join(os.path.dirname(r.__file__), "math_reward.py"))')}

# Paths a job reads or writes, made absolute: the job runs in Ray's per-session copy of the working dir, where a
# relative SAVE_DIR would put checkpoints that a resubmitted job never finds (it silently starts at step 0).
copo_abspath() {
  case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}

copo_submit() {
  if [ "${COPO_PRINT_ARGS:-0}" = "1" ]; then
    printf '%s\n' "${ARGS[@]}"
    return 0
  fi
  ray job submit --address="${RAY_ADDRESS:-http://127.0.0.1:8265}" \
    --runtime-env-json="{\"working_dir\": \"${WORKING_DIR:-$PWD}\"}" \
    -- python3 -m openrlhf_copo.cli.train_ppo_ray "${ARGS[@]}"
}
