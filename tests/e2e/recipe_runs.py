"""Running a CPU recipe as a user would, with a hard time limit, and reading what it wrote.

A recipe starts verl's driver, which starts a local Ray cluster (GCS, raylet, workers) whose
processes may outlive a killed driver. :func:`run_recipe` records every descendant of the
launched shell while it runs and, when it ends or times out, ends the ones still alive by their
process ids (never by name: other Ray jobs on the machine are left alone).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RecipeRun:
    returncode: int
    output: str
    seconds: float

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def _end_processes(pids: set[int]) -> None:
    alive = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            process.send_signal(signal.SIGTERM)
            alive.append(process)
        except psutil.Error:
            continue
    _, still_alive = psutil.wait_procs(alive, timeout=10)
    for process in still_alive:
        try:
            process.kill()
        except psutil.Error:
            pass


def run_recipe(
    script: str,
    env: dict[str, str],
    args: tuple[str, ...] = (),
    timeout_s: float = 600.0,
    on_start: Callable[[int], None] | None = None,
) -> RecipeRun:
    """``bash recipes/<script> args...``: see :func:`run_command`."""
    return run_command(["bash", str(REPO_ROOT / "recipes" / script), *args], env, timeout_s, on_start)


def run_command(
    argv: list[str], env: dict[str, str], timeout_s: float = 600.0, on_start: Callable[[int], None] | None = None
) -> RecipeRun:
    """``argv`` in the repository root with ``env`` added to this environment; returns its exit
    status and combined output (``on_start(pid)`` once it runs). Raises ``TimeoutError`` (with the
    output's tail) past ``timeout_s``."""
    script = " ".join(argv[:2])
    # RAY_ADDRESS=local: a Ray of the run's own unless ``env`` names a cluster. Without it, ray.init()
    # joins the cluster /tmp/ray/ray_current_cluster names (the last `ray start` on the machine, even
    # one that has stopped)
    environment = {**os.environ, "PYTHON": sys.executable, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": "local", **env}
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if on_start is not None:
        on_start(process.pid)
    descendants: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        root = psutil.Process(process.pid)
        while not stop.is_set():
            try:
                descendants.update(child.pid for child in root.children(recursive=True))
            except psutil.Error:
                return
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as expired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise TimeoutError(
            f"{script} did not finish within {timeout_s:.0f} s; last output:\n" + "\n".join(output.splitlines()[-60:])
        ) from expired
    finally:
        stop.set()
        watcher.join(timeout=5)
        _end_processes(descendants)
    return RecipeRun(process.returncode, output, time.monotonic() - started)


def file_log_steps(log_dir: Path) -> dict[Path, dict[int, dict]]:
    """Every verl file log (``*.jsonl``) under ``log_dir``: {path: {step: metrics}}."""
    logs = {}
    for path in sorted(log_dir.glob("*.jsonl")):
        steps = {}
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                steps[int(record["step"])] = record["data"]
        logs[path] = steps
    return logs
