#!/usr/bin/env bash
# The main job on a CPU, the README's first command: DFPO (Min-Replace) and GSPO trained for a few
# steps each through `python -m dfpo.main` and verl's whole trainer (2 CPU ranks, a tiny model and a
# toy task built in code), both evaluated, and the mini report table printed.
#   bash scripts/quickstart.sh                       # about 5 minutes on 2 cores after set-up
#   bash scripts/quickstart.sh --steps 10 --k 16     # options: python -m dfpo.local.quickstart --help
# On a fresh machine scripts/setup_env.sh first creates .venv and installs the pinned CPU
# requirements and this project (a few minutes, once). Writes under outputs/quickstart (or
# OUTPUT_ROOT): logs/, checkpoints/, models/, data/, merged/, evals/ and report/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck disable=SC1091
source scripts/setup_env.sh
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python -m dfpo.local.quickstart "$@"
