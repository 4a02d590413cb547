#!/usr/bin/env bash
# GRPO-fix on Qwen3-Next-80B-A3B-Thinking: verl's cispo loss: detached symmetric truncation of the token ratio, token-mean.
# Paper (arXiv 2604.13088): Table 1 row "GRPO-fix". Model hyper-parameters: dfpo/config/base_model/qwen3_next_80b_a3b_thinking.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-Next-80B-A3B-Thinking bash recipes/run_grpo_fix_qwen3_next_80b_a3b_thinking.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-Next-80B-A3B-Thinking bash recipes/run_grpo_fix_qwen3_next_80b_a3b_thinking.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch grpo_fix qwen3_next_80b_a3b_thinking "$@"
