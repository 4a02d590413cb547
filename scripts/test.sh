#!/usr/bin/env bash
# The project's test command: sets up .venv on a fresh machine (scripts/setup_env.sh), then runs the
# whole CPU test suite. Extra arguments go to pytest, e.g.  bash scripts/test.sh tests/dfpo -x
# The fast tier (every test not marked slow; docs/cpu.md "Running the tests"): bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false RAY_DEDUP_LOGS=0
python -m pytest -q -ra --durations=15 "${@:-tests}"
