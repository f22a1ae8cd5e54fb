# Shared by the example scripts (sourced, not run). Submits
#   ray job submit --address=... --runtime-env-json=... -- python3 -m openrlhf_copo.cli.train_ppo_ray "${ARGS[@]}"
# or, with COPO_PRINT_ARGS=1, prints that command as one shell-quoted line and submits nothing (the test suite runs
# every script that way through the real parser, so no script can drift from the flags).

# Paths a job reads or writes, made absolute (copo_abspath, DATA_DIR): the job runs in Ray's per-session copy of the
# working dir, where a relative SAVE_DIR would put checkpoints that a resubmitted job never finds (it silently starts
# at step 0), and which holds no data/ (.gitignore). Sourcing _paths.sh also checks that python3 is the environment's.
source "$(dirname "${BASH_SOURCE[0]}")/_paths.sh"

# The reward file ships inside the installed package, and the vLLM engine actors load it by path on
# whatever node they run: install openrlhf-copo at the same path on every node (one container image, or
# one shared virtualenv), or set REWARD_FILE to a copy on storage every node mounts.
REWARD_FILE=${REWARD_FILE:-$(python3 -c 'import os, openrlhf_copo.rewards as r; print(os.path.join(os.path.dirname(r.__file__), "math_reward.py"))')}
REWARD_FILE=$(copo_abspath "$REWARD_FILE")

# The job's runtime env: the working dir, minus what the run writes into it or reads by absolute path. Ray packs
# the working dir into every submission (the job server refuses an upload over 100 MiB), so checkpoints under it
# would travel again with the resubmission meant to resume from them, or stop it. Listed in .gitignore too
# (checkpoints/, data/, runs/, which Ray honours); this also covers a SAVE_DIR or DATA of the user's own inside it.
# Each value of the flags below that lies inside the working dir becomes an anchored exclude.
COPO_PATH_FLAGS="--ckpt.path --ckpt.output_dir --data.prompt_dataset --eval.dataset --copo.metrics_file --logger.tensorboard_dir"

copo_runtime_env() {  # copo_runtime_env [args...]: the JSON for `ray job submit --runtime-env-json`
  python3 - "${WORKING_DIR:-$PWD}" "$COPO_PATH_FLAGS" "$@" <<'PYEOF'
import json, os, sys

working_dir, flags, argv = os.path.realpath(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
excludes = []
for flag, value in zip(argv, argv[1:]):
    for path in [os.path.realpath(v) for v in value.split(",")] if flag in flags else []:  # --eval.dataset: a,b
        if path.startswith(working_dir + os.sep):
            anchored = "/" + os.path.relpath(path, working_dir)
            if anchored not in excludes:
                excludes.append(anchored)
print(json.dumps({"working_dir": working_dir, "excludes": excludes}))
PYEOF
}

# The flags whose values are paths the job reads (each comma-separated entry: a local file or folder, or a hub name)
# and writes. Extra flags on a script's command line come after its own, so they are covered too.
COPO_READ_FLAGS="--actor.model_name_or_path --reward.remote_url --data.prompt_dataset --eval.dataset"
COPO_WRITE_FLAGS="--ckpt.path --ckpt.output_dir --copo.metrics_file --logger.tensorboard_dir"

copo_absolute_paths() {  # every path in ARGS made absolute, read from the repository root (the rule of _paths.sh)
  local i flag
  for ((i = 1; i < ${#ARGS[@]}; i++)); do
    flag=${ARGS[i - 1]}
    if [[ " $COPO_WRITE_FLAGS " == *" $flag "* ]]; then
      ARGS[i]=$(copo_abspath "${ARGS[i]}")
    elif [[ " $COPO_READ_FLAGS " == *" $flag "* ]]; then
      ARGS[i]=$(copo_local "${ARGS[i]}")  # a hub name stays as it is
    fi
  done
}

copo_check_inputs() {  # every local path the job reads must exist here, before anything is submitted
  local flag="" arg entry
  for arg in "${ARGS[@]}"; do
    if [[ " $COPO_READ_FLAGS " == *" $flag "* ]]; then
      for entry in ${arg//,/ }; do
        case "$entry" in
          /*) [ -e "$entry" ] || {
            echo "error: $flag $entry does not exist (prepare the data first: examples/scripts/prepare_data.sh)" >&2
            return 2; } ;;
          # left relative by copo_absolute_paths: not here, and a file's name rather than a hub name
          ./* | ../* | "~"* | *.jsonl | *.json | *.parquet | *.csv | *.arrow | *.py)
            echo "error: $flag $entry does not exist in $PWD (a relative path is read from the repository root;" \
              "the job runs in Ray's copy of it, without data/)" >&2
            return 2 ;;
        esac
      done
    fi
    flag=$arg
  done
}

copo_submit() {  # the job's inputs are checked only when it is submitted: a printed command may name data not made yet
  copo_absolute_paths
  copo_switch COPO_PRINT_ARGS "${COPO_PRINT_ARGS:-0}" || copo_check_inputs || return 2
  copo_run ray job submit --address="${RAY_ADDRESS:-http://127.0.0.1:8265}" \
    --runtime-env-json="$(copo_runtime_env "${ARGS[@]}")" \
    -- python3 -m openrlhf_copo.cli.train_ppo_ray "${ARGS[@]}"
}
