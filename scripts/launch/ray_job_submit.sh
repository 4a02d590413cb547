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

# The recipes' knobs as exported here (every variable a recipe reads: dfpo/launch/recipe_knobs.py, the one
# list), the Hugging Face cache and dfpo.main's node-watch and preemption settings.
# (run as a file: standard library only, so any python3 on the submitting machine does)
env_json="$("${PYTHON:-python3}" "$repo_root/dfpo/launch/recipe_knobs.py" --job-runtime-env)"
entrypoint="cd $(printf '%q' "$repo_root") && bash $(printf '%q' "$recipe")"
for arg in "$@"; do
    entrypoint+=" $(printf '%q' "$arg")"
done
submission_id="${SUBMISSION_ID:-dfpo-$(basename "$recipe" .sh)-$(date -u +%Y%m%dT%H%M%SZ)}"
"${RAY:-ray}" job submit --address="$RAY_ADDRESS" --submission-id="$submission_id" --no-wait \
    --runtime-env-json="$env_json" -- bash -c "$entrypoint"
echo "dfpo: submitted $submission_id; follow it with: ray job logs --follow $submission_id" >&2
