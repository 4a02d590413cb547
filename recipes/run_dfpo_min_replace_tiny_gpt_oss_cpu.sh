#!/usr/bin/env bash
# DFPO (Min-Replace): stop-gradient within-group transform W~_i = min_j W_j (Eq. 17). On a tiny GPT-OSS on CPU (no GPU, no download).
# The GPT-OSS-120B recipe's architecture (attention sinks, sliding window, experts) at a tiny size, through
# verl's whole trainer with python -m dfpo.main: FSDP2 with parameter and optimizer offload on 2 CPU ranks,
# padded fixed micro-batches, dfpo's local CPU rollout; model and toy data are built under OUTPUT_ROOT on first use
# (dfpo/config/base_model/tiny_gpt_oss_cpu.yaml). Every knob is an environment variable (docs/recipes.md,
# "Knobs"); extra arguments are Hydra overrides.
#
#   OUTPUT_ROOT=/tmp/dfpo bash recipes/run_dfpo_min_replace_tiny_gpt_oss_cpu.sh
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_min_replace tiny_gpt_oss_cpu "$@"
