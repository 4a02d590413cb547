"""tests/disk_space.py: the test session refuses to start on a disk without room for its runs, and
says where the disk stood at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.disk_space import GB, MIN_FREE_GB, refusal
from tests.e2e.recipe_runs import REPO_ROOT

ONE_TEST = "tests/quickstart/test_sums_task.py::test_split_is_stratified_by_the_answer"


def test_refusal_names_the_directory_what_is_free_and_what_to_do():
    directory = Path("/scratch/pytest-of-ci/pytest-7")
    message = refusal(directory, int(1.25 * GB), MIN_FREE_GB)
    assert message is not None and str(directory) in message and "only 1.2 GB free" in message
    for remedy in ("--basetemp", "TMPDIR", "DFPO_TEST_MIN_FREE_GB=0"):
        assert remedy in message
    assert refusal(directory, int(MIN_FREE_GB * GB), MIN_FREE_GB) is None
    assert refusal(directory, int(MIN_FREE_GB * GB) - 1, MIN_FREE_GB) is not None


def _session(floor: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFPO_TEST_MIN_FREE_GB": floor}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", ONE_TEST],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_session_without_room_stops_before_its_first_test_and_says_why():
    stopped = _session("1e9")  # a billion GB: no disk has it
    assert stopped.returncode == 4, stopped.stdout[-2000:]
    assert "where the tests write their runs" in stopped.stdout + stopped.stderr
    assert "1 passed" not in stopped.stdout


def test_a_session_ends_with_its_disk_line():
    ran = _session("0")
    assert ran.returncode == 0, ran.stdout[-2000:]
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("disk: ")]
    assert line.startswith("disk: ") and "the session used up to" in line


def test_under_xdist_the_controller_samples_each_report_and_ends_with_the_line():
    """scripts/test.sh's parallel part: the tests run in pytest-xdist's workers, so the controller
    samples as their reports arrive, and the session still ends with its one line."""
    from types import SimpleNamespace

    from tests.disk_space import DiskWatch, _ReportSampler

    watch = DiskWatch(REPO_ROOT, start=10**18, lowest=10**18)  # more than any disk: the first sample is the lowest
    _ReportSampler(watch).pytest_runtest_logreport(SimpleNamespace(when="call", nodeid="tests/x.py::test_y"))
    assert watch.lowest < 10**18 and watch.lowest_at == "the call of tests/x.py::test_y"
    env = {**os.environ, "DFPO_TEST_MIN_FREE_GB": "0"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", ONE_TEST],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:]
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("disk: ")]
    assert "the session used up to" in line
