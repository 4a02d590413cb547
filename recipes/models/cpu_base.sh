# shellcheck shell=bash disable=SC2034  # the variables are read by recipes/common.sh
# verl's whole trainer on CPU: the settings every CPU model file shares (recipes/models/*_cpu.sh).
# A CPU model file sets its sizes first, then sources this file, which fills MODEL_OVERRIDES.
#
# verl runs on dfpo's local CPU backend (dfpo/cpu): VERL_PLATFORM=cpu in every process, FSDP2
# over gloo with GPUS_PER_NODE CPU ranks, each rank a logical Ray GPU. The rollout is
#   ROLLOUT_NAME=vllm   verl's own vLLM rollout (vLLMReplica, vLLMHttpServer, weight sync into
#                       vLLM) on vLLM 0.24.0's CPU build: the path of the GPU recipes (default)
#   ROLLOUT_NAME=local  dfpo's transformers rollout server (dfpo/cpu/server.py; docs/cpu.md says
#                       when it is the better choice)
# ACTOR_DTYPE=auto|fp32|bf16 is the actor's compute dtype, ROLLOUT_DTYPE=auto|float32|bfloat16 the
# vLLM engine's. auto is bf16 only where this CPU computes bf16 natively (a timed probe:
# dfpo/cpu/cpu_precision.py), else fp32: bf16 updates run ~2x faster on CPUs with AVX512-BF16 or
# AMX and ~86x slower on AVX2-only CPUs. An explicit bf16 on a CPU without it runs, with a warning.
# CPU_THREADS_PER_RANK each rank's torch threads (default: the cores / the ranks).

: "${ROLLOUT_NAME:=vllm}"
: "${ACTOR_DTYPE:=fp32}"
: "${ROLLOUT_DTYPE:=float32}"
: "${VLLM_KV_CACHE_GB:=1}"            # VLLM_CPU_KVCACHE_SPACE per vLLM engine, GiB
: "${VLLM_BLOCK_SIZE:=32}"            # KV block, tokens: vLLM's CPU default (128) is longer than these prompts, so its prefix cache never hit
: "${WEIGHT_BUCKET_MB:=256}"          # >= the largest tensor: on CPU verl syncs through shared memory, one tensor per bucket at most
: "${RAY_OBJECT_STORE_BYTES:=1000000000}"  # Ray's default (30% of memory) pushes a 24 GiB machine into its OOM killer

case "$ACTOR_DTYPE" in auto | fp32 | bf16) ;; *) dfpo_die "ACTOR_DTYPE must be auto, fp32 or bf16, got '$ACTOR_DTYPE'" ;; esac
case "$ROLLOUT_DTYPE" in auto | float32 | bfloat16) ;; *) dfpo_die "ROLLOUT_DTYPE must be auto, float32 or bfloat16, got '$ROLLOUT_DTYPE'" ;; esac
if [[ "$ACTOR_DTYPE" != fp32 || "$ROLLOUT_DTYPE" != float32 ]]; then
    # auto resolved, and bf16 checked, against this CPU; the choice and its reason go to stderr
    dfpo_precision="$("${PYTHON:-python3}" -m dfpo.cpu.cpu_precision --actor "$ACTOR_DTYPE" --rollout "$ROLLOUT_DTYPE")" ||
        dfpo_die "python -m dfpo.cpu.cpu_precision --actor $ACTOR_DTYPE --rollout $ROLLOUT_DTYPE failed (see above)"
    while IFS='=' read -r dfpo_knob dfpo_value; do
        case "$dfpo_knob" in
            ACTOR_DTYPE) ACTOR_DTYPE=$dfpo_value ;;
            ROLLOUT_DTYPE) ROLLOUT_DTYPE=$dfpo_value ;;
        esac
    done <<<"$dfpo_precision"
    case "$ACTOR_DTYPE/$ROLLOUT_DTYPE" in fp32/float32 | fp32/bfloat16 | bf16/float32 | bf16/bfloat16) ;;
        *) dfpo_die "python -m dfpo.cpu.cpu_precision resolved ACTOR_DTYPE=$ACTOR_DTYPE ROLLOUT_DTYPE=$ROLLOUT_DTYPE" ;;
    esac
fi
case "$ROLLOUT_NAME" in vllm | local) ;; *) dfpo_die "ROLLOUT_NAME on CPU must be vllm or local, got '$ROLLOUT_NAME'" ;; esac

export VERL_PLATFORM=cpu              # this driver process; Ray actors get it below
dfpo_check_int GPUS_PER_NODE "$GPUS_PER_NODE"
RAY_LOGICAL_GPUS=$GPUS_PER_NODE       # every rank, and separate_async's rollout ranks, a logical GPU
if [[ "${TRAINER_MODE:-sync}" == separate_async ]]; then
    dfpo_check_int ROLLOUT_GPUS_PER_NODE "$ROLLOUT_GPUS_PER_NODE"
    RAY_LOGICAL_GPUS=$((GPUS_PER_NODE + ROLLOUT_GPUS_PER_NODE))
