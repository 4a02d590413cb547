#!/usr/bin/env bash
# Set up (once) and activate the project's CPU environment. Source it:  source scripts/setup_env.sh
#   - creates .venv with Python 3.11 and installs the pinned CPU stack, the GPU stack's versions
#     (torch 2.11.0, vLLM 0.24.0 as its CPU build, transformers 5.9.0, verl 0.9.1, Ray 2.60.0), and
#     this project (scripts/install_env.sh; the steps are listed there)
#   - installs the Debian packages the reward sandbox and the tests need (scripts/install_system_deps.sh:
#     bubblewrap, util-linux, shellcheck, and SLURM with munge for the template's real-scheduler test)
# Re-running is cheap: installs are skipped while the requirements files and pyproject.toml are unchanged.
_dfpo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_dfpo_setup() {
  bash "$_dfpo_root/scripts/install_env.sh" || return 1
  if [ -f "$_dfpo_root/scripts/install_system_deps.sh" ]; then
    bash "$_dfpo_root/scripts/install_system_deps.sh" || return 1
  fi
}
_dfpo_setup || { echo "[setup] failed; see the messages above" >&2; return 1 2>/dev/null || exit 1; }
# shellcheck disable=SC1091
source "$_dfpo_root/.venv/bin/activate"
