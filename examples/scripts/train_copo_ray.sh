#!/usr/bin/env bash
# COPO with the paper's setting (Qwen2.5-3B-Instruct on DAPO-Math-17k): gamma 20, rho 1.5, zero control
# per prompt, population std, 6 responses x 512 prompts per rollout, 32 mini-batches, lr 1e-6 constant,
# clip 0.2, 2048 prompt / 2048 response tokens, temperature 1, top-p 1, KL as a loss, sequence-mean loss.
#
# Evaluates during training every EVAL_STEPS steps (default 5) on EVAL_DATA (comma-separated prompt/label jsonl;
# default MATH-500 and AIME 2024 from DATA_DIR, as the paper's curves; EVAL_DATA= turns it off), EVAL_K samples per
# prompt (default 8) at temperature 1.0: eval_<datasource>_mean8 / _maj8 in the logs. Every variable, and the
# rule for paths (relative ones are read from the repository root): docs/gpu-recipe.md.
#
# Override from the environment: MODEL, DATA (prompt/label jsonl; default $DATA_DIR/dapo_math_17k.jsonl), SAVE_DIR
# (default checkpoints/RUN_NAME-<model>, RUN_NAME: the method),
# NNODES, GPUS_PER_NODE,
# VLLM_ENGINES, ESTIMATOR (copo | go_selective | go_blended | go_only | copo_selective | copo_gated | ngrpo | rl_zvp), COPO_MODE
# (grpo = the GRPO baseline through the same code path), GAMMA, RHO, ZERO_CONTROL, INCORRECT (each unset:
# the paper's default, openrlhf_copo.core.DEFAULTS), STD (unset: the mode's own, core.Mode.std), KL_COEF,
# LOSS_AGG (seq-mean-token-mean | token-mean), EPISODES, WANDB_PROJECT. Extra OpenRLHF flags may follow on the
# command line.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/_submit.sh

MODEL=$(copo_local "${MODEL:-Qwen/Qwen2.5-3B-Instruct}")  # a local folder made absolute; a hub name as it is
DATA=$(copo_local "${DATA:-$DATA_DIR/dapo_math_17k.jsonl}")  # a hub dataset name stays as it is
EVAL_DATA=$(copo_local "${EVAL_DATA-$DATA_DIR/math500.jsonl,$DATA_DIR/aime24.jsonl}")
# one folder per method and model (a second method in the same folder would resume from the first one's checkpoint)
RUN_NAME=${RUN_NAME:-${COPO_MODE:-${ESTIMATOR:-copo}}}
SAVE_DIR=$(copo_abspath "${SAVE_DIR:-checkpoints/$RUN_NAME-$(basename "$MODEL")}")
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
VLLM_ENGINES=${VLLM_ENGINES:-$((NNODES * GPUS_PER_NODE))}  # colocate_all: one engine per actor GPU

ARGS=(
  --advantage_estimator "${ESTIMATOR:-copo}"
  --actor.model_name_or_path "$MODEL"
  --reward.remote_url "$REWARD_FILE"
  --data.prompt_dataset "$DATA" --data.input_key prompt --data.label_key label --data.apply_chat_template
  --rollout.batch_size 512 --rollout.n_samples_per_prompt 6
  --train.batch_size 96 --train.micro_batch_size 4 --rollout.micro_batch_size 8
  --data.max_len 4096 --rollout.max_new_tokens 2048
  --rollout.temperature 1.0 --rollout.top_p 1.0
  --actor.adam.lr 1e-6 --actor.lr_scheduler constant --actor.lr_warmup_ratio 0 --actor.adam.weight_decay 0
  --actor.eps_clip 0.2 --actor.loss_agg_mode "${LOSS_AGG:-seq-mean-token-mean}"
  --algo.kl.use_loss --algo.kl.init_coef "${KL_COEF:-0.001}" --algo.kl.estimator k3
  --train.num_episodes "${EPISODES:-1}" --train.max_epochs 1
  --actor.num_nodes "$NNODES" --actor.num_gpus_per_node "$GPUS_PER_NODE"
  --ref.num_nodes "$NNODES" --ref.num_gpus_per_node "$GPUS_PER_NODE"
  --vllm.num_engines "$VLLM_ENGINES" --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.6
  --train.colocate_all --vllm.enable_sleep --ds.enable_sleep
  --ds.zero_stage 2 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable
  --ckpt.output_dir "$SAVE_DIR" --ckpt.path "$SAVE_DIR/ckpt" --ckpt.save_steps 10 --ckpt.load_enable
  --logger.logging_steps 1
)
[ -n "$EVAL_DATA" ] && ARGS+=(--eval.dataset "$EVAL_DATA" --eval.steps "${EVAL_STEPS:-5}"
                              --eval.n_samples_per_prompt "${EVAL_K:-8}" --eval.temperature 1.0)
# COPO's settings default to the paper's (openrlhf_copo.core.DEFAULTS, declared once); set only the overridden ones.
[ -n "${GAMMA:-}" ] && ARGS+=(--copo.gamma "$GAMMA")
[ -n "${RHO:-}" ] && ARGS+=(--copo.rho "$RHO")
[ -n "${ZERO_CONTROL:-}" ] && ARGS+=(--copo.zero_control "$ZERO_CONTROL")
[ -n "${INCORRECT:-}" ] && ARGS+=(--copo.incorrect "$INCORRECT")
[ -n "${STD:-}" ] && ARGS+=(--copo.std "$STD")
[ -n "${COPO_MODE:-}" ] && ARGS+=(--copo.mode "$COPO_MODE")
[ -n "${WANDB_PROJECT:-}" ] && ARGS+=(--logger.wandb.key "${WANDB_API_KEY:-}" --logger.wandb.project "$WANDB_PROJECT")
ARGS+=("$@")
copo_submit
