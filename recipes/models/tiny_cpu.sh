# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# A tiny Qwen3 on CPU through verl's whole trainer, sourced by recipes/run_*_tiny_cpu.sh.
# No GPU and no download: the model (2 layers, hidden 128, a character-level chat tokenizer) and
# the toy task (single-digit sums with \boxed{} answers, through data_prep) are built in code under
# OUTPUT_ROOT by `python -m dfpo.examples.prepare` before the launch, once. The CPU settings (platform,
# dtypes, the rollout: verl's vLLM rollout by default) are recipes/models/cpu_base.sh's.
MODEL_NAME=tiny_cpu

: "${OUTPUT_ROOT:=$HOME/dfpo_runs}"
OUTPUT_ROOT="$(dfpo_expand_home "$OUTPUT_ROOT")"
: "${MODEL_PATH:=$OUTPUT_ROOT/models/tiny_qwen3_cpu}"
: "${DATA_DIR:=$OUTPUT_ROOT/data}"
: "${TRAIN_FILES:=$DATA_DIR/arithmetic_train.parquet}"
: "${VAL_FILES:=$DATA_DIR/arithmetic_test.parquet}"

: "${NNODES:=1}"                      # one machine
: "${GPUS_PER_NODE:=2}"               # CPU ranks (FSDP2 over gloo), each a logical Ray GPU
: "${GROUP_SIZE:=8}"
: "${TRAIN_BATCH_SIZE:=8}"            # prompts per step (x GROUP_SIZE responses)
: "${PPO_MINI_BATCH_SIZE:=4}"         # two optimizer steps per training step
: "${MAX_PROMPT_LENGTH:=192}"         # characters: the chat-templated prompt is about 120
: "${MAX_RESPONSE_LENGTH:=16}"        # "\boxed{8}<|im_end|>" is 10
: "${SP_SIZE:=1}"
: "${ROLLOUT_TP:=1}"
: "${PPO_MAX_TOKEN_LEN_PER_GPU:=4096}"
: "${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:=4096}"
: "${USE_REMOVE_PADDING:=true}"       # the GPU recipes' packed micro-batches: verl's pure-torch unpad, eager attention split by position ids
: "${GRADIENT_CHECKPOINTING:=false}"
: "${PARAM_OFFLOAD:=false}"
: "${OPTIMIZER_OFFLOAD:=false}"
: "${ROLLOUT_GPUS_PER_NODE:=1}"       # TRAINER_MODE=separate_async: CPU ranks of its own rollout
: "${CHECKPOINT_ENGINE:=local}"       # separate_async's weight sync over gloo (dfpo/cpu/checkpoint_engine.py)
: "${REWARD_NUM_WORKERS:=1}"
: "${LR:=1e-3}"                      # see docs/cpu.md: 5e-4 learned nothing visible in 6 steps; 1e-3 sometimes breaks the format
: "${LR_WARMUP_STEPS:=0}"
: "${WEIGHT_DECAY:=0.0}"
: "${TOTAL_TRAINING_STEPS:=10}"
: "${SAVE_FREQ:=5}"
: "${TEST_FREQ:=5}"
: "${VAL_N:=4}"
: "${VAL_TEMPERATURE:=1.0}"
: "${VAL_TOP_P:=1.0}"
: "${VAL_TOP_K:=-1}"
: "${LOGGER:=[console,file]}"

# shellcheck source=recipes/models/cpu_base.sh
source "$(dirname "${BASH_SOURCE[0]}")/cpu_base.sh"

# Called by dfpo_launch before it checks paths: build the toy data and the tiny model (once).
dfpo_model_prepare() {
    "${PYTHON:-python3}" -m dfpo.examples.prepare --output-root "$OUTPUT_ROOT" >&2 ||
        dfpo_die "python -m dfpo.examples.prepare --output-root $OUTPUT_ROOT failed (see above)"
}
