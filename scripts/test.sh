#!/usr/bin/env bash
# The project's test command: sets up .venv on a fresh machine (scripts/setup_env.sh), then runs the
# whole CPU test suite in two parts (docs/cpu.md, "Tests"):
#   1. every test not marked `serial`, on up to 4 pytest-xdist workers (one per core), a module per
#      worker at a time (its module-wide fixtures built once);
#   2. the tests marked `serial`, one at a time: those that need the machine to themselves (training
#      through verl's trainer, Ray and vLLM, and the tests that time a limit under load).
# Both parts run; the command fails if either does. Extra arguments go to one plain pytest run instead,
# e.g.  bash scripts/test.sh tests/dfpo -x   or the fast tier:  bash scripts/test.sh -m "not slow"
# DFPO_TEST_JUNIT_DIR=DIR: each part also writes a JUnit report there (scripts/record_ci_run.py reads them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false RAY_DEDUP_LOGS=0

junit() {  # junit NAME: sets `report` to pytest's option for a JUnit report NAME.xml under DFPO_TEST_JUNIT_DIR, if set
    report=()
    [[ -z "${DFPO_TEST_JUNIT_DIR:-}" ]] || report=("--junitxml=$DFPO_TEST_JUNIT_DIR/$1.xml")
}

if (($#)); then
    junit pytest
    exec python -m pytest -q -ra --durations=15 "${report[@]}" "$@"
fi
status=0
echo "[test] part 1/2: the tests not marked serial, on parallel workers"
junit parallel
python -m pytest -q -ra --durations=15 -n auto --maxprocesses 4 --dist loadfile -m "not serial" "${report[@]}" tests || status=$?
echo "[test] part 2/2: the tests marked serial, one at a time"
junit serial
python -m pytest -q -ra --durations=15 -m serial "${report[@]}" tests || status=$((status ? status : $?))
if ((status)); then
    echo "[test] FAILED: part 1 or 2 above did not pass (exit status $status)" >&2
fi
exit "$status"
