#!/usr/bin/env bash
# DFPO (Min-Replace) on Qwen3-0.6B, one GPU, 2 steps (the smoke run scripts/gpu_smoke.sh starts). Model hyper-parameters: dfpo/config/base_model/qwen3_0p6b.yaml;
# every knob is an environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   MODEL_PATH=/path/to/Qwen3-0.6B bash recipes/run_dfpo_min_replace_qwen3_0p6b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=/path/to/Qwen3-0.6B bash recipes/run_dfpo_min_replace_qwen3_0p6b.sh   # print the command only
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_min_replace qwen3_0p6b "$@"
