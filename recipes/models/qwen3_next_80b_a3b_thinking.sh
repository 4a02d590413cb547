# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# Qwen3-Next-80B-A3B-Thinking (MoE, 512 experts / 10 active, 48 layers of which 36 are Gated DeltaNet
# linear attention), sourced by recipes/run_*_qwen3_next_80b_a3b_thinking.sh. Values are ours.
MODEL_NAME=qwen3_next_80b_a3b_thinking

: "${NNODES:=8}"                      # the memory plan: 4 nodes would need ~81 GB per GPU
: "${GPUS_PER_NODE:=8}"
: "${MAX_PROMPT_LENGTH:=2048}"
: "${MAX_RESPONSE_LENGTH:=32768}"
# No padding removal and no Ulysses: verl 0.9.1 packs sequences for use_remove_padding=true but
# passes only position_ids to the model, and transformers' Qwen3-Next linear-attention layers then
# receive no sequence boundaries (cu_seq_lens), so the recurrent state of one response would flow
# into the next packed one. Padded micro-batches keep every sequence in its own row (padding is on
# the right, after the causal sequence). Ulysses needs padding removal, hence SP_SIZE=1.
: "${USE_REMOVE_PADDING:=false}"
: "${SP_SIZE:=1}"
# Fixed micro-batches of one sequence, not dynamic batching: verl fills a dynamic micro-batch up
# to its token budget in real tokens, then pads every row to the longest one (30k + 2.4k + 2.4k
# tokens fit a 34,816-token budget and become ~90k padded tokens, ~27 GB of bf16 logits). One
# sequence per micro-batch bounds the padded tokens at MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH,
# for training and for the log-prob pass alike.
: "${USE_DYNAMIC_BSZ:=false}"
: "${PPO_MICRO_BATCH_SIZE_PER_GPU:=1}"
: "${LOG_PROB_MICRO_BATCH_SIZE_PER_GPU:=1}"
: "${PARAM_OFFLOAD:=true}"            # 80B total parameters: fp32 master weights and Adam states on CPU
: "${OPTIMIZER_OFFLOAD:=true}"
: "${ROLLOUT_TP:=4}"                  # 160 GB of bf16 weights over 4 GPUs
: "${GPU_MEMORY_UTILIZATION:=0.7}"
# validation sampling: the model card's recommended settings
: "${VAL_TEMPERATURE:=0.6}"
: "${VAL_TOP_P:=0.95}"
: "${VAL_TOP_K:=20}"

# The Thinking model always thinks; its chat template takes no switch.
MODEL_OVERRIDES=()
