# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# Qwen3-0.6B on ONE GPU for 2 steps: the smoke run of a new GPU node (scripts/gpu_smoke.sh runs it),
# sourced by recipes/run_*_qwen3_0p6b.sh. It exercises the whole path — vLLM rollout, the reward,
# DFPO's update, weight sync, validation, checkpoint — in a few minutes, not a training setting.
MODEL_NAME=qwen3_0p6b

: "${NNODES:=1}"
: "${GPUS_PER_NODE:=1}"
: "${GROUP_SIZE:=4}"
: "${TRAIN_BATCH_SIZE:=8}"            # prompts per step (x 4 responses)
: "${PPO_MINI_BATCH_SIZE:=4}"         # 2 optimizer updates per step: the second one is off-policy
: "${TOTAL_TRAINING_STEPS:=2}"
: "${SAVE_FREQ:=2}"
: "${TEST_FREQ:=2}"
: "${VAL_BEFORE_TRAIN:=false}"
: "${VAL_N:=1}"
: "${MAX_PROMPT_LENGTH:=1024}"
: "${MAX_RESPONSE_LENGTH:=512}"
: "${SP_SIZE:=1}"
: "${PPO_MAX_TOKEN_LEN_PER_GPU:=$(( 4 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) ))}"
: "${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:=$(( 8 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) ))}"
: "${USE_REMOVE_PADDING:=true}"
: "${PARAM_OFFLOAD:=false}"
: "${OPTIMIZER_OFFLOAD:=false}"
: "${ROLLOUT_TP:=1}"
: "${GPU_MEMORY_UTILIZATION:=0.4}"    # vLLM shares the one GPU with the FSDP actor
: "${REWARD_NUM_WORKERS:=2}"
: "${VAL_TEMPERATURE:=0.7}"
: "${VAL_TOP_P:=0.8}"
: "${VAL_TOP_K:=20}"

MODEL_OVERRIDES=(
    "+data.apply_chat_template_kwargs.enable_thinking=false"
)
