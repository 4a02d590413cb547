"""A pool of math-verify worker processes with a hard wall-clock limit per comparison.

Why a process pool: math-verify bounds its own work with ``signal.alarm``, which only
works on the main thread (verl calls reward functions from executor threads) and cannot
interrupt long C-level arithmetic.  Here every comparison runs in a worker process
(:mod:`reward.math_verify_worker`); the calling thread waits for the reply at most
``limit_s`` seconds and otherwise kills the worker's process group and starts a
replacement, so the pool never shrinks or wedges (verl 0.9.1's own pool returns 0.0
forever once a worker dies and never stops timed-out work).

Workers are started with ``subprocess`` by file path (no ``fork`` of a threaded parent, no
re-import of the parent's ``__main__``), lazily on first use, at most ``size`` of them.
A killed worker's replacement is launched at once so its start-up overlaps other work.
Workers exit on their own when the parent goes away (EOF on their request pipe, or the
per-request CPU limit if they were busy); :func:`atexit` kills any that remain.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

WORKER_PATH = Path(__file__).with_name("math_verify_worker.py")
DEFAULT_MEMORY_LIMIT_BYTES = 3 << 30
DEFAULT_STARTUP_TIMEOUT_S = 120.0
_HEADER = struct.Struct(">I")
_MAX_REPLY_BYTES = 1 << 20


class WorkerStartupError(RuntimeError):
    """A math-verify worker could not start (math-verify missing, interpreter broken...)."""


@dataclass(frozen=True)
class Comparison:
    """Outcome of one gold/prediction comparison.

    ``status``: ``equal``, ``different``, ``timeout`` (the worker overran ``limit_s`` and was
    killed, or math-verify's own alarm fired) or ``error`` (the worker died).
    """

    status: Literal["equal", "different", "timeout", "error"]
    detail: str = ""


class _Deadline(Exception):
    pass


class _WorkerGone(Exception):
    pass


class _Worker:
    """One worker process and its two pipes."""

    def __init__(self, memory_limit_bytes: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER_PATH), str(memory_limit_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            close_fds=True,
            start_new_session=True,  # own process group: killed as a unit, deaf to the terminal's Ctrl-C
        )
        self.ready = False

    def send(self, message: dict) -> None:
        payload = json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(_HEADER.pack(len(payload)) + payload)

    def receive(self, deadline: float) -> dict:
        header = self._read_exact(_HEADER.size, deadline)
        (length,) = _HEADER.unpack(header)
        if length > _MAX_REPLY_BYTES:
            raise _WorkerGone(f"reply of {length} bytes exceeds {_MAX_REPLY_BYTES}")
        return json.loads(self._read_exact(length, deadline))

    def _read_exact(self, n: int, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        chunks: list[bytes] = []
        while n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Deadline()
            if not poller.poll(remaining * 1000.0):
                raise _Deadline()
            chunk = os.read(fd, n)
            if not chunk:
                raise _WorkerGone(f"worker exited with code {self.process.poll()}")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def wait_ready(self, timeout_s: float) -> None:
        try:
            reply = self.receive(time.monotonic() + timeout_s)
        except _Deadline as error:
            raise WorkerStartupError(
                f"math-verify worker {WORKER_PATH} did not become ready within {timeout_s:.0f} s"
            ) from error
        except _WorkerGone as error:
            raise WorkerStartupError(
                f"math-verify worker {WORKER_PATH} exited during start-up ({error}); its error is on stderr "
                f"above. Check that `{sys.executable} -c 'import math_verify'` works (pip install math-verify==0.9.0)"
            ) from error
        if reply.get("status") != "ready":
            raise WorkerStartupError(f"math-verify worker sent {reply!r} instead of a ready message")
        self.ready = True

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        self.process.wait()


class MathVerifyPool:
    """Thread-safe pool of at most ``size`` math-verify workers.

    Args:
        size: maximum number of worker processes (concurrent comparisons).
        memory_limit_bytes: address-space limit of each worker.
        startup_timeout_s: how long a caller waits for a fresh worker's imports.
    """

    def __init__(
        self,
        size: int,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    ) -> None:
        if size < 1:
            raise ValueError(f"math-verify pool size must be at least 1, got {size}")
        self.size = size
        self._memory_limit_bytes = memory_limit_bytes
        self._startup_timeout_s = startup_timeout_s
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._closed = False
        self.started = 0
        """Number of worker processes started so far (replacements included)."""
        self.killed = 0
        """Number of workers killed for overrunning their limit or dying."""

    def compare(self, gold: str, pred: str, limit_s: float) -> Comparison:
        """Compare with math-verify; never takes much longer than ``limit_s`` once a worker is ready."""
        if limit_s <= 0:
            raise ValueError(f"limit_s must be positive, got {limit_s}")
        for attempt in range(2):
            worker = self._acquire()
            healthy = False
            try:
                if not worker.ready:
                    worker.wait_ready(self._startup_timeout_s)
                try:
                    worker.send({"gold": gold, "pred": pred, "limit_s": limit_s})
                except (BrokenPipeError, ConnectionResetError):
                    if attempt == 0:
                        continue  # died while idle (e.g. the OOM killer): retry once on a fresh worker
                    return Comparison("error", "math-verify worker died before reading the request")
                try:
                    reply = worker.receive(time.monotonic() + limit_s)
                except _Deadline:
                    return Comparison("timeout", f"killed after {limit_s:g} s")
                except _WorkerGone as error:
                    return Comparison("error", f"math-verify worker died: {error}")
                healthy = True
                return Comparison(reply["status"], reply.get("detail", ""))
            finally:
                self._release(worker, healthy)
        raise AssertionError("unreachable")

    def _acquire(self) -> _Worker:
        with self._condition:
            while True:
                if self._closed:
                    raise RuntimeError("the math-verify pool is closed")
                if self._idle:
                    return self._idle.pop()
                if len(self._all) < self.size:
                    worker = self._start_worker()
                    return worker
                self._condition.wait()

    def _start_worker(self) -> _Worker:
        """Start a worker; the caller holds the lock."""
        try:
            worker = _Worker(self._memory_limit_bytes)
        except OSError as error:
            raise WorkerStartupError(f"cannot start {sys.executable} {WORKER_PATH}: {error}") from error
        self._all.add(worker)
        self.started += 1
        return worker

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if healthy:
            with self._condition:
                if not self._closed:
                    self._idle.append(worker)
                    self._condition.notify()
                    return
        worker.kill()
        with self._condition:
            self._all.discard(worker)
            if not healthy:
                self.killed += 1
            if not self._closed and len(self._all) < self.size:
                try:  # start the replacement now so its imports overlap other work
                    self._idle.append(self._start_worker())
                except WorkerStartupError:
                    pass  # the next caller that needs a worker reports the failure
            self._condition.notify()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and diagnostics)."""
        with self._condition:
            return [worker.process.pid for worker in self._all]

    def close(self) -> None:
        """Kill every worker; idempotent.  A closed pool refuses new comparisons."""
        with self._condition:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._condition.notify_all()
        for worker in workers:
            worker.kill()


_default_pool: MathVerifyPool | None = None
_default_pool_pid = -1
_default_lock = threading.Lock()


def default_pool_size() -> int:
    """min(4, CPUs available to this process)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def get_default_pool(size: int | None = None) -> MathVerifyPool:
    """The process-wide pool, created on first use with ``size`` workers (default :func:`default_pool_size`).

    A process created by ``fork`` gets its own pool instead of sharing the parent's workers.
    """
    global _default_pool, _default_pool_pid
    with _default_lock:
        if _default_pool is None or _default_pool_pid != os.getpid():
            _default_pool = MathVerifyPool(size or default_pool_size())
            _default_pool_pid = os.getpid()
        return _default_pool


def _close_default_pool() -> None:
    if _default_pool is not None and _default_pool_pid == os.getpid():
        _default_pool.close()


atexit.register(_close_default_pool)
