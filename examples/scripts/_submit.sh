# Shared by the example scripts (sourced, not run). Submits
#   python -m openrlhf_copo.cli.train_ppo_ray "${ARGS[@]}"
# as a Ray job, or, with COPO_PRINT_ARGS=1, prints the arguments one per line and exits (the
# test suite runs every script that way through the real parser, so no script can drift from
# the flags).

# The reward file ships inside the installed package; Ray workers load it by path, so the
# cluster's nodes need the same environment as this one (as usual for OpenRLHF's remote_rm_url).
REWARD_FILE=${REWARD_FILE:-$(python3 -c 'import os, openrlhf_copo.rewards as r; print(os.path.join(os.path.dirname(r.__file__), "math_reward.py"))')}

copo_submit() {
  if [ "${COPO_PRINT_ARGS:-0}" = "1" ]; then
    printf '%s\n' "${ARGS[@]}"
    return 0
  fi
  ray job submit --address="${RAY_ADDRESS:-http://127.0.0.1:8265}" \
    --runtime-env-json="{\"working_dir\": \"${WORKING_DIR:-$PWD}\"}" \
    -- python3 -m openrlhf_copo.cli.train_ppo_ray "${ARGS[@]}"
}
