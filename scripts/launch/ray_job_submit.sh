#!/usr/bin/env bash
# Submit one DFPO recipe to a running Ray cluster with `ray job submit` (as verl's own examples do):
# the recipe runs on the head node as the job's entrypoint, with the knobs you exported passed in
# the job's runtime environment. The repository, the environment with dfpo installed, the model,
# the data and OUTPUT_ROOT must be at the same paths on every node (shared storage).
#
#   export RAY_AUTH_MODE=token                       # the cluster's token file: ~/.ray/auth_token or RAY_AUTH_TOKEN_PATH
#   RAY_ADDRESS=http://<head-ip>:8265 NNODES=4 MODEL_PATH=/shared/models/Qwen3-32B OUTPUT_ROOT=/shared/dfpo_runs \
#       bash scripts/launch/ray_job_submit.sh recipes/run_dfpo_min_replace_qwen3_32b.sh [hydra overrides...]
#
# It prints the job's submission id (SUBMISSION_ID, default dfpo-<recipe>-<UTC time>); follow the
# job with `ray job logs --follow <id>`, check it with `ray job status <id>`, stop it with
# `ray job stop <id>` (the same RAY_ADDRESS and RAY_AUTH_MODE exported).
#
# Token authentication (Ray 2.60; scripts/launch/ray_cluster.sh starts clusters with it) is assumed
# unless RAY_AUTH_MODE=disabled: the client sends the token of RAY_AUTH_TOKEN_PATH (default
# ~/.ray/auth_token) to the dashboard. The job itself inherits the head's authentication settings.
set -euo pipefail
[[ $# -ge 1 && -f "$1" ]] || { echo "usage: RAY_ADDRESS=http://<head>:8265 bash scripts/launch/ray_job_submit.sh recipes/run_<method>_<model>.sh [hydra overrides...]" >&2; exit 2; }
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray dashboard of the head node, e.g. http://<head-ip>:8265}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
recipe="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
if [[ "$RAY_AUTH_MODE" == token ]]; then
    token_file="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
    if [[ -z "${RAY_AUTH_TOKEN:-}" && ! -s "$token_file" ]]; then
        echo "dfpo ray_job_submit error: no Ray token file at $token_file: copy the head's token file here (scp -p <head>:~/.ray/auth_token $token_file && chmod 600 $token_file) or export RAY_AUTH_TOKEN_PATH=<the cluster's token file>; RAY_AUTH_MODE=disabled for a cluster without token authentication" >&2
        exit 1
    fi
fi

# The recipes' knobs (docs/recipes.md, "Knobs": every variable recipes/common.sh and the model
# files read), the Hugging Face cache and dfpo.main's node-watch period, as exported here.
knob_pattern='^(MODEL_PATH|DATA_DIR|TRAIN_FILES|VAL_FILES|NNODES|GPUS_PER_NODE|GROUP_SIZE|TRAIN_BATCH_SIZE|PPO_.*|TOTAL_.*|LR|LR_WARMUP_STEPS|WEIGHT_DECAY|GRAD_CLIP|MAX_.*|TEMPERATURE|TOP_P|TOP_K|VAL_.*|SP_SIZE|USE_.*|LOG_PROB_.*|PARAM_OFFLOAD|OPTIMIZER_OFFLOAD|FSDP_SIZE|ACTOR_.*|GRADIENT_CHECKPOINTING|ENTROPY_.*|ROLLOUT_.*|GPU_MEMORY_.*|KL_LOSS_COEF|REWARD_.*|CODE_BACKEND|SANDBOX_FUSION_URL|SEED|PROJECT_NAME|EXPERIMENT_NAME|OUTPUT_ROOT|CKPT_DIR|LOG_DIR|LOGGER|SAVE_FREQ|TEST_FREQ|VAL_BEFORE_TRAIN|RESUME_MODE|ALLOW_LOCAL_CHECKPOINTS|TRAINER_MODE|CHECKPOINT_ENGINE|WEIGHT_BUCKET_MB|VLLM_KV_CACHE_GB|VLLM_BLOCK_SIZE|VLLM_CPU_OMP_THREADS_BIND|RAY_OBJECT_STORE_BYTES|CPU_THREADS_PER_RANK|RAY_DEDUP_LOGS|PYTHON|GPT_OSS_.*|HF_HOME|HF_HUB_OFFLINE|DFPO_NODE_WATCH_S|DFPO_PREEMPT_GRACE_S)$'
env_json="$("${PYTHON:-python3}" - "$knob_pattern" <<'PY'
import json, os, re, sys
pattern = re.compile(sys.argv[1])
print(json.dumps({"env_vars": {k: v for k, v in sorted(os.environ.items()) if pattern.match(k)}}))
PY
)"
entrypoint="cd $(printf '%q' "$repo_root") && bash $(printf '%q' "$recipe")"
for arg in "$@"; do
    entrypoint+=" $(printf '%q' "$arg")"
done
submission_id="${SUBMISSION_ID:-dfpo-$(basename "$recipe" .sh)-$(date -u +%Y%m%dT%H%M%SZ)}"
"${RAY:-ray}" job submit --address="$RAY_ADDRESS" --submission-id="$submission_id" --no-wait \
    --runtime-env-json="$env_json" -- bash -c "$entrypoint"
echo "dfpo: submitted $submission_id; follow it with: ray job logs --follow $submission_id" >&2
