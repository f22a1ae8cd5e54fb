#!/usr/bin/env bash
# The paper's 7B run: the same setting as train_copo_ray.sh on Qwen2.5-7B-Instruct.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct} exec "$(dirname "$0")/train_copo_ray.sh" "$@"
