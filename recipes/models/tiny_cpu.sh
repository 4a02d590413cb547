# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# A tiny Qwen3 on CPU through verl's whole trainer, sourced by recipes/run_*_tiny_cpu.sh.
# No GPU and no download: the model (2 layers, hidden 128, a character-level chat tokenizer) and
# the toy task (single-digit sums with \boxed{} answers, through data_prep) are built in code under
# OUTPUT_ROOT by `python -m dfpo.local.prepare` before the launch, once. verl runs on dfpo's local
# CPU backend (dfpo/local): VERL_PLATFORM=cpu, FSDP2 over gloo with GPUS_PER_NODE CPU ranks, and
# the `local` rollout (transformers) in place of vLLM.
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
: "${USE_REMOVE_PADDING:=false}"      # packing needs flash-attention kernels
: "${GRADIENT_CHECKPOINTING:=false}"
: "${PARAM_OFFLOAD:=false}"
: "${OPTIMIZER_OFFLOAD:=false}"
: "${ROLLOUT_NAME:=local}"
: "${ROLLOUT_GPUS_PER_NODE:=1}"       # TRAINER_MODE=separate_async: CPU ranks of its own rollout
: "${CHECKPOINT_ENGINE:=local}"       # separate_async's weight sync over gloo (dfpo/local/checkpoint_engine.py)
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

export VERL_PLATFORM=cpu              # this driver process; Ray actors get it below
RAY_LOGICAL_GPUS=$GPUS_PER_NODE       # every rank, and separate_async's rollout ranks, a logical GPU
[[ "${TRAINER_MODE:-sync}" != separate_async ]] || RAY_LOGICAL_GPUS=$((GPUS_PER_NODE + ROLLOUT_GPUS_PER_NODE))
export RAY_DEDUP_LOGS="${RAY_DEDUP_LOGS:-0}"

MODEL_OVERRIDES=(
    trainer.device=cpu
    "+ray_kwargs.ray_init.num_gpus=$RAY_LOGICAL_GPUS"
    +ray_kwargs.ray_init.num_cpus=16
    "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM='cpu'"
    # fp32 everywhere, eager attention, nothing compiled
    actor_rollout_ref.actor.fsdp_config.model_dtype=fp32
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32
    actor_rollout_ref.ref.fsdp_config.model_dtype=fp32
    +actor_rollout_ref.model.override_config.attn_implementation=eager
    actor_rollout_ref.actor.use_torch_compile=false
    actor_rollout_ref.actor.fsdp_config.use_torch_compile=false
    actor_rollout_ref.ref.use_torch_compile=false
    # one agent-loop worker, no data-loader processes, one TransferQueue storage unit (with the
    # default 8 units verl's TaskRunner waits forever in tq.init on a small machine)
    actor_rollout_ref.rollout.agent.num_workers=1
    data.dataloader_num_workers=0
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1
    actor_rollout_ref.rollout.checkpoint_engine.backend=naive
    actor_rollout_ref.rollout.calculate_log_probs=true
)

# Called by dfpo_launch before it checks paths: build the toy data and the tiny model (once).
dfpo_model_prepare() {
    "${PYTHON:-python3}" -m dfpo.local.prepare --output-root "$OUTPUT_ROOT" >&2 ||
        dfpo_die "python -m dfpo.local.prepare --output-root $OUTPUT_ROOT failed (see above)"
}
