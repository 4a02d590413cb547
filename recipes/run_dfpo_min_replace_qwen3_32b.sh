#!/usr/bin/env bash
# DFPO (Min-Replace) on Qwen3-32B: stop-gradient within-group transform W~_i = min_j W_j (Eq. 17).
# Paper (arXiv 2604.13088): Table 1 row "DFPO (Min-Replace)". Model hyper-parameters: dfpo/config/base_model/qwen3_32b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-32B bash recipes/run_dfpo_min_replace_qwen3_32b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-32B bash recipes/run_dfpo_min_replace_qwen3_32b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_min_replace qwen3_32b "$@"
