# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# Qwen3-1.7B on one node of 8 GPUs with short responses: the first real run a newcomer can afford
# (a few hours on 8 x 80 GB), sourced by recipes/run_*_qwen3_1p7b.sh. Not a paper setting: the
# responses are capped at 4k tokens, so thinking mode is off (a 4k cap would cut most thinking
# traces). Every value is ours; the knobs work as for the paper's recipes.
MODEL_NAME=qwen3_1p7b

: "${NNODES:=1}"
: "${GPUS_PER_NODE:=8}"
: "${TRAIN_BATCH_SIZE:=64}"           # prompts per step (x GROUP_SIZE=8 responses)
: "${PPO_MINI_BATCH_SIZE:=16}"        # 4 optimizer updates per step, as in the paper's recipes
: "${TOTAL_TRAINING_STEPS:=200}"
: "${MAX_PROMPT_LENGTH:=1024}"
: "${MAX_RESPONSE_LENGTH:=4096}"
: "${SP_SIZE:=1}"
# 4 (train) / 8 (log-prob) full-length sequences per micro-batch
: "${PPO_MAX_TOKEN_LEN_PER_GPU:=$(( 4 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) ))}"
: "${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:=$(( 8 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) ))}"
: "${USE_REMOVE_PADDING:=true}"
: "${PARAM_OFFLOAD:=false}"           # 1.7B: parameters and Adam states fit next to vLLM
: "${OPTIMIZER_OFFLOAD:=false}"
: "${ROLLOUT_TP:=1}"
: "${GPU_MEMORY_UTILIZATION:=0.6}"
: "${VAL_TEMPERATURE:=0.7}"           # Qwen3's recommended non-thinking settings
: "${VAL_TOP_P:=0.8}"
: "${VAL_TOP_K:=20}"

MODEL_OVERRIDES=(
    "+data.apply_chat_template_kwargs.enable_thinking=false"
)
