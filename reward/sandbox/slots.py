"""How many sandboxed runs go at once on this host, and who waits: run slots.

A run holds a slot from the moment it starts until its sandbox is torn down.  There are as many
slots as the cores this process may use (:func:`usable_cores`: its CPU affinity, and the cgroup's
CPU quota when one is set), so every run gets about a core of its own and its CPU-time limits
measure its own work, never its neighbours'.  ``REWARD_SANDBOX_MAX_RUNS`` (or the reward option
``code_concurrency``) sets another number.

The slots are **host-wide**: slot ``k`` is an exclusive ``flock`` on ``<lock dir>/slot-<k>``, so
verl's several reward processes on one node share the cores instead of each taking all of them.
Processes configured differently share the low-numbered slots (the host runs at most the largest
setting at once).  Within a process, callers are served first come, first served; while other
processes hold the slots, the first in line looks for a free one every 5 ms, and a process that
frees a slot while another waits leaves it to that one (:class:`RunSlots`), so no process keeps
the slots while others wait.
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
"""How often the first caller in line of a process looks for a slot other processes hold."""
HOLD_OFF_S = 0.05
"""How long a process that frees a slot while another process waits takes none (10 x POLL_S):
the waiting one finds it within POLL_S unless kept off the CPU."""


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
                for directory in (os.path.join(base, path), base):
                    candidates.append(
                        (os.path.join(directory, "cpu.cfs_quota_us"), os.path.join(directory, "cpu.cfs_period_us"))
                    )
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
    is None); thread-safe, first come first served within the process.

    Between processes: the first in line of a process that finds every slot it may use taken by
    other processes holds a lock on its own ``waiting-*`` file in ``lock_dir`` and looks again
    every :data:`POLL_S`.  A process that frees a slot while another process is waiting so takes
    no slot until that slot is taken again (at most :data:`HOLD_OFF_S`), so the waiting one gets
    it; otherwise its own next caller takes it at once.  So processes with backlogs take turns,
    and none keeps the slots from another.
    """

    def __init__(self, capacity: int, lock_dir: str | None) -> None:
        self._capacity = check_max_runs(capacity, "the number of concurrent sandbox runs")
        self._lock_dir = lock_dir
        self._held: dict[int, int | None] = {}
        """Slot index -> the descriptor holding its host-wide lock (None without a lock dir)."""
        self._waiting_fd: int | None = None
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """Start empty; in a forked child, the slots held belong to the parent (the child's copies
        of their descriptors are closed, which leaves the parent's locks as they are)."""
        for fd in [*self._held.values(), self._waiting_fd]:
            if fd is not None:
                os.close(fd)
        self._held = {}
        self._waiting_fd = None
        self._waiting_name = f"waiting-{os.getpid()}-{id(self)}"
        self._hold_off_until = 0.0
        self._freed_slot = 0
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
                    now = time.monotonic()
                    if self._line[0] is ticket:
                        if now < self._hold_off_until and not self._freed_slot_taken():
                            self._mark_waiting()  # another process's turn; ours next
                            poll = min(POLL_S, self._hold_off_until - now)
                        elif len(self._held) < self._capacity:
                            slot = self._lock_free_slot()
                            if slot is not None:
                                return slot
                            self._mark_waiting()  # other processes hold the slots: look again soon
                            poll = POLL_S
                    remaining = None if deadline is None else deadline - now
                    if remaining is not None and remaining <= 0:
                        return None
                    waits = [w for w in (poll, remaining) if w is not None]
                    self._condition.wait(min(waits) if waits else None)
            finally:
                self._line.remove(ticket)
                self._unmark_waiting()  # the next in line marks itself again if it must wait
                self._condition.notify_all()  # the next in line may go (or look) now

    def release(self, slot: int) -> None:
        with self._condition:
            fd = self._held.pop(slot)
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)  # explicitly: a forked child may hold a copy of fd
                os.close(fd)
                if self._others_waiting():
                    self._hold_off_until, self._freed_slot = time.monotonic() + HOLD_OFF_S, slot
            self._condition.notify_all()

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

    def _freed_slot_taken(self) -> bool:
        """Whether the slot this process freed last is locked again (by the process it left it to):
        then the hold-off is over."""
        if _locked(os.path.join(self._lock_dir, f"slot-{self._freed_slot}"), create=True):
            self._hold_off_until = 0.0
            return True
        return False

    def _mark_waiting(self) -> None:
        """Lock this process's ``waiting-*`` file, so that processes freeing slots let it have one."""
        if self._lock_dir is None or self._waiting_fd is not None:
            return
        path = os.path.join(self._lock_dir, self._waiting_name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process probing it this instant: next time
            os.close(fd)
            return
        self._waiting_fd = fd

    def _unmark_waiting(self) -> None:
        if self._waiting_fd is None:
            return
        try:
            os.unlink(os.path.join(self._lock_dir, self._waiting_name))
        except OSError:
            pass
        fcntl.flock(self._waiting_fd, fcntl.LOCK_UN)
        os.close(self._waiting_fd)
        self._waiting_fd = None

    def _others_waiting(self) -> bool:
        """Whether another process (or another set of slots here) waits for a slot now: holds the
        lock of its ``waiting-*`` file (a file left by a process that died is not locked)."""
        try:
            names = [entry.name for entry in os.scandir(self._lock_dir) if entry.name.startswith("waiting-")]
        except OSError:
            return False
        for name in names:
            if name == self._waiting_name:
                continue
            try:
                if _locked(os.path.join(self._lock_dir, name)):
                    return True
            except OSError:  # gone since the listing
                continue
        return False


def _locked(path: str, create: bool = False) -> bool:
    """Whether some descriptor holds an exclusive ``flock`` on ``path`` (probed with a shared,
    non-blocking lock on a descriptor of its own, closed at once)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
