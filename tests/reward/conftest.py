"""Shared helpers for the reward tests: leftover-process checks and labelled fixtures."""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from reward import math_verify_pool
from reward import sandbox as sandbox_module
from reward.sandbox.uids import is_leased

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


def _in_spare_sandbox(process: psutil.Process, spares: set[int]) -> bool:
    """Whether the process is a sandbox launched ahead (waiting for its problem) or inside one."""
    try:
        return process.pid in spares or any(parent.pid in spares for parent in process.parents())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def stray_processes() -> list[str]:
    """Descendants of this test process started during the current test (other than
    math-verify pool workers and sandboxes launched ahead) and any process still running
    under a sandbox uid."""
    found = []
    spares = set(sandbox_module.spare_pids())
    for child in psutil.Process().children(recursive=True):
        if child.pid in _PRE_EXISTING or _in_spare_sandbox(child, spares):
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(f"zombie {child.pid}")
            elif not _is_pool_worker(child):
                found.append(f"{child.pid} {' '.join(child.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    if os.geteuid() == 0:
        # only the uids this process leased and no process leases now: other processes may be
        # scoring concurrently, e.g. a test on another pytest-xdist worker (scripts/test.sh), and
        # spares of any Sandbox here may hold a uid that this one used before
        for uid in set(sandbox_module.default_sandbox().recent_uids()) - sandbox_module.spare_uids():
            if not is_leased(uid):
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


def sandbox_dirs() -> set[str]:
    """This process's sandbox working directories, other than those of sandboxes launched ahead."""
    mine = glob.glob(os.path.join(tempfile.gettempdir(), f"reward-sandbox-{os.getpid()}-*"))
    return set(mine) - set(sandbox_module.spare_workdirs())


def assert_no_new_sandbox_dirs(before: set[str], grace_s: float = 2.0) -> None:
    deadline = time.monotonic() + grace_s
    while (left := sandbox_dirs() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"sandbox directories left behind: {sorted(left)}"


@pytest.fixture
def own_math_pool(monkeypatch):
    """The test gets a process-wide math-verify pool of its own, closed after it: the extra workers
    a burst of callers starts (up to ``max_size``, retiring only after ``RETIRE_IDLE_S``) never
    reach another test, and a test never sees what an earlier one left in the pool."""
    monkeypatch.setattr(math_verify_pool, "_default_pool", None)
    yield
    pool = math_verify_pool._default_pool
    if pool is not None and math_verify_pool._default_pool_pid == os.getpid():
        pool.close()


@pytest.fixture(scope="session")
def isolation_report():
    return sandbox_module.isolation()
