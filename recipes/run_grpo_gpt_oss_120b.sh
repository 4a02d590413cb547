#!/usr/bin/env bash
# GRPO on GPT-OSS-120B: token-level PPO clip 0.2/0.2, token-mean; with the dfpo/ learning-tax metrics.
# Paper (arXiv 2604.13088): Table 1 row "GRPO". Model hyper-parameters: dfpo/config/base_model/gpt_oss_120b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/GPT-OSS-120B bash recipes/run_grpo_gpt_oss_120b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/GPT-OSS-120B bash recipes/run_grpo_gpt_oss_120b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch grpo gpt_oss_120b "$@"
