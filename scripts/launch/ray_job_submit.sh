#!/usr/bin/env bash
# Submit one DFPO recipe to a running Ray cluster with `ray job submit` (as verl's own examples do):
# the recipe runs on the head node as the job's entrypoint, with the knobs you exported passed in
# the job's runtime environment. The repository, the GPU environment, the model, the data and
# OUTPUT_ROOT must be at the same paths on every node (shared storage).
#
#   RAY_ADDRESS=http://<head-ip>:8265 NNODES=4 MODEL_PATH=/shared/models/Qwen3-32B OUTPUT_ROOT=/shared/dfpo_runs \
#       bash scripts/launch/ray_job_submit.sh recipes/run_dfpo_min_replace_qwen3_32b.sh [hydra overrides...]
#
# Follow it with `ray job logs --follow <submission id>`; stop it with `ray job stop <id>`.
set -euo pipefail
[[ $# -ge 1 && -f "$1" ]] || { echo "usage: RAY_ADDRESS=http://<head>:8265 bash scripts/launch/ray_job_submit.sh recipes/run_<method>_<model>.sh [hydra overrides...]" >&2; exit 2; }
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray dashboard of the head node, e.g. http://<head-ip>:8265}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
recipe="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift

# the recipe's knobs (docs/recipes.md, "Knobs") and the Hugging Face cache, as exported here
knob_pattern='^(MODEL_PATH|DATA_DIR|TRAIN_FILES|VAL_FILES|NNODES|GPUS_PER_NODE|GROUP_SIZE|TRAIN_BATCH_SIZE|PPO_.*|TOTAL_.*|LR|LR_WARMUP_STEPS|WEIGHT_DECAY|GRAD_CLIP|MAX_.*|TEMPERATURE|TOP_P|TOP_K|VAL_.*|SP_SIZE|USE_.*|LOG_PROB_.*|PARAM_OFFLOAD|OPTIMIZER_OFFLOAD|FSDP_SIZE|ACTOR_.*|GRADIENT_CHECKPOINTING|ROLLOUT_.*|GPU_MEMORY_UTILIZATION|KL_LOSS_COEF|ENTROPY_COEFF|REWARD_.*|CODE_BACKEND|SANDBOX_FUSION_URL|SEED|PROJECT_NAME|EXPERIMENT_NAME|OUTPUT_ROOT|CKPT_DIR|LOG_DIR|LOGGER|SAVE_FREQ|TEST_FREQ|VAL_BEFORE_TRAIN|RESUME_MODE|ALLOW_LOCAL_CHECKPOINTS|PYTHON|GPT_OSS_.*|HF_HOME|HF_HUB_OFFLINE)$'
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
exec "${RAY:-ray}" job submit --address="$RAY_ADDRESS" --no-wait --runtime-env-json="$env_json" -- bash -c "$entrypoint"
