#!/usr/bin/env bash
# DFPO ablation "scale by 0.5": GSPO weights times 0.5 (dfpo_transform=scale): the asymmetry stays. On a tiny CPU model (no GPU, no download).
# verl's whole trainer through python -m dfpo.main on dfpo's local CPU backend; model and toy data are
# built under OUTPUT_ROOT on first use (dfpo/config/base_model/tiny_cpu.yaml). Every knob is an environment
# variable (docs/recipes.md, "Knobs"); extra arguments are Hydra overrides.
#
#   OUTPUT_ROOT=/tmp/dfpo TOTAL_TRAINING_STEPS=3 bash recipes/run_dfpo_scale_0p5_tiny_cpu.sh
#   GPUS_PER_NODE=1 bash recipes/run_dfpo_scale_0p5_tiny_cpu.sh      # one CPU rank instead of two
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"
dfpo_launch dfpo_scale_0p5 tiny_cpu "$@"
