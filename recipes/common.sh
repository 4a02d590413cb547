# shellcheck shell=bash
# DFPO recipes: the one shared launcher of every training run in recipes/.
#
# A run script sources this file and a model file, then calls `dfpo_launch METHOD "$@"`:
#
#     source "$RECIPES_DIR/common.sh"
#     source "$RECIPES_DIR/models/qwen3_32b.sh"
#     dfpo_launch dfpo_min_replace "$@"
#
# It builds the Hydra overrides of `python -m dfpo.main` (verl 0.9.1's main_ppo with DFPO's trainer
# and config, dfpo/config/dfpo_trainer.yaml) and runs them, appending the console output to
# $LOG_DIR/$EXPERIMENT_NAME.console.log.
#
# Precedence, lowest to highest: the defaults below (${VAR:-default}) < the model file's values
# (: "${VAR:=value}", so they never replace a variable you exported) < variables exported by the
# caller < extra Hydra overrides given to the run script ("$@", appended last: Hydra keeps the last
# value of a key). Prefer variables for anything that names the run (GROUP_SIZE, SEED): the
# experiment name is built from them.
#
# Required: MODEL_PATH (a local Hugging Face checkpoint directory; for GPT-OSS the bf16 one).
# DRY_RUN=1 prints the final command on one shell-quoted line instead of running it; it checks the
# variables but not that files exist (missing files are reported on stderr only). The checks of the
# composed config (batches, token budgets, checkpoint storage and the checkpoint to resume, the memory
# plan: dfpo/preflight.py) run in python -m dfpo.main before Ray starts, on every path; to run them
# without starting anything, pass dfpo.dry_run=true to the run script.
#
# Methods: one Hydra config file each, dfpo/config/method/<method>.yaml (docs/method.md §2-4):
#   dfpo_min_replace, dfpo_orth_proj (the paper's DFPO), dfpo_no_stop_grad, dfpo_scale_0p5 (its
#   ablations), gspo, grpo, grpo_fix (the baselines).

# The launcher's install check (Python source): exit 0 when the interpreter has this project's
# distribution (dfpo-verl) and finds the dfpo and verl packages.
DFPO_INSTALL_CHECK='import importlib.metadata as m, importlib.util as u, sys; m.distribution("dfpo-verl"); sys.exit(u.find_spec("dfpo") is None or u.find_spec("verl") is None)'

DFPO_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DFPO_METHODS=()
for dfpo_method_file in "$DFPO_REPO_ROOT"/dfpo/config/method/*.yaml; do
    dfpo_method_file="${dfpo_method_file##*/}"
    DFPO_METHODS+=("${dfpo_method_file%.yaml}")
done
unset dfpo_method_file

dfpo_die() {
    echo "dfpo recipe error: $*" >&2
    exit 1
}

dfpo_is_true() {
    case "${1,,}" in
        1 | true | yes | on) return 0 ;;
        0 | false | no | off | "") return 1 ;;
        *) dfpo_die "expected a boolean (1/0, true/false), got '$1'" ;;
    esac
}

# dfpo_require VAR...: every VAR must be set and non-empty (the model file or the caller sets them).
dfpo_require() {
    local name
    for name in "$@"; do
        if [[ -z "${!name:-}" ]]; then
            if [[ "$name" == MODEL_PATH ]]; then
                dfpo_die "MODEL_PATH is not set. Export it to the model's local Hugging Face checkpoint directory, e.g. MODEL_PATH=/path/to/Qwen3-32B bash $0"
            fi
            dfpo_die "$name is not set. Set it in the environment, or source a model file (recipes/models/*.sh) before calling dfpo_launch."
        fi
    done
}

