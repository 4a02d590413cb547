#!/usr/bin/env bash
# The learning tax on a CPU in a few minutes: the README's second example (docs/cpu.md).
#   bash scripts/demo.sh                 # default run (about 1-3 minutes on 2 cores after set-up)
#   bash scripts/demo.sh --help          # every option; e.g. --seed 3, --optimizer adamw, --out DIR
# On a fresh machine scripts/setup_env.sh first creates .venv and installs the pinned CPU
# requirements and this project (a few minutes, once). Writes a table to the terminal and
# outputs/demo/learning_tax_demo.{png,json} (paths printed at the end).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck disable=SC1091
source scripts/setup_env.sh
python -m demo "$@"
