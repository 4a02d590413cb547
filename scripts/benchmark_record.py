"""What every benchmark's results file records beside its numbers: when, where, on what.

``scripts/bench_*.py`` write ``benchmarks/results/<name>-<UTC time>-<cpu capability>.json`` with
:func:`environment` under ``"environment"``; the docs quote those files.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"


def environment() -> dict:
    """The machine, the date, the commit and the stack's versions."""
    import torch
    import transformers

    from dfpo.verl.version import installed_version

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.splitlines()
    # results files written by earlier runs of a series are not a change of the code measured
    dirty = any(not line[3:].startswith("benchmarks/results/") for line in status if line.strip())
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model_name = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor()
    )
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu": model_name,
        "cores": len(os.sched_getaffinity(0)),
        "load_average": list(os.getloadavg()),
        "commit": commit + ("+uncommitted" if dirty else ""),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "verl": installed_version("verl"),
        "vllm": installed_version("vllm"),
    }


def mean(values: list[float]) -> float:
    """The mean of ``values`` to 0.1, as the benchmarks' summaries give seconds."""
    return round(sum(values) / len(values), 1)


def import_seconds(python: Path, repeats: int = 2) -> float:
    """Mean seconds of ``import verl, vllm`` in a new process of ``python``, no .pyc written (as
    where ``PYTHONDONTWRITEBYTECODE`` is set): what every process of a launch (Ray's actors, vLLM's
    EngineCore and Worker) pays again, so also a measure of how fast the machine runs a launch."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        subprocess.run([str(python), "-c", "import verl, vllm"], env=env, capture_output=True, check=True)
        times.append(time.monotonic() - started)
    return mean(times)


def write_result(name: str, capability: str, result: dict) -> Path:
    """``benchmarks/results/<name>-<UTC time>-<capability>.json``; returns its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M")
    path = RESULTS / f"{name}-{stamp}-{capability.lower()}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