# dfpo_check_int NAME VALUE [NAME VALUE...]: every VALUE must be a positive integer (NAME is the knob).
dfpo_check_int() {
    while [[ $# -ge 2 ]]; do
        [[ "$2" =~ ^[1-9][0-9]*$ ]] || dfpo_die "$1 must be a positive integer, got '$2'"
        shift 2
    done
}

# dfpo_check_quotable KNOB VALUE...: every VALUE can be written as a single-quoted Hydra string.
# (Called in the launcher's own shell: an error inside $(...) would only end that subshell.)
dfpo_check_quotable() {
    local knob="$1" value
    shift
    for value in "$@"; do
        # shellcheck disable=SC1003  # '\' is the one-character string: a backslash
        [[ "$value" != *"'"* && "$value" != *'\'* ]] ||
            dfpo_die "$knob: cannot pass '$value' to Hydra: it contains a quote or a backslash; rename or link the path"
    done
}

# dfpo_quote TEXT: TEXT as a single-quoted Hydra string (paths may hold characters Hydra parses);
# TEXT must have passed dfpo_check_quotable.
dfpo_quote() {
    printf "'%s'" "$1"
}

# dfpo_expand_home PATH: a leading ~/ becomes $HOME/ (Hydra and verl do not expand it).
dfpo_expand_home() {
    # shellcheck disable=SC2088  # the literal ~/ prefix is what is tested
    if [[ "$1" == "~/"* ]]; then
        printf '%s' "$HOME/${1#\~/}"
    else
        printf '%s' "$1"
    fi
}

# dfpo_split_files OUT KNOB "a,b,c": the comma-separated paths as the array OUT (~/ expanded),
# refusing an empty list or a path Hydra cannot take.
dfpo_split_files() {
    local -n out_files="$1"
    local knob="$2" item items=()
    out_files=()
    IFS=',' read -r -a items <<<"$3"
    for item in "${items[@]}"; do
        [[ -n "$item" ]] && out_files+=("$(dfpo_expand_home "$item")")
    done
    [[ ${#out_files[@]} -gt 0 ]] || dfpo_die "$knob: empty file list '$3'"
    dfpo_check_quotable "$knob" "${out_files[@]}"
}

# dfpo_hydra_list PATH...: the Hydra list ['a','b'] of checked paths.
dfpo_hydra_list() {
    local item out=""
    for item in "$@"; do
        out+="${out:+,}$(dfpo_quote "$item")"
    done
    printf '[%s]' "$out"
}

# dfpo_method_overrides METHOD: sets DFPO_METHOD_OVERRIDES to the Hydra override selecting METHOD,
# one of dfpo/config/method/*.yaml (estimator, loss, clipping and aggregation live there).
dfpo_method_overrides() {
    [[ "$1" =~ ^[a-z0-9_]+$ && -f "$DFPO_REPO_ROOT/dfpo/config/method/$1.yaml" ]] ||
        dfpo_die "unknown method '$1'; valid methods: ${DFPO_METHODS[*]} (dfpo/config/method/*.yaml)"
    DFPO_METHOD_OVERRIDES=("method=$1")
}

# Keys of ray.init that Ray refuses when the driver connects to a running cluster ("When connecting
# to an existing cluster, num_cpus and num_gpus must not be provided", and the same for these):
# there, every node's CPUs, GPUs and object store are what its `ray start` gave it.
DFPO_RAY_INIT_NODE_KEYS="num_cpus num_gpus resources labels object_store_memory _system_config"

# dfpo_cluster_model_overrides: DFPO_MODEL_OVERRIDES = MODEL_OVERRIDES, less the ray_init keys of
# DFPO_RAY_INIT_NODE_KEYS when RAY_ADDRESS names a running cluster (scripts/launch/ray_cluster.sh,
# `ray job submit` and SLURM runs set it). A CPU model file sizes a local Ray with them.
dfpo_cluster_model_overrides() {
    local override key dropped=()
    DFPO_MODEL_OVERRIDES=()
    for override in "${MODEL_OVERRIDES[@]}"; do
        if [[ -n "${RAY_ADDRESS:-}" && "${RAY_ADDRESS}" != local && "$override" =~ ^\+*ray_kwargs\.ray_init\.([A-Za-z_]+)[.=] ]]; then
            key="${BASH_REMATCH[1]}"
            if [[ " $DFPO_RAY_INIT_NODE_KEYS " == *" $key "* ]]; then
                dropped+=("$override")
                continue
            fi
        fi
        DFPO_MODEL_OVERRIDES+=("$override")
    done
    if [[ ${#dropped[@]} -gt 0 ]]; then
        echo "dfpo recipe: RAY_ADDRESS=$RAY_ADDRESS is a running cluster: its nodes' resources are their ray start's, so not passing ${dropped[*]}" >&2
    fi
}

# dfpo_check_local_path WHAT PATH: fail when PATH is local and missing (hdfs:// and the like pass).
dfpo_check_local_path() {
    local what="$1" path="$2"
    [[ "$path" == *"://"* ]] && return 0
    if [[ ! -e "$path" ]]; then
        if dfpo_is_true "${DRY_RUN:-0}"; then
            echo "dfpo recipe warning: $what $path does not exist (DRY_RUN: not checked further)" >&2
        else
            dfpo_die "$what $path does not exist. $3"
        fi
    fi
}

# dfpo_launch METHOD [HYDRA_OVERRIDE...]: run (or with DRY_RUN=1 print) one training run.
dfpo_launch() {
    [[ $# -ge 1 ]] || dfpo_die "usage: dfpo_launch METHOD [hydra overrides...]; methods: ${DFPO_METHODS[*]}"
    local method="$1"
    shift
    dfpo_method_overrides "$method"

    dfpo_require MODEL_PATH MODEL_NAME MAX_RESPONSE_LENGTH SP_SIZE ROLLOUT_TP USE_REMOVE_PADDING
    # dynamic batching (micro-batches filled up to a token budget) or fixed micro-batches of
    # PPO_MICRO_BATCH_SIZE_PER_GPU / LOG_PROB_MICRO_BATCH_SIZE_PER_GPU sequences
    local use_dynamic_bsz=false
    dfpo_is_true "${USE_DYNAMIC_BSZ:-true}" && use_dynamic_bsz=true
    if [[ "$use_dynamic_bsz" == true ]]; then
        dfpo_require PPO_MAX_TOKEN_LEN_PER_GPU LOG_PROB_MAX_TOKEN_LEN_PER_GPU
        dfpo_check_int PPO_MAX_TOKEN_LEN_PER_GPU "$PPO_MAX_TOKEN_LEN_PER_GPU" \
            LOG_PROB_MAX_TOKEN_LEN_PER_GPU "$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
    else
        dfpo_check_int PPO_MICRO_BATCH_SIZE_PER_GPU "${PPO_MICRO_BATCH_SIZE_PER_GPU:-1}" \
            LOG_PROB_MICRO_BATCH_SIZE_PER_GPU "${LOG_PROB_MICRO_BATCH_SIZE_PER_GPU:-1}"
    fi

    # ---- paths ---------------------------------------------------------------------------------
    local python="${PYTHON:-python3}"
    local model_path data_dir output_root
    # shellcheck disable=SC2153  # MODEL_PATH is the caller's variable, checked by dfpo_require above
    model_path="$(dfpo_expand_home "$MODEL_PATH")"
    data_dir="$(dfpo_expand_home "${DATA_DIR:-$HOME/data/dfpo}")"
    output_root="$(dfpo_expand_home "${OUTPUT_ROOT:-$HOME/dfpo_runs}")"
    local train_files=() val_files=()
    dfpo_split_files train_files TRAIN_FILES "${TRAIN_FILES:-$data_dir/math_train.parquet,$data_dir/code_train.parquet}"
    dfpo_split_files val_files VAL_FILES "${VAL_FILES:-$data_dir/aime25.parquet,$data_dir/hmmt25.parquet,$data_dir/lcb_v6.parquet}"
    dfpo_check_quotable MODEL_PATH "$model_path"

    # ---- cluster, batch, lengths ---------------------------------------------------------------
    local nnodes="${NNODES:-1}" gpus_per_node="${GPUS_PER_NODE:-8}"
    local group_size="${GROUP_SIZE:-8}"                 # G: responses per prompt
    local train_batch_size="${TRAIN_BATCH_SIZE:-128}"   # prompts per step (× G responses)
    local ppo_mini_batch_size="${PPO_MINI_BATCH_SIZE:-32}"  # prompts per optimizer update
    local ppo_epochs="${PPO_EPOCHS:-1}"
    local max_prompt_length="${MAX_PROMPT_LENGTH:-2048}"
    local seed="${SEED:-1}"
    local total_training_steps="${TOTAL_TRAINING_STEPS:-300}"
    dfpo_check_int NNODES "$nnodes" GPUS_PER_NODE "$gpus_per_node" GROUP_SIZE "$group_size" \
        TRAIN_BATCH_SIZE "$train_batch_size" PPO_MINI_BATCH_SIZE "$ppo_mini_batch_size" PPO_EPOCHS "$ppo_epochs" \
        MAX_PROMPT_LENGTH "$max_prompt_length" SEED "$seed" TOTAL_TRAINING_STEPS "$total_training_steps" \
        MAX_RESPONSE_LENGTH "$MAX_RESPONSE_LENGTH" SP_SIZE "$SP_SIZE" ROLLOUT_TP "$ROLLOUT_TP"
    # batch divisibility, token budgets, padding, the memory plan and checkpoint storage are checked
    # by python -m dfpo.main before Ray starts (dfpo/preflight.py), on every path

    local use_kl_loss=false
    dfpo_is_true "${USE_KL_LOSS:-false}" && use_kl_loss=true

    # ---- trainer mode: verl 0.9.1's V1 trainers with DFPO's actor worker (dfpo/trainer.py) -------
    # sync (default): rollout, then training on those responses. colocate_async: the same ranks
    # alternate, rollouts run ahead and partial rollouts continue across weight syncs (responses up
    # to verl's trainer.v1.sampler.max_off_policy_threshold policy versions old). separate_async:
    # rollout on ROLLOUT_NNODES x ROLLOUT_GPUS_PER_NODE GPUs of its own, weights synced every
    # TRAIN_BATCH_SIZE / PPO_MINI_BATCH_SIZE optimizer updates through CHECKPOINT_ENGINE.
    local trainer_mode="${TRAINER_MODE:-sync}" mode_suffix="" mode_overrides=()
    case "$trainer_mode" in
        sync) ;;  # dfpo_trainer.yaml's default, trainer.v1.trainer_mode=dfpo_sync
        colocate_async)
            mode_suffix="-$trainer_mode"
            mode_overrides=(trainer.v1.trainer_mode=dfpo_colocate_async)
            ;;
        separate_async)
            mode_suffix="-$trainer_mode"
            dfpo_require ROLLOUT_GPUS_PER_NODE
            dfpo_check_int ROLLOUT_GPUS_PER_NODE "$ROLLOUT_GPUS_PER_NODE" ROLLOUT_NNODES "${ROLLOUT_NNODES:-1}"
            mode_overrides=(
                trainer.v1.trainer_mode=dfpo_separate_async
                # verl requires train_batch_size == parameter_sync_step * ppo_mini_batch_size
                "trainer.v1.separate_async.parameter_sync_step=$((train_batch_size / ppo_mini_batch_size))"
                "actor_rollout_ref.rollout.nnodes=${ROLLOUT_NNODES:-1}"
                "actor_rollout_ref.rollout.n_gpus_per_node=$ROLLOUT_GPUS_PER_NODE"
                "actor_rollout_ref.rollout.checkpoint_engine.backend=${CHECKPOINT_ENGINE:-nccl}"
            )
            ;;
        *) dfpo_die "TRAINER_MODE=$trainer_mode: expected sync, colocate_async or separate_async" ;;
    esac

    local project_name="${PROJECT_NAME:-dfpo}"
    local experiment_name="${EXPERIMENT_NAME:-${method}-${MODEL_NAME}-g${group_size}-seed${seed}${mode_suffix}}"
    local ckpt_dir log_dir
    ckpt_dir="$(dfpo_expand_home "${CKPT_DIR:-$output_root/checkpoints/$project_name/$experiment_name}")"
    log_dir="$(dfpo_expand_home "${LOG_DIR:-$output_root/logs/$project_name}")"
    # verl's FileLogger opens its file with "wb": one file per launch keeps a resumed run's history.
    local file_log
    file_log="$log_dir/$experiment_name.$(date -u +%Y%m%dT%H%M%SZ).jsonl"
    dfpo_check_quotable "OUTPUT_ROOT/CKPT_DIR/LOG_DIR/EXPERIMENT_NAME" "$ckpt_dir" "$file_log"
    dfpo_check_quotable "the repository path" "$DFPO_REPO_ROOT"
    dfpo_check_quotable "PROJECT_NAME/EXPERIMENT_NAME" "$project_name" "$experiment_name"
    dfpo_check_quotable SANDBOX_FUSION_URL "${SANDBOX_FUSION_URL:-}"

    # ---- the overrides -------------------------------------------------------------------------
    local overrides=(
        # data (prepared by data_prep; see docs/data.md)
        "data.train_files=$(dfpo_hydra_list "${train_files[@]}")"
        "data.val_files=$(dfpo_hydra_list "${val_files[@]}")"
        data.prompt_key=prompt
        "data.max_prompt_length=$max_prompt_length"
        "data.max_response_length=$MAX_RESPONSE_LENGTH"
        "data.train_batch_size=$train_batch_size"
        data.filter_overlong_prompts=true
        data.truncation=error
        "data.seed=$seed"

        # algorithm shared by every method (the method's own keys follow below)
        algorithm.norm_adv_by_std_in_grpo=true
        algorithm.use_kl_in_reward=false
        "algorithm.rollout_correction.rollout_is=${ROLLOUT_IS:-null}"

        # model
        "actor_rollout_ref.model.path=$(dfpo_quote "$model_path")"
        "actor_rollout_ref.model.use_remove_padding=$USE_REMOVE_PADDING"
        "actor_rollout_ref.model.enable_gradient_checkpointing=${GRADIENT_CHECKPOINTING:-true}"

        # actor: optimizer and PPO loop
        "actor_rollout_ref.actor.strategy=${ACTOR_STRATEGY:-fsdp2}"
        "actor_rollout_ref.actor.optim.lr=${LR:-1e-6}"
        "actor_rollout_ref.actor.optim.lr_warmup_steps=${LR_WARMUP_STEPS:-10}"
        "actor_rollout_ref.actor.optim.weight_decay=${WEIGHT_DECAY:-0.1}"
        # verl 0.9.1's engine clips with optim.clip_grad (actor.grad_clip is declared but never read)
        "actor_rollout_ref.actor.optim.clip_grad=${GRAD_CLIP:-1.0}"
        "actor_rollout_ref.actor.ppo_mini_batch_size=$ppo_mini_batch_size"
        "actor_rollout_ref.actor.ppo_epochs=$ppo_epochs"
        "actor_rollout_ref.actor.shuffle=${ACTOR_SHUFFLE:-false}"
        "actor_rollout_ref.actor.data_loader_seed=$seed"
        "actor_rollout_ref.actor.entropy_coeff=${ENTROPY_COEFF:-0}"
        "actor_rollout_ref.actor.use_kl_loss=$use_kl_loss"

        # actor: memory and parallelism
        "actor_rollout_ref.actor.use_dynamic_bsz=$use_dynamic_bsz"
        # the log-prob pass's entropy over the vocabulary in chunks of 2,048 tokens, not all at once
        "actor_rollout_ref.actor.entropy_from_logits_with_chunking=${ENTROPY_CHUNKING:-true}"
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=$SP_SIZE"
        "actor_rollout_ref.actor.fsdp_config.param_offload=${PARAM_OFFLOAD:-true}"
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=${OPTIMIZER_OFFLOAD:-true}"
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=${FSDP_SIZE:--1}"


        # rollout (vLLM, colocated with the actor)
        "actor_rollout_ref.rollout.name=${ROLLOUT_NAME:-vllm}"
        "actor_rollout_ref.rollout.n=$group_size"
        "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
        "actor_rollout_ref.rollout.seed=$seed"
        "actor_rollout_ref.rollout.temperature=${TEMPERATURE:-1.0}"
        "actor_rollout_ref.rollout.top_p=${TOP_P:-1.0}"
        "actor_rollout_ref.rollout.top_k=${TOP_K:--1}"
        "actor_rollout_ref.rollout.val_kwargs.n=${VAL_N:-4}"
        "actor_rollout_ref.rollout.val_kwargs.temperature=${VAL_TEMPERATURE:-0.6}"
        "actor_rollout_ref.rollout.val_kwargs.top_p=${VAL_TOP_P:-0.95}"
        "actor_rollout_ref.rollout.val_kwargs.top_k=${VAL_TOP_K:-20}"

        # reward: verl 0.9.1's keys (the top-level custom_reward_function.* and
        # reward_model.reward_manager keys are ignored by 0.9.1; never use them)
        "reward.custom_reward_function.path=$(dfpo_quote "$DFPO_REPO_ROOT/reward/score.py")"
        reward.custom_reward_function.name=compute_score
        "+reward.custom_reward_function.reward_kwargs.score_mode=${REWARD_SCORE_MODE:-binary}"
        "+reward.custom_reward_function.reward_kwargs.code_backend=${CODE_BACKEND:-local}"
        "reward.reward_manager.name=${REWARD_MANAGER:-naive}"
        "reward.num_workers=${REWARD_NUM_WORKERS:-16}"

        # dfpo's record of the model (dfpo/memory_plan.py's name for it: the memory plan)
        "dfpo.model=$MODEL_NAME"

        # trainer
        "trainer.project_name=$(dfpo_quote "$project_name")"
        "trainer.experiment_name=$(dfpo_quote "$experiment_name")"
        "trainer.logger=${LOGGER:-[console,file]}"
        "trainer.nnodes=$nnodes"
        "trainer.n_gpus_per_node=$gpus_per_node"
        "trainer.total_training_steps=$total_training_steps"
        "trainer.total_epochs=${TOTAL_EPOCHS:-100}"
        "trainer.save_freq=${SAVE_FREQ:-20}"
        "trainer.max_actor_ckpt_to_keep=${MAX_CKPT_TO_KEEP:-3}"
        "trainer.test_freq=${TEST_FREQ:-20}"
        "trainer.val_before_train=${VAL_BEFORE_TRAIN:-true}"
        "trainer.resume_mode=${RESUME_MODE:-auto}"
        "trainer.default_local_dir=$(dfpo_quote "$ckpt_dir")"
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=$(dfpo_quote "$file_log")"
    )
    if [[ "${ROLLOUT_NAME:-vllm}" != local ]]; then
        # the inference engine's share of accelerator memory (dfpo's local CPU rollout has none)
        overrides+=("actor_rollout_ref.rollout.gpu_memory_utilization=${GPU_MEMORY_UTILIZATION:-0.7}")
    fi
    if [[ "$use_dynamic_bsz" == true ]]; then
        overrides+=(
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$PPO_MAX_TOKEN_LEN_PER_GPU"
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
        )
    else
        overrides+=(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=${PPO_MICRO_BATCH_SIZE_PER_GPU:-1}"
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=${LOG_PROB_MICRO_BATCH_SIZE_PER_GPU:-1}"
        )
    fi
    if [[ "$use_kl_loss" == true ]]; then
        # the KL loss and the reference policy it needs exist only with USE_KL_LOSS=true (verl builds
        # no reference worker otherwise, so these keys would be read by nothing)
        overrides+=(
            "actor_rollout_ref.actor.kl_loss_coef=${KL_LOSS_COEF:-0.001}"
            actor_rollout_ref.actor.kl_loss_type=low_var_kl
            "actor_rollout_ref.ref.fsdp_config.param_offload=${PARAM_OFFLOAD:-true}"
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size=$SP_SIZE"
        )
        if [[ "$use_dynamic_bsz" == true ]]; then
            overrides+=("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$LOG_PROB_MAX_TOKEN_LEN_PER_GPU")
        else
            overrides+=("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=${LOG_PROB_MICRO_BATCH_SIZE_PER_GPU:-1}")
        fi
    elif [[ -n "${KL_LOSS_COEF:-}" ]]; then
        dfpo_die "KL_LOSS_COEF=$KL_LOSS_COEF has no effect without USE_KL_LOSS=true: set USE_KL_LOSS=true or unset KL_LOSS_COEF"
    fi
    if [[ "${ROLLOUT_IS:-null}" != null ]]; then
        overrides+=("algorithm.rollout_correction.rollout_is_threshold=${ROLLOUT_IS_THRESHOLD:-2.0}")
    elif [[ -n "${ROLLOUT_IS_THRESHOLD:-}" ]]; then
        dfpo_die "ROLLOUT_IS_THRESHOLD=$ROLLOUT_IS_THRESHOLD has no effect without ROLLOUT_IS (token or sequence): set ROLLOUT_IS or unset ROLLOUT_IS_THRESHOLD"
    fi
    if [[ -n "${SANDBOX_FUSION_URL:-}" ]]; then
        overrides+=("+reward.custom_reward_function.reward_kwargs.sandbox_fusion_url=$(dfpo_quote "$SANDBOX_FUSION_URL")")
    fi
    overrides+=("${DFPO_METHOD_OVERRIDES[@]}")
    if declare -p MODEL_OVERRIDES >/dev/null 2>&1; then
        dfpo_cluster_model_overrides
        overrides+=("${DFPO_MODEL_OVERRIDES[@]}")
    fi
    overrides+=("${mode_overrides[@]}")  # after the model file's (its checkpoint engine is for sync)

    local cmd=("$python" -m dfpo.main "${overrides[@]}" "$@")

    # ---- files the run reads -------------------------------------------------------------------
    # A model file may build its model and data first (recipes/models/tiny_cpu.sh does).
    if declare -F dfpo_model_prepare >/dev/null && ! dfpo_is_true "${DRY_RUN:-0}"; then
        dfpo_model_prepare
    fi
    local file
    dfpo_check_local_path "MODEL_PATH" "$model_path" "Download the checkpoint first (see docs/recipes.md)."
    for file in "${train_files[@]}" "${val_files[@]}"; do
        dfpo_check_local_path "data file" "$file" \
            "Prepare it with data_prep (docs/data.md) or set DATA_DIR / TRAIN_FILES / VAL_FILES."
    done

    if dfpo_is_true "${DRY_RUN:-0}"; then
        printf '%q ' "${cmd[@]}"
        printf '\n'
        return 0
    fi

    # installed in this interpreter: the project's distribution and verl found, without importing
    # them (an import of verl costs 10-20 s on 2 cores; dfpo.main itself imports them next)
    "$python" -c "$DFPO_INSTALL_CHECK" 2>/dev/null ||
        dfpo_die "$python does not have this project and verl installed: install the project on every node (pip install -e $DFPO_REPO_ROOT) or set PYTHON to the environment's interpreter"
    mkdir -p "$log_dir"
    echo "dfpo: $experiment_name -> $log_dir/$experiment_name.console.log, checkpoints in $ckpt_dir" >&2
    # This shell becomes the driver (exec), so a scheduler's SIGTERM to the recipe reaches it
    # (dfpo.preemption: the step in flight finishes and is checkpointed) as Ctrl-C does, and the
    # recipe's exit status is the driver's; its output also goes to the console log.
    exec > >(tee -a "$log_dir/$experiment_name.console.log") 2>&1
    export PYTHONUNBUFFERED=1
    exec "${cmd[@]}"
}
