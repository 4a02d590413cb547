"""Run a probe script in a fresh interpreter with a changed environment and read its JSON answer.

A backend's activation happens at import (dfpo's verl and vLLM plugins read ``VERL_PLATFORM``), so
what it does in a process is seen only from a process started with that environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_probe(code: str, env_update: dict[str, str], drop: tuple[str, ...] = ()) -> dict:
    """The JSON object ``code`` prints last, run by this interpreter with ``env_update`` set and ``drop`` unset."""
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env.update(env_update)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
