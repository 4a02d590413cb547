#!/usr/bin/env bash
# The first command to run on a new GPU node (one GPU is enough): checks the environment, checks
# the GPT-OSS recipe's training attention against eager on a tiny model (python -m
# dfpo.launch.sink_attention_check: forward and q/k/v/o/sink gradients on CUDA; SKIP without CUDA),
# trains DFPO for 2 steps through vLLM, repeats one step in verl's rollout-correction bypass mode
# (on one GPU: it checks where the old log-probs come from, not the sharding), merges the checkpoint
# and evaluates it with the vLLM backend on 2 problems; prints PASS/FAIL/SKIP per stage and exits 1
# if any failed. About 10 minutes on one H100/H200 once the model is on disk.
#
#   MODEL_PATH=/path/to/Qwen3-0.6B bash scripts/gpu_smoke.sh
#   bash scripts/gpu_smoke.sh --cpu          # the same stages on CPU (6-9 minutes on 2 cores)
#
# MODEL_PATH: a local Qwen3-0.6B checkpoint (hf download Qwen/Qwen3-0.6B --local-dir ...).
# SMOKE_LR (default 1e-4): the training runs' LR on GPUs, large enough for the weight-sync check.
# OUTPUT_ROOT (default ~/dfpo_gpu_smoke): data, checkpoints, logs and the evaluation go there; each
# run starts afresh. PYTHON: the GPU environment's interpreter (default python3). The task is the
# toy arithmetic set of the CPU recipes (built by data_prep, no download); the training run is
# recipes/run_dfpo_min_replace_qwen3_0p6b.sh. What it verifies that no CPU test can: docs/recipes.md,
# "What to verify on the first GPU run".
#
# --cpu runs every stage through the same code on a machine without a GPU, with the CPU stack
# (scripts/setup_env.sh): python -m dfpo.launch.doctor --stack cpu; the toy data and the CPU recipes' tiny
# Qwen3 (python -m cpu_examples.prepare, no download; MODEL_PATH overrides the model); the CPU
# backend's packed attention against eager on a tiny GPT-OSS (seconds); 2 DFPO steps of
# recipes/run_dfpo_min_replace_tiny_cpu.sh with ROLLOUT_NAME=vllm (verl's vLLM replica, server and
# weight sync on vLLM's CPU build) on GPUS_PER_NODE=1 CPU rank by default, their checks with fp32
# bounds; the bypass-mode step (one rank); verl.model_merger; and the vLLM evaluation backend on CPU. What it
# cannot check (CUDA graphs, sleep/wake memory, NCCL, flash-attn, CUDA IPC, ...) is that same list
# in docs/recipes.md. OUTPUT_ROOT defaults to ~/dfpo_cpu_smoke.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
cpu=0
for arg in "$@"; do
    case "$arg" in
        --cpu) cpu=1 ;;
        -h | --help) sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_smoke: unknown argument '$arg' (use --cpu, or none on a GPU node)" >&2; exit 2 ;;
    esac
done
if [[ "$cpu" == 1 ]]; then
    output_root="${OUTPUT_ROOT:-$HOME/dfpo_cpu_smoke}"
    recipe=run_dfpo_min_replace_tiny_cpu.sh
    model_path="${MODEL_PATH:-$output_root/models/tiny_qwen3_cpu}"  # cpu_examples.prepare builds it there
    mode="gpu_smoke --cpu"
else
    : "${MODEL_PATH:?set MODEL_PATH to a local Qwen3-0.6B checkpoint directory, e.g. MODEL_PATH=\$HOME/models/Qwen3-0.6B bash scripts/gpu_smoke.sh (or run bash scripts/gpu_smoke.sh --cpu without a GPU)}"
    output_root="${OUTPUT_ROOT:-$HOME/dfpo_gpu_smoke}"
    recipe=run_dfpo_min_replace_qwen3_0p6b.sh
    model_path="$MODEL_PATH"
    mode=gpu_smoke
fi
project=dfpo_gpu_smoke
data_dir="$output_root/data"
log_dir="$output_root/logs/$project"
stages=()
results=()

stage() {  # stage NAME COMMAND...: run COMMAND, record PASS/FAIL (SKIP when it exits 77) and its duration
    local name="$1" start=$SECONDS status
    shift
    echo "==== $mode: $name" >&2
    "$@"
    case $? in 0) status=PASS ;; 77) status=SKIP ;; *) status=FAIL ;; esac
    stages+=("$name")
    results+=("$status $((SECONDS - start)) s")
    echo "==== $mode: $name: $status" >&2
}

newest_log() {  # newest_log EXPERIMENT: the file log of the experiment's latest launch
    ls -t "$log_dir/$1".*.jsonl 2>/dev/null | head -n 1
}

doctor() {
    local paths=(DATA_DIR="$data_dir" OUTPUT_ROOT="$output_root" NNODES=1)
    if [[ "$cpu" == 1 ]]; then
        # the tiny model is built by the next stage; a MODEL_PATH given is checked
        [[ -z "${MODEL_PATH:-}" ]] || paths+=(MODEL_PATH="$MODEL_PATH")
        env "${paths[@]}" "$python" -m dfpo.launch.doctor --stack cpu
    else
        env "${paths[@]}" MODEL_PATH="$MODEL_PATH" "$python" -m dfpo.launch.doctor
    fi
}

data() {
    if [[ "$cpu" == 1 ]]; then  # the toy data through data_prep and the tiny model, as the CPU recipes build them
        "$python" -m cpu_examples.prepare --output-root "$output_root"
    else
        "$python" -c 'import sys; from pathlib import Path; from cpu_examples.addition_task import prepare_parquet; prepare_parquet(Path(sys.argv[1]))' "$data_dir"
    fi
}

