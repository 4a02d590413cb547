#!/usr/bin/env bash
# Set up (once) and activate the project's CPU environment. Source it:  source scripts/setup_env.sh
#   - creates .venv with Python 3.11 if missing (the CPU torch wheel is for 3.11)
#   - installs torch==2.13.0 first (an unpinned torch would pull a multi-GB CUDA build), then the
#     pinned requirements-cpu.txt, requirements-test-oracle.txt (--no-deps: LiveCodeBench's evaluator,
#     the reward tests' oracle) and this project in editable mode (registers the verl plugin)
#   - installs the Debian packages the reward sandbox needs (scripts/install_system_deps.sh)
# Re-running is cheap: installs are skipped while the requirements files and pyproject.toml are unchanged.
_dfpo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_dfpo_setup() {
  set -e
  cd "$_dfpo_root"
  local py
  py="$(command -v python3.11 || command -v python3)"
  if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv with $py"
    "$py" -m venv .venv
  fi
  local stamp=.venv/.dfpo-installed want
  want="$(cat requirements-cpu.txt requirements-test-oracle.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "[setup] installing pinned CPU requirements into .venv (a few minutes on a fresh machine)"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q torch==2.13.0
    .venv/bin/python -m pip install -q -r requirements-cpu.txt
    .venv/bin/python -m pip install -q --no-deps -r requirements-test-oracle.txt  # LiveCodeBench's evaluator, for tests
    .venv/bin/python -m pip install -q --no-deps -e .
    echo "$want" > "$stamp"
  fi
  if [ -f scripts/install_system_deps.sh ]; then
    bash scripts/install_system_deps.sh
  fi
}
( _dfpo_setup ) || { echo "[setup] failed; see the messages above" >&2; return 1 2>/dev/null || exit 1; }
# shellcheck disable=SC1091
source "$_dfpo_root/.venv/bin/activate"
