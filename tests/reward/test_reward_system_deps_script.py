"""scripts/install_system_deps.sh: fast no-op when installed, clear failure when it cannot install."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_system_deps.sh"
NEEDED = ("/usr/bin/bwrap", "/usr/bin/prlimit", "/usr/bin/unshare", "/usr/bin/setpriv", "/usr/bin/python3")


def test_no_op_when_everything_is_installed():
    if not all(os.access(path, os.X_OK) for path in NEEDED):
        pytest.skip("system packages not installed here; run scripts/install_system_deps.sh")
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "nothing to install" in done.stdout


def test_clear_error_when_apt_get_is_unavailable(tmp_path):
    env = {"PATH": str(tmp_path), "INSTALL_SYSTEM_DEPS_ROOT": str(tmp_path)}
    done = subprocess.run(["/bin/bash", str(SCRIPT)], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 1
    assert "missing packages: " in done.stdout and "bubblewrap" in done.stdout
    assert "apt-get is not available" in done.stderr and "reward.sandbox --check" in done.stderr
