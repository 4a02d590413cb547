"""Running a script in a fresh interpreter and reading the one JSON report it prints.

The vLLM tests build vLLM's model or engine in a subprocess (vLLM's global state, its plugins and
its platform are per process). The script prints ``REPORT <json>`` as its last report line;
:func:`run_reporting` returns that JSON, and on failure shows the ends of the script's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPORT_PREFIX = "REPORT "


def run_reporting(script: Path, args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 600) -> dict:
    """``python script *args`` with ``env`` over this environment; the JSON of its last report line."""
    result = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(REPORT_PREFIX)]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-6000:]
    return json.loads(lines[-1].removeprefix(REPORT_PREFIX))
