#!/usr/bin/env bash
# DFPO (Orth-Proj) on Qwen3-Next-80B-A3B-Thinking: stop-gradient advantage-orthogonal reweighting (Eq. 18).
# Paper (arXiv 2604.13088): Table 1 row "DFPO (Orth-Proj)". Model hyper-parameters: dfpo/config/base_model/qwen3_next_80b_a3b_thinking.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-Next-80B-A3B-Thinking bash recipes/run_dfpo_orth_proj_qwen3_next_80b_a3b_thinking.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-Next-80B-A3B-Thinking bash recipes/run_dfpo_orth_proj_qwen3_next_80b_a3b_thinking.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_orth_proj qwen3_next_80b_a3b_thinking "$@"
