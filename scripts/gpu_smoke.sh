#!/usr/bin/env bash
# The first command to run on a new GPU node (one GPU is enough): checks the environment, trains
# DFPO for 2 steps through vLLM, repeats one step in verl's rollout-correction bypass mode, merges the
# checkpoint and evaluates it with the vLLM backend on 2 problems; prints PASS/FAIL per stage and
# exits 1 if any failed. About 10 minutes on one H100/H200 once the model is on disk.
#
#   MODEL_PATH=/path/to/Qwen3-0.6B bash scripts/gpu_smoke.sh
#
# MODEL_PATH: a local Qwen3-0.6B checkpoint (hf download Qwen/Qwen3-0.6B --local-dir ...).
# OUTPUT_ROOT (default ~/dfpo_gpu_smoke): data, checkpoints, logs and the evaluation go there; each
# run starts afresh. PYTHON: the GPU environment's interpreter (default python3). The task is the
# toy arithmetic set of the CPU recipes (built by data_prep, no download); the training run is
# recipes/run_dfpo_min_replace_qwen3_0p6b.sh. What it verifies that no CPU test can: docs/recipes.md,
# "What to verify on the first GPU run".
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
: "${MODEL_PATH:?set MODEL_PATH to a local Qwen3-0.6B checkpoint directory, e.g. MODEL_PATH=\$HOME/models/Qwen3-0.6B bash scripts/gpu_smoke.sh}"
output_root="${OUTPUT_ROOT:-$HOME/dfpo_gpu_smoke}"
project=dfpo_gpu_smoke
data_dir="$output_root/data"
log_dir="$output_root/logs/$project"
stages=()
results=()

stage() {  # stage NAME COMMAND...: run COMMAND, record PASS/FAIL and its duration
    local name="$1" start=$SECONDS status
    shift
    echo "==== gpu_smoke: $name" >&2
    if "$@"; then status=PASS; else status=FAIL; fi
    stages+=("$name")
    results+=("$status $((SECONDS - start)) s")
    echo "==== gpu_smoke: $name: $status" >&2
}

newest_log() {  # newest_log EXPERIMENT: the file log of the experiment's latest launch
    ls -t "$log_dir/$1".*.jsonl 2>/dev/null | head -n 1
}

train() {  # train EXPERIMENT STEPS OLD_LOG_PROBS [hydra overrides...]
    local experiment="$1" steps="$2" old="$3" log
    shift 3
    rm -rf "$output_root/checkpoints/$project/$experiment"
    OUTPUT_ROOT="$output_root" PROJECT_NAME="$project" EXPERIMENT_NAME="$experiment" \
        TOTAL_TRAINING_STEPS="$steps" SAVE_FREQ="$steps" TEST_FREQ="$steps" RESUME_MODE=disable \
        TRAIN_FILES="$data_dir/arithmetic_train.parquet" VAL_FILES="$data_dir/arithmetic_test.parquet" \
        MODEL_PATH="$MODEL_PATH" PYTHON="$python" \
        bash "$repo_root/recipes/run_dfpo_min_replace_qwen3_0p6b.sh" "$@" || return 1
    log="$(newest_log "$experiment")"
    [[ -n "$log" ]] || { echo "no file log under $log_dir" >&2; return 1; }
    "$python" -m dfpo.run_checks "$log" --steps "$steps" --dfpo --old-log-probs "$old"
}

merge() {
    local actor="$output_root/checkpoints/$project/dfpo/global_step_2/actor"
    [[ -d "$actor" ]] || { echo "no checkpoint at $actor" >&2; return 1; }
    "$python" -m verl.model_merger merge --backend fsdp --local_dir "$actor" --target_dir "$output_root/merged" &&
        [[ -f "$output_root/merged/config.json" ]]
}

evaluate() {
    local model="$output_root/merged"
    [[ -f "$model/config.json" ]] || { echo "no merged model: evaluating MODEL_PATH instead" >&2; model="$MODEL_PATH"; }
    "$python" -m dfpo.evaluation.generate --model "$model" --data "$data_dir/arithmetic_test.parquet" \
        --output-dir "$output_root/eval" --backend vllm --k 2 --limit 2 --max-new-tokens 512 \
        --chat-template-kwargs '{"enable_thinking": false}' --gpu-memory-utilization 0.5 --overwrite --no-progress &&
        [[ -f "$output_root/eval/summary.json" ]]
}

mkdir -p "$output_root"
cd "$repo_root" || exit 1
rm -rf "$output_root/merged" "$output_root/eval"
stage "environment (python -m dfpo.doctor)" env MODEL_PATH="$MODEL_PATH" DATA_DIR="$data_dir" OUTPUT_ROOT="$output_root" NNODES=1 \
    "$python" -m dfpo.doctor
stage "toy data (data_prep)" "$python" -c 'import sys; from pathlib import Path; from dfpo.local.toy_task import prepare_parquet; prepare_parquet(Path(sys.argv[1]))' "$data_dir"
stage "train DFPO 2 steps (vLLM rollout)" train dfpo 2 recomputed
stage "train 1 step in rollout-correction bypass mode" train dfpo-bypass 1 rollout algorithm.rollout_correction.bypass_mode=true
stage "merge the checkpoint (verl.model_merger)" merge
stage "evaluate 2 problems (vLLM backend)" evaluate

echo
echo "gpu_smoke summary ($output_root):"
failed=0
for i in "${!stages[@]}"; do
    printf '  %-50s %s\n' "${stages[$i]}" "${results[$i]}"
    [[ "${results[$i]}" == PASS* ]] || failed=1
done
exit "$failed"