sink_attention() {  # GPT-OSS's training attention against eager on a tiny model: forward and gradients
    # on GPUs the GPT-OSS recipe's attention on CUDA (SKIP without CUDA); --cpu: the CPU backend's packed attention
    if [[ "$cpu" == 1 ]]; then
        "$python" -m dfpo.launch.sink_attention_check --cpu
    else
        "$python" -m dfpo.launch.sink_attention_check
    fi
}

train() {  # train EXPERIMENT STEPS OLD_LOG_PROBS RANKS [hydra overrides...]; RANKS "": GPUS_PER_NODE as set
    local experiment="$1" steps="$2" old="$3" ranks="$4" log numerics=bf16 checks=()
    shift 4
    # two or more steps: each update's KL is measured (one more forward per step), and run_checks
    # tells a rollout that sampled with the previous step's weights from one an update behind
    ((steps < 2)) || { set -- "$@" actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true; checks=(--weight-sync); }
    # the recipe's LR (1e-6) moves Qwen3-0.6B too little in one step for the weight-sync check to
    # tell a rollout one update behind from bf16's own differences (it needs update_kl >= 0.05 at
    # bf16, dfpo/operations/run_checks.py); two steps at SMOKE_LR (default 1e-4) are a plumbing test, not training
    local knobs=("LR=${SMOKE_LR:-1e-4}")
    if [[ "$cpu" == 1 ]]; then
        knobs=(ROLLOUT_NAME=vllm "GPUS_PER_NODE=${ranks:-${GPUS_PER_NODE:-1}}")  # the tiny recipe's own LR (1e-3)
        numerics=fp32  # the CPU recipes run actor and vLLM in float32
    elif [[ -n "$ranks" ]]; then
        knobs+=("GPUS_PER_NODE=$ranks")
    fi
    rm -rf "$output_root/checkpoints/$project/$experiment"
    env OUTPUT_ROOT="$output_root" PROJECT_NAME="$project" EXPERIMENT_NAME="$experiment" \
        TOTAL_TRAINING_STEPS="$steps" SAVE_FREQ="$steps" TEST_FREQ="$steps" RESUME_MODE=disable \
        TRAIN_FILES="$data_dir/arithmetic_train.parquet" VAL_FILES="$data_dir/arithmetic_test.parquet" \
        MODEL_PATH="$model_path" PYTHON="$python" "${knobs[@]}" \
        bash "$repo_root/recipes/$recipe" "$@" || return 1
    log="$(newest_log "$experiment")"
    [[ -n "$log" ]] || { echo "no file log under $log_dir" >&2; return 1; }
    "$python" -m dfpo.operations.run_checks "$log" --steps "$steps" --dfpo --old-log-probs "$old" --rollout-numerics "$numerics" "${checks[@]}"
}

merge() {
    local actor="$output_root/checkpoints/$project/dfpo/global_step_2/actor"
    [[ -d "$actor" ]] || { echo "no checkpoint at $actor" >&2; return 1; }
    "$python" -m verl.model_merger merge --backend fsdp --local_dir "$actor" --target_dir "$output_root/merged" &&
        [[ -f "$output_root/merged/config.json" ]]
}

evaluate() {
    local model="$output_root/merged" backend_args=(--max-new-tokens 512 --gpu-memory-utilization 0.5)
    [[ -f "$model/config.json" ]] || { echo "no merged model: evaluating $model_path instead" >&2; model="$model_path"; }
    # on CPU: eager and float32 as the training ran (the KV cache: VLLM_CPU_KVCACHE_SPACE, else 1 GiB);
    # the tiny model answers in about 10 tokens
    [[ "$cpu" == 0 ]] || backend_args=(--max-new-tokens 16 --enforce-eager --dtype float32)
    "$python" -m evaluation.generate --model "$model" --data "$data_dir/arithmetic_test.parquet" \
        --output-dir "$output_root/eval" --backend vllm --k 2 --limit 2 "${backend_args[@]}" \
        --chat-template-kwargs '{"enable_thinking": false}' --overwrite --no-progress &&
        [[ -f "$output_root/eval/summary.json" ]]
}

mkdir -p "$data_dir"
cd "$repo_root" || exit 1
rm -rf "$output_root/merged" "$output_root/eval"
if [[ "$cpu" == 1 ]]; then
    stage "environment (python -m dfpo.launch.doctor --stack cpu)" doctor
    stage "toy data and tiny model (cpu_examples.prepare)" data
else
    stage "environment (python -m dfpo.launch.doctor)" doctor
    stage "toy data (data_prep)" data
fi
stage "GPT-OSS sink attention against eager" sink_attention
stage "train DFPO 2 steps (vLLM rollout)" train dfpo 2 recomputed ""
# no validation in the bypass step: it checks where the old log-probs come from (the 2-step stage validates)
stage "train 1 step in rollout-correction bypass mode (one rank)" train dfpo-bypass 1 rollout 1 \
    algorithm.rollout_correction.bypass_mode=true trainer.val_before_train=false trainer.test_freq=-1
stage "merge the checkpoint (verl.model_merger)" merge
stage "evaluate 2 problems (vLLM backend)" evaluate

echo
echo "$mode summary ($output_root):"
failed=0
for i in "${!stages[@]}"; do
    printf '  %-50s %s\n' "${stages[$i]}" "${results[$i]}"
    [[ "${results[$i]}" == PASS* || "${results[$i]}" == SKIP* ]] || failed=1
done
exit "$failed"
