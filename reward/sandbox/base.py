"""What every part of the sandbox shares: the levels, a run's limits and result, a started sandbox."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

LEVELS: tuple[str, ...] = ("bwrap", "unshare", "rlimits")
MAX_CONCURRENT_RUNS = 1024
"""The most runs at once any setting may ask for (one dedicated uid each when root).  The default
is the cores this process may use (:func:`reward.sandbox.slots.default_max_runs`)."""


class SandboxUnavailable(RuntimeError):
    """No isolation level works on this machine (or the forced one does not)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        wall_s: wall-clock limit of the whole run, enforced by the parent, counted from the moment
            the run gets its slot (waiting for one is not part of the run).
        cpu_s: CPU seconds per process (``RLIMIT_CPU``).
        memory_bytes: address space per process (``RLIMIT_AS``).
        file_size_bytes: largest file a process may write (``RLIMIT_FSIZE``).
        open_files: ``RLIMIT_NOFILE``.
        processes: ``RLIMIT_NPROC`` (only applied with a dedicated uid).
        output_bytes: stdout bytes kept; the run is killed when it prints more.
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_bytes: int = 2 << 30
    file_size_bytes: int = 16 << 20
    open_files: int = 256
    processes: int = 64
    output_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_bytes", "file_size_bytes", "open_files", "processes", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = Limits()


@dataclass
class RunResult:
    """What one sandboxed run did.

    ``returncode`` is the exit status of the launcher (negative: killed by that signal).
    ``timed_out``: the parent killed the run at ``wall_s``; ``output_truncated``: the
    parent killed it for exceeding ``output_bytes``; ``stopped_early``: the line callback
    asked to stop; ``not_started``: no run slot came free before the caller's queue deadline,
    so nothing ran.  ``wall_s`` is the run's own time, from its slot to its teardown;
    ``queued_s`` the time it waited for the slot.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    output_truncated: bool = False
    stopped_early: bool = False
    not_started: bool = False
    wall_s: float = 0.0
    queued_s: float = 0.0


@dataclass
class Launched:
    """A started sandbox: its launcher process, working directory and leased uid."""

    process: subprocess.Popen
    workdir: str
    uid: int | None
    lease: int
