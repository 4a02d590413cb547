# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# Qwen3-32B (dense, 64 layers, hybrid thinking model; thinking on), sourced by recipes/run_*_qwen3_32b.sh.
# Every value is ours (the paper does not publish its hyper-parameters) and only fills in what you
# have not exported; see docs/recipes.md ("Per-model notes") for the reasoning.
MODEL_NAME=qwen3_32b

: "${NNODES:=4}"                      # 4 nodes x 8 GPUs (80 GB class)
: "${GPUS_PER_NODE:=8}"
: "${MAX_PROMPT_LENGTH:=2048}"
: "${MAX_RESPONSE_LENGTH:=32768}"     # thinking traces; Qwen3's card suggests 32k output tokens
: "${SP_SIZE:=4}"                     # Ulysses sequence parallel: a 34k-token sequence spans 4 GPUs
# dynamic batch size token budgets per GPU (x SP_SIZE per micro-batch): 2 (train) / 4 (no-grad
# log-prob) full-length sequences per micro-batch
: "${PPO_MAX_TOKEN_LEN_PER_GPU:=$(( (2 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) + SP_SIZE - 1) / SP_SIZE ))}"
: "${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:=$(( (4 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) + SP_SIZE - 1) / SP_SIZE ))}"
: "${USE_REMOVE_PADDING:=true}"
: "${PARAM_OFFLOAD:=true}"            # fp32 params + Adam states of 32B leave too little room next to vLLM
: "${OPTIMIZER_OFFLOAD:=true}"
: "${ROLLOUT_TP:=4}"                  # 64 GB of bf16 weights over 4 GPUs, the rest for the KV cache
: "${GPU_MEMORY_UTILIZATION:=0.7}"
# validation sampling: Qwen3's recommended thinking-mode settings
: "${VAL_TEMPERATURE:=0.6}"
: "${VAL_TOP_P:=0.95}"
: "${VAL_TOP_K:=20}"

# Qwen3's chat template: thinking mode explicitly on (it is the template's default).
MODEL_OVERRIDES=(
    "+data.apply_chat_template_kwargs.enable_thinking=true"
)
