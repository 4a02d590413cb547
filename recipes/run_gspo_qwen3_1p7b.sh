#!/usr/bin/env bash
# GSPO (the baseline DFPO fixes) on Qwen3-1.7B, one node of 8 GPUs, 4k-token responses (a first affordable run). Model hyper-parameters: dfpo/config/base_model/qwen3_1p7b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-1.7B bash recipes/run_gspo_qwen3_1p7b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-1.7B bash recipes/run_gspo_qwen3_1p7b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch gspo qwen3_1p7b "$@"
