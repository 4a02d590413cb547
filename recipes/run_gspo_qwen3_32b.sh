#!/usr/bin/env bash
# GSPO on Qwen3-32B: sequence-level ratio, clip 3e-4/4e-4, seq-mean-token-mean; with the dfpo/ learning-tax metrics.
# Paper (arXiv 2604.13088): Table 1 row "GSPO". Model hyper-parameters: dfpo/config/base_model/qwen3_32b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-32B bash recipes/run_gspo_qwen3_32b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-32B bash recipes/run_gspo_qwen3_32b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch gspo qwen3_32b "$@"
