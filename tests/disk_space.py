"""The test session's disk: checked before the first test, followed through the session, reported
at the end.

The suite writes its runs under pytest's temporary directory (the quickstart's output root, with
its converted model, checkpoints and validation dumps, is the largest) and Ray's, vLLM's and
torch's files under the system's temporary directory. On a disk that fills up midway, every later
test fails at set-up with ``No space left on device`` and the report shows hundreds of errors and
no cause. So:

- the session refuses to start with less than :data:`MIN_FREE_GB` free where pytest writes, and
  says which directory, how much is free and what to do (``DFPO_TEST_MIN_FREE_GB`` sets another
  floor, e.g. 0 to run anyway);
- the free space is read at every test's set-up and teardown (one ``statvfs`` each, before the
  fixtures' own; under pytest-xdist, whose workers run the tests, the controller reads it as each
  phase's report arrives), and the terminal summary ends with one line: free at the start, at the lowest
  (and where) and at the end, and the most the
  session used, the start less the lowest (everything else writing to that disk meanwhile
  included). ``scripts/record_ci_run.py`` keeps that line's figures in its record (``disk``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

# The most a whole run of the suite used on a 2-core CI machine (the newest ci_run record's
# disk.used_peak_gb; tests/test_ci_record.py checks the floor stays above every recorded one) with room for the
# system's own temporary files.
MIN_FREE_GB = 4.0
GB = 1e9


@dataclass
class DiskWatch:
    directory: Path
    start: int
    lowest: int
    lowest_at: str = "the start"

    def free(self) -> int:
        """Free bytes on the directory's disk (read on its nearest existing folder: a passing
        session's temporary directory is removed before the summary)."""
        directory = self.directory
        while not directory.exists():
            directory = directory.parent
        return shutil.disk_usage(directory).free

    def sample(self, where: str) -> None:
        free = self.free()
        if free < self.lowest:
            self.lowest, self.lowest_at = free, where

    def summary(self) -> str:
        end = self.free()
        return (
            f"disk: {self.start / GB:.1f} GB free under {self.directory} at the start, {self.lowest / GB:.1f} GB at "
            "the lowest "
            f"(at {self.lowest_at}), {end / GB:.1f} GB at the end: the session used up to "
            f"{(self.start - self.lowest) / GB:.1f} GB"
        )


def min_free_gb() -> float:
    text = os.environ.get("DFPO_TEST_MIN_FREE_GB", str(MIN_FREE_GB))
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(f"DFPO_TEST_MIN_FREE_GB must be a number of GB, e.g. 4 or 0; got {text!r}") from None


def refusal(directory: Path, free: int, floor_gb: float) -> str | None:
    """Why the session must not start with ``free`` bytes under ``directory``, or None."""
    if free >= floor_gb * GB:
        return None
    return (
        f"only {free / GB:.1f} GB free under {directory}, where the tests write their runs; the suite needs about "
        f"{floor_gb:g} GB there (tests/disk_space.py). Free space on that disk, or point pytest elsewhere "
        f"(--basetemp DIR or TMPDIR=DIR), or set DFPO_TEST_MIN_FREE_GB=0 to run anyway"
    )


_WATCH = pytest.StashKey[DiskWatch]()


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or getattr(config, "workerinput", None) is not None:
        return
    directory = config._tmp_path_factory.getbasetemp()
    free = shutil.disk_usage(directory).free
    reason = refusal(directory, free, min_free_gb())
    if reason:
        pytest.exit(reason, returncode=pytest.ExitCode.USAGE_ERROR)
    config.stash[_WATCH] = DiskWatch(directory, free, free)
    if config.pluginmanager.has_plugin("dsession"):  # pytest-xdist's controller: the tests run in its workers
        config.pluginmanager.register(_ReportSampler(config.stash[_WATCH]), "dfpo_disk_reports")


class _ReportSampler:
    """Samples the free space as each test phase's report reaches pytest-xdist's controller."""

    def __init__(self, watch: DiskWatch) -> None:
        self.watch = watch

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.watch.sample(f"the {report.when} of {report.nodeid}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    watch = item.config.stash.get(_WATCH, None)
    if watch is not None:
        watch.sample(f"the set-up of {item.nodeid}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Before the fixtures' own teardown, which may remove what they wrote."""
    watch = item.config.stash.get(_WATCH, None)
    if watch is not None:
        watch.sample(f"the teardown of {item.nodeid}")


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    watch = config.stash.get(_WATCH, None)
    if watch is not None:
        terminalreporter.write_line(watch.summary())
