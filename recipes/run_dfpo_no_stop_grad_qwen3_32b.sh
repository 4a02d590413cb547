#!/usr/bin/env bash
# DFPO ablation "no stop-grad" on Qwen3-32B: Min-Replace with the transformed weights left differentiable.
# Paper (arXiv 2604.13088): ablation "no stop-grad". Model hyper-parameters: dfpo/config/base_model/qwen3_32b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-32B bash recipes/run_dfpo_no_stop_grad_qwen3_32b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-32B bash recipes/run_dfpo_no_stop_grad_qwen3_32b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_no_stop_grad qwen3_32b "$@"
