#!/usr/bin/env bash
# Group-size sweep on Qwen3-32B: every method in SWEEP_METHODS at every G in SWEEP_GROUP_SIZES, one run
# after the other (paper: DFPO minus GSPO on AIME25 grows from +3.1 at G=2 to +5.7 at G=16).
#
# Compute is matched across G (ours): RESPONSES_PER_STEP responses per step and
# RESPONSES_PER_MINI_BATCH per optimizer update, so TRAIN_BATCH_SIZE = RESPONSES_PER_STEP / G prompts
# and PPO_MINI_BATCH_SIZE = RESPONSES_PER_MINI_BATCH / G prompts. At G=8 the defaults equal the main
# recipes' (128 and 32 prompts), so those runs share their experiment names and checkpoints
# (trainer.resume_mode=auto continues or skips them).
#
#   MODEL_PATH=/path/to/Qwen3-32B bash recipes/sweep_group_size_qwen3_32b.sh [hydra overrides...]
#   DRY_RUN=1 MODEL_PATH=... bash recipes/sweep_group_size_qwen3_32b.sh   # one command line per run
set -euo pipefail
RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$RECIPES_DIR/common.sh"

SWEEP_GROUP_SIZES="${SWEEP_GROUP_SIZES:-2 4 8 16}"
SWEEP_METHODS="${SWEEP_METHODS:-dfpo_min_replace gspo}"
RESPONSES_PER_STEP="${RESPONSES_PER_STEP:-1024}"
RESPONSES_PER_MINI_BATCH="${RESPONSES_PER_MINI_BATCH:-256}"

for group_size in $SWEEP_GROUP_SIZES; do
    dfpo_check_int "a group size in SWEEP_GROUP_SIZES" "$group_size" RESPONSES_PER_STEP "$RESPONSES_PER_STEP" \
        RESPONSES_PER_MINI_BATCH "$RESPONSES_PER_MINI_BATCH"
    if ((RESPONSES_PER_STEP % group_size != 0 || RESPONSES_PER_MINI_BATCH % group_size != 0)); then
        dfpo_die "G=$group_size does not divide RESPONSES_PER_STEP=$RESPONSES_PER_STEP and RESPONSES_PER_MINI_BATCH=$RESPONSES_PER_MINI_BATCH"
    fi
done

for group_size in $SWEEP_GROUP_SIZES; do
    for method in $SWEEP_METHODS; do
        (
            export GROUP_SIZE="$group_size"
            export TRAIN_BATCH_SIZE=$((RESPONSES_PER_STEP / group_size))
            export PPO_MINI_BATCH_SIZE=$((RESPONSES_PER_MINI_BATCH / group_size))
            dfpo_launch "$method" qwen3_32b "$@"
        )
    done
done
