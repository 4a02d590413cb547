"""Shared helpers for the reward tests: leftover-process checks and labelled fixtures."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest

from reward import sandbox as sandbox_module

DATA = Path(__file__).parent / "data"


def load_jsonl(name: str) -> list[dict]:
    with open(DATA / name) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _is_pool_worker(process: psutil.Process) -> bool:
    try:
        return any("math_verify_worker" in part for part in process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


_PRE_EXISTING: set[int] = set()
"""Descendants that existed before the current test started (e.g. another suite's forkserver)."""


@pytest.fixture(autouse=True)
def _record_pre_existing_processes():
    _PRE_EXISTING.clear()
    _PRE_EXISTING.update(child.pid for child in psutil.Process().children(recursive=True))
    yield


def stray_processes() -> list[str]:
    """Descendants of this test process started during the current test (other than
    math-verify pool workers) and any process still running under a sandbox uid."""
    found = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in _PRE_EXISTING:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(f"zombie {child.pid}")
            elif not _is_pool_worker(child):
                found.append(f"{child.pid} {' '.join(child.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    if os.geteuid() == 0:
        # only the uids this process leased: other processes may be scoring concurrently
        for uid in set(sandbox_module.default_sandbox().recent_uids()):
            found += [f"uid {uid}: pid {pid}" for pid in sandbox_module.processes_of_uid(uid)]
    return found


def assert_no_stray_processes(grace_s: float = 2.0) -> None:
    deadline = time.monotonic() + grace_s
    while True:
        stray = stray_processes()
        if not stray or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not stray, f"processes left behind: {stray}"


@pytest.fixture(scope="session")
def isolation_report():
    return sandbox_module.isolation()
