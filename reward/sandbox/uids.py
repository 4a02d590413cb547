"""Dedicated unprivileged uids, one per concurrent run, leased across every process of the host."""

from __future__ import annotations

import fcntl
import os
import pwd
import tempfile
import threading
import time

from reward.sandbox.base import SandboxUnavailable

DEFAULT_UID_BASE = 1_999_900_000
UID_COUNT = 1024
"""Size of the dedicated uid range (shared by all processes on the host)."""
UID_LOCK_DIR = "/run/reward-sandbox-uids"


def uid_base() -> int:
    """The first uid of the range: ``REWARD_SANDBOX_UID_BASE``, default :data:`DEFAULT_UID_BASE`."""
    raw = os.environ.get("REWARD_SANDBOX_UID_BASE", str(DEFAULT_UID_BASE))
    try:
        return int(raw)
    except ValueError as error:
        raise SandboxUnavailable(f"REWARD_SANDBOX_UID_BASE={raw!r} is not an integer uid") from error


def uid_lock_dir() -> str:
    """Where the lease locks live: :data:`UID_LOCK_DIR`, or under the temporary directory without /run."""
    return (
        UID_LOCK_DIR
        if os.path.isdir(os.path.dirname(UID_LOCK_DIR))
        else os.path.join(tempfile.gettempdir(), "reward-sandbox-uids")
    )


def lease_path(lock_dir: str, uid: int) -> str:
    """The file whose exclusive ``flock`` is the uid's lease."""
    return os.path.join(lock_dir, str(uid))


def is_leased(uid: int, lock_dir: str | None = None) -> bool:
    """Whether a process holds the uid's lease now (probed with a non-blocking ``flock`` on a
    descriptor of its own, so a lease this process holds counts too). A uid a process used and
    released may since run another scorer's sandbox; that run's processes are its holder's."""
    try:
        fd = os.open(lease_path(lock_dir or uid_lock_dir(), uid), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the probe's own lock, if it took it
    return False


class UidLeases:
    """Hands out dedicated uids, one per concurrent run, across every process of the host.

    A uid is leased by holding an exclusive ``flock`` on ``<lock dir>/<uid>`` for the
    duration of the run; the kernel drops the lock if the holder dies.  So several scorer
    processes on one machine (verl's reward workers, an evaluation job) never share a uid,
    which keeps ``RLIMIT_NPROC`` per run and the leftover sweep from touching another run.
    """

    def __init__(self, base: int, count: int, lock_dir: str) -> None:
        for uid in (base, base + count - 1):
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                continue
            raise SandboxUnavailable(
                f"uid {uid} (user {name!r}) lies in the sandbox uid range {base}..{base + count - 1}; "
                "set REWARD_SANDBOX_UID_BASE to a range no account uses"
            )
        self._base, self._count, self._lock_dir = base, count, lock_dir
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)
        self._next = os.getpid() % count  # spread processes over the range
        self._guard = threading.Lock()
        self.recent: list[int] = []
        """The last uids this process leased (for tests and diagnostics)."""

    def acquire(self, deadline: float | None = None) -> tuple[int, int] | None:
        """(uid, lock fd); waits while all ``count`` uids are leased, until ``deadline`` (then None)."""
        while True:
            with self._guard:
                start = self._next
                self._next = (self._next + 1) % self._count
            for offset in range(self._count):
                uid = self._base + (start + offset) % self._count
                fd = os.open(lease_path(self._lock_dir, uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                with self._guard:
                    self.recent = (self.recent + [uid])[-256:]
                return uid, fd
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # closing the only descriptor drops the flock
