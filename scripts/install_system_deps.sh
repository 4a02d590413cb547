#!/usr/bin/env bash
# Install the system packages the code-reward sandbox and the tests use (Debian/Ubuntu), idempotently.
#
#   bubblewrap  -> /usr/bin/bwrap            (strongest isolation level, see reward/sandbox/)
#   util-linux  -> prlimit, unshare, setpriv (resource limits; the "unshare" fallback level),
#                  setsid (scripts/launch/ray_cluster.sh starts Ray in a session of its own)
#   python3     -> /usr/bin/python3          (an interpreter the unprivileged sandbox user can run)
#   shellcheck  -> /usr/bin/shellcheck       (tests/recipes/test_launch_multi_node.py lints scripts/launch/)
#   slurmctld, slurmd, slurm-client, munge -> /usr/sbin/slurmctld, /usr/sbin/slurmd, /usr/bin/sbatch,
#                  /usr/sbin/munged (tests/e2e/test_slurm_cpu.py runs the sbatch template under a
#                  real one-node SLURM that the test suite starts and stops)
#
# Fast when everything is present (no apt call at all). Works as root without sudo; uses sudo
# when not root and sudo is available. Exits non-zero with a clear message when something is
# missing and cannot be installed (no apt-get, no privileges, no package index). The sandbox
# still falls back to the strongest level that works; check with:
#   python -m reward.sandbox --check
set -euo pipefail

# Tests point this at an empty directory to exercise the "missing" paths; normally empty.
ROOT="${INSTALL_SYSTEM_DEPS_ROOT:-}"

declare -A PACKAGE_FOR=(
  [/usr/bin/bwrap]=bubblewrap
  [/usr/bin/prlimit]=util-linux
  [/usr/bin/unshare]=util-linux
  [/usr/bin/setpriv]=util-linux
  [/usr/bin/python3]=python3-minimal
  [/usr/bin/setsid]=util-linux
  [/usr/bin/shellcheck]=shellcheck
  [/usr/sbin/slurmctld]=slurmctld
  [/usr/sbin/slurmd]=slurmd
  [/usr/bin/sbatch]=slurm-client
  [/usr/sbin/munged]=munge
)

missing_packages=()
for path in "${!PACKAGE_FOR[@]}"; do
  if [[ ! -x "$ROOT$path" ]]; then
    package="${PACKAGE_FOR[$path]}"
    if [[ ! " ${missing_packages[*]-} " =~ " ${package} " ]]; then
      missing_packages+=("$package")
    fi
  fi
done

if [[ ${#missing_packages[@]} -eq 0 ]]; then
  echo "install_system_deps: nothing to install (bwrap, prlimit, unshare, setpriv, setsid, python3, shellcheck, slurm, munge present)"
  exit 0
fi

echo "install_system_deps: missing packages: ${missing_packages[*]}"

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: ERROR: apt-get is not available on this system; install ${missing_packages[*]}" \
       "with your package manager (the sandbox falls back to a weaker isolation level meanwhile;" \
       "see: python -m reward.sandbox --check)" >&2
  exit 1
fi

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "install_system_deps: ERROR: installing ${missing_packages[*]} needs root (or passwordless sudo)." \
       "Ask an administrator to run: apt-get install -y ${missing_packages[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing_packages[@]}" >/tmp/install_system_deps.log 2>&1; then
  echo "install_system_deps: package index may be stale; running apt-get update"
  if ! { "${SUDO[@]}" apt-get update >>/tmp/install_system_deps.log 2>&1 &&
         "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing_packages[@]}" >>/tmp/install_system_deps.log 2>&1; }; then
    echo "install_system_deps: ERROR: apt-get could not install ${missing_packages[*]}; last lines of the log:" >&2
    tail -n 15 /tmp/install_system_deps.log >&2
    exit 1
  fi
fi

for path in "${!PACKAGE_FOR[@]}"; do
  if [[ ! -x "$ROOT$path" ]]; then
    echo "install_system_deps: ERROR: $ROOT$path is still missing after installing ${missing_packages[*]}" >&2
    exit 1
  fi
done
echo "install_system_deps: installed ${missing_packages[*]}"
