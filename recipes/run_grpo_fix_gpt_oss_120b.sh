#!/usr/bin/env bash
# GRPO-fix on GPT-OSS-120B: verl's cispo loss: detached symmetric truncation of the token ratio, token-mean.
# Paper (arXiv 2604.13088): Table 1 row "GRPO-fix". Model hyper-parameters: dfpo/config/base_model/gpt_oss_120b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/GPT-OSS-120B bash recipes/run_grpo_fix_gpt_oss_120b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/GPT-OSS-120B bash recipes/run_grpo_fix_gpt_oss_120b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch grpo_fix gpt_oss_120b "$@"
