"""How many sandboxed runs go at once on this host, and who waits: run slots.

A run holds a slot from the moment it starts until its sandbox is torn down.  There are as many
slots as the cores this process may use (:func:`usable_cores`: its CPU affinity, and the cgroup's
CPU quota when one is set), so every run gets about a core of its own and its CPU-time limits
measure its own work, never its neighbours'.  ``REWARD_SANDBOX_MAX_RUNS`` (or the reward option
``code_concurrency``) sets another number.

The slots are **host-wide**: slot ``k`` is an exclusive ``flock`` on ``<lock dir>/slot-<k>``, so
verl's several reward processes on one node share the cores instead of each taking all of them.
Processes configured differently share the low-numbered slots (the host runs at most the largest
setting at once).  Within a process, callers are served first come, first served; the first in
line of each process looks for a free slot every 5 ms, and a slot a process frees is not handed
to its own next caller directly, so that no process keeps the slots while others wait.
"""

from __future__ import annotations

import collections
import fcntl
import math
import os
import tempfile
import threading
import time

from reward.sandbox.base import MAX_CONCURRENT_RUNS

MAX_RUNS_ENV = "REWARD_SANDBOX_MAX_RUNS"
SLOT_LOCK_DIR = "/run/reward-sandbox-slots"
POLL_S = 0.005
"""How often the first caller in line of a process looks for a free slot (host-wide slots)."""


def _cgroup_quota_cores(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in cores (``cpu.max`` of v2, ``cfs_quota_us`` of v1);
    None when there is none or it cannot be read."""
    try:
        with open(proc_cgroup) as handle:
            entries = [line.rstrip("\n").split(":", 2) for line in handle if line.count(":") >= 2]
    except OSError:
        entries = []
    candidates = []
    for _, controllers, path in entries:
        path = path.lstrip("/")
        if controllers == "":  # cgroup v2
            candidates += [(os.path.join(root, path, "cpu.max"), None), (os.path.join(root, "cpu.max"), None)]
        elif "cpu" in controllers.split(","):
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                base = os.path.join(root, mount)
                candidates += [(os.path.join(base, path, "cpu.cfs_quota_us"), os.path.join(base, path, "cpu.cfs_period_us"))]
                candidates += [(os.path.join(base, "cpu.cfs_quota_us"), os.path.join(base, "cpu.cfs_period_us"))]
    for quota_path, period_path in candidates:
        try:
            with open(quota_path) as handle:
                fields = handle.read().split()
            if period_path is not None:
                with open(period_path) as handle:
                    fields = fields[:1] + handle.read().split()[:1]
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = float(fields[0]), float(fields[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def usable_cores(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The cores this process may use: its CPU affinity, lowered to the cgroup's CPU quota
    (rounded up) when one is set; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota_cores(root, proc_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def check_max_runs(value: object, name: str) -> int:
    """``value`` as a number of concurrent runs, or a ValueError naming the setting ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENT_RUNS:
        raise ValueError(f"{name} must be an integer from 1 to {MAX_CONCURRENT_RUNS}, got {value!r}")
    return value


def default_max_runs() -> int:
    """``REWARD_SANDBOX_MAX_RUNS`` if set, else :func:`usable_cores` (capped at MAX_CONCURRENT_RUNS)."""
    raw = os.environ.get(MAX_RUNS_ENV, "").strip()
    if raw:
        try:
            value: object = int(raw)
        except ValueError:
            value = raw
        return check_max_runs(value, f"the environment variable {MAX_RUNS_ENV}")
    return min(usable_cores(), MAX_CONCURRENT_RUNS)


def slot_lock_dir() -> str | None:
    """Where the host-wide slot locks live (created on first use); None when no such directory
    can be made, and then slots are counted within this process only."""
    for directory in (SLOT_LOCK_DIR, os.path.join(tempfile.gettempdir(), f"reward-sandbox-slots-{os.geteuid()}")):
        if not os.path.isdir(os.path.dirname(directory)):
            continue
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK | os.X_OK):
            return directory
    return None


class RunSlots:
    """``capacity`` run slots shared by every process using ``lock_dir`` (this process only when it
    is None); thread-safe, first come first served within the process."""

    def __init__(self, capacity: int, lock_dir: str | None) -> None:
        self._capacity = check_max_runs(capacity, "the number of concurrent sandbox runs")
        self._lock_dir = lock_dir
        self._held: dict[int, int | None] = {}
        """Slot index -> the descriptor holding its host-wide lock (None without a lock dir)."""
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """Start empty; in a forked child, the slots held belong to the parent (the child's copies
        of their descriptors are closed, which leaves the parent's locks as they are)."""
        for fd in self._held.values():
            if fd is not None:
                os.close(fd)
        self._held = {}
        self._condition = threading.Condition()
        self._line: collections.deque = collections.deque()

    @property
    def capacity(self) -> int:
        return self._capacity

    def resize(self, capacity: int, name: str = "the number of concurrent sandbox runs") -> None:
        """Allow ``capacity`` runs at once from now on (runs under way finish as they are)."""
        capacity = check_max_runs(capacity, name)
        with self._condition:
            self._capacity = capacity
            self._condition.notify_all()

    def acquire(self, deadline: float | None = None) -> int | None:
        """A slot index, waiting in line until ``deadline`` (``time.monotonic()``; None: no limit);
        None when none came free by then."""
        ticket = object()
        with self._condition:
            self._line.append(ticket)
            try:
                while True:
                    poll = None
                    if self._line[0] is ticket:
                        if len(self._held) < self._capacity:
                            slot = self._lock_free_slot()
                            if slot is not None:
                                return slot
                        if self._lock_dir is not None:
                            # host-wide: look again shortly, never woken by a release here, so
                            # this process does not take back every slot it frees before the
                            # first in line of another process gets a look at it
                            poll = POLL_S
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    waits = [w for w in (poll, remaining) if w is not None]
                    self._condition.wait(min(waits) if waits else None)
            finally:
                self._line.remove(ticket)
                self._condition.notify_all()  # the next in line may go (or look) now

    def release(self, slot: int) -> None:
        with self._condition:
            fd = self._held.pop(slot)
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)  # explicitly: a forked child may hold a copy of fd
                os.close(fd)
            else:
                self._condition.notify_all()  # host-wide slots are found by polling (acquire)

    def _lock_free_slot(self) -> int | None:
        """Take the lowest slot below capacity that neither this process nor another holds (the
        caller holds the condition's lock)."""
        for slot in range(self._capacity):
            if slot in self._held:
                continue
            if self._lock_dir is None:
                self._held[slot] = None
                return slot
            path = os.path.join(self._lock_dir, f"slot-{slot}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._held[slot] = fd
            return slot
        return None