fi
export RAY_DEDUP_LOGS="${RAY_DEDUP_LOGS:-0}"
# torch threads in every Ray process (OMP_NUM_THREADS): Ray gives each actor that asks for no CPUs
# one thread, so each rank's forward and backward ran on one core; the cores this launcher may use
# are shared out among the ranks instead (measured on 2 cores, 1 rank: old log-probs and update
# about 0.55-0.65x the time; BENCHMARKS.md). Computed on the launching machine and applied on every
# node; under a CPU quota (a container's --cpus), set it to the quota / ranks. vLLM's CPU worker
# sets its own (it reserves a core for its scheduler). Not `nproc`: it answers OMP_NUM_THREADS.
dfpo_cores="$("${PYTHON:-python3}" -c 'import os; print(len(os.sched_getaffinity(0)))')"
: "${CPU_THREADS_PER_RANK:=$((dfpo_cores / RAY_LOGICAL_GPUS > 0 ? dfpo_cores / RAY_LOGICAL_GPUS : 1))}"
dfpo_check_int CPU_THREADS_PER_RANK "$CPU_THREADS_PER_RANK" VLLM_BLOCK_SIZE "$VLLM_BLOCK_SIZE"

MODEL_OVERRIDES=(
    trainer.device=cpu
    "+ray_kwargs.ray_init.num_gpus=$RAY_LOGICAL_GPUS"
    +ray_kwargs.ray_init.num_cpus=16
    "+ray_kwargs.ray_init.object_store_memory=$RAY_OBJECT_STORE_BYTES"
    "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM='cpu'"
    "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS='$CPU_THREADS_PER_RANK'"
    # the actor's dtypes; gradients are reduced in fp32 (FSDP2's policy takes no buffer dtype)
    "actor_rollout_ref.actor.fsdp_config.model_dtype=$ACTOR_DTYPE"
    "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=$ACTOR_DTYPE"
    ++actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32
    # attention: with packed micro-batches (USE_REMOVE_PADDING=true, the GPU recipes' setting) the
    # GPU's flash-attention path with a torch kernel (dfpo/cpu/varlen_attention.py: verl's Ulysses
    # wrapper runs, SP_SIZE>1 works, no attention across sequences); padded batches eager.
    # Nothing compiled (the V1 engine reads fsdp_config.use_torch_compile only)
    "+actor_rollout_ref.model.override_config.attn_implementation=$(dfpo_is_true "$USE_REMOVE_PADDING" && echo dfpo_cpu_varlen || echo eager)"
    actor_rollout_ref.actor.fsdp_config.use_torch_compile=false
    # one agent-loop worker, no data-loader processes, one TransferQueue storage unit (with the
    # default 8 units verl's TaskRunner waits forever in tq.init on a small machine)
    actor_rollout_ref.rollout.agent.num_workers=1
    data.dataloader_num_workers=0
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1
    actor_rollout_ref.rollout.checkpoint_engine.backend=naive
    actor_rollout_ref.rollout.calculate_log_probs=true
)
if dfpo_is_true "${USE_KL_LOSS:-false}"; then
    # the reference policy exists only with the KL loss (as in recipes/common.sh)
    MODEL_OVERRIDES+=("actor_rollout_ref.ref.fsdp_config.model_dtype=$ACTOR_DTYPE")
fi
if [[ "$ROLLOUT_NAME" == vllm ]]; then
    MODEL_OVERRIDES+=(
        "actor_rollout_ref.rollout.dtype=$ROLLOUT_DTYPE"
        # no CUDA graphs on CPU; vLLM refuses sleep mode on CPU (its CPU worker frees nothing anyway)
        actor_rollout_ref.rollout.enforce_eager=true
        +actor_rollout_ref.rollout.enable_sleep_mode=false
        "actor_rollout_ref.rollout.max_model_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))"
        "actor_rollout_ref.rollout.max_num_batched_tokens=$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) * 4))"
        # the prefix cache reuses whole blocks only: with 32-token blocks a prompt's k samples and the
        # prompts' shared turns are computed once (quickstart's validation 4.5x, a training rollout
        # 3.3x faster: scripts/bench_vllm_cpu_block_size.py, docs/cpu.md)
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=$VLLM_BLOCK_SIZE"
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=$WEIGHT_BUCKET_MB"
        # vLLM's CPU KV cache (its EngineCore and Worker processes inherit the server actor's environment)
        "+ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE='$VLLM_KV_CACHE_GB'"
    )
    if ((ROLLOUT_TP > 1)); then
        # vLLM's automatic thread binding wants a NUMA node per tensor-parallel worker: the cores are
        # shared out among the workers instead (dfpo/cpu/vllm_cpu.py: omp_threads_bind)
        : "${VLLM_CPU_OMP_THREADS_BIND:=$("${PYTHON:-python3}" -c 'import os, sys; from dfpo.cpu.vllm_cpu import omp_threads_bind; print(omp_threads_bind(int(sys.argv[1]), sorted(os.sched_getaffinity(0))))' "$ROLLOUT_TP")}"
        MODEL_OVERRIDES+=("+ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_OMP_THREADS_BIND='$VLLM_CPU_OMP_THREADS_BIND'")
    fi
fi
