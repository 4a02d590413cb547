# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# GPT-OSS-120B (MoE, 128 experts / 4 active, 36 layers, attention sinks), sourced by
# recipes/run_*_gpt_oss_120b.sh. MODEL_PATH must be a bf16 checkpoint: the published one stores the
# experts in MXFP4, which FSDP cannot train (dequantize it once with transformers'
# Mxfp4Config(dequantize=True) and save_pretrained). Values are ours.
MODEL_NAME=gpt_oss_120b

: "${NNODES:=16}"                     # the memory plan: ~69 GB per GPU at 16 nodes, ~113 GB at 4
: "${GPUS_PER_NODE:=8}"
: "${MAX_PROMPT_LENGTH:=2048}"
: "${MAX_RESPONSE_LENGTH:=32768}"     # reasoning_effort=high produces long analysis channels
# No Ulysses sequence parallel: verl 0.9.1's Ulysses attention (_ulysses_flash_attention_forward)
# splits the 64 query heads over the SP ranks but passes the 64-head attention-sink tensor (s_aux)
# through unchanged, and it does not patch flex_attention or eager at all (each rank would attend
# within its slice of the sequence): log-probs would be silently wrong. SP_SIZE>1 is refused before
# Ray starts (dfpo/preflight.py, from the checkpoint's model_type or dfpo.model).
: "${SP_SIZE:=1}"
# one full-length sequence per micro-batch, for training and for the no-grad log-prob pass alike:
# 34,816 tokens x 201,088 vocabulary entries of logits is already ~28 GB in fp32
: "${PPO_MAX_TOKEN_LEN_PER_GPU:=$(( MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH ))}"
: "${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:=$(( MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH ))}"
: "${USE_REMOVE_PADDING:=true}"
: "${PARAM_OFFLOAD:=true}"
: "${OPTIMIZER_OFFLOAD:=true}"
: "${ROLLOUT_TP:=8}"                  # ~234 GB of bf16 weights (the rollout receives the trained bf16 weights)
: "${GPU_MEMORY_UTILIZATION:=0.7}"
# validation sampling: OpenAI's recommended settings for gpt-oss
: "${VAL_TEMPERATURE:=1.0}"
: "${VAL_TOP_P:=1.0}"
: "${VAL_TOP_K:=-1}"
# Training attention must implement the learned attention sinks: transformers 5 offers the
# kernels-community/vllm-flash-attn3 hub kernel (Hopper; needs the `kernels` package and the kernel
# in the Hugging Face cache of every node), flash_attention_4, flex_attention or eager (memory
# quadratic in the sequence length). verl's default flash_attention_2 has no sinks.
: "${GPT_OSS_ATTN_IMPLEMENTATION:=kernels-community/vllm-flash-attn3}"

MODEL_OVERRIDES=(
    "+data.apply_chat_template_kwargs.reasoning_effort=${GPT_OSS_REASONING_EFFORT:-high}"
    "+actor_rollout_ref.model.override_config.attn_implementation='${GPT_OSS_ATTN_IMPLEMENTATION}'"
)
