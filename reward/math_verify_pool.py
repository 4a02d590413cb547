"""A pool of math-verify worker processes with a hard wall-clock limit per call.

Why a process pool: math-verify bounds its own work with ``signal.alarm``, which only
works on the main thread (verl calls reward functions from executor threads) and cannot
interrupt long C-level arithmetic.  Here every comparison runs in a worker process.

A call's ``limit_s`` counts from the call's start: waiting for a free worker and the
comparison itself both come out of it, so a call returns within ``limit_s`` however many
threads call at once.  A worker still computing at the deadline is killed and the pool
goes on without it (verl 0.9.1's own pool returns 0.0 forever once a worker dies and never
stops timed-out work).

Workers are forked from a warm fork server (:mod:`reward.math_verify_worker`) that
imported math-verify once, so a new worker is ready in milliseconds.  Hence a killed
worker costs nothing to replace, and when every worker is stuck on slow comparisons a
caller that has waited :data:`SURGE_AFTER_S` gets an extra worker (up to ``max_size``),
so hostile answers cannot starve ordinary ones into timeouts.  Extra workers are ended
once they have been idle for :data:`RETIRE_IDLE_S` (kept meanwhile, so steady load from
many threads does not fork and end workers over and over).  The server is started by ``subprocess`` by file
path (no fork of a threaded parent, no re-import of the parent's ``__main__``), lazily on first use;
everything exits when the parent goes away (EOF on the sockets, or the per-request CPU
limit if busy), and :func:`atexit` kills what remains.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
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
SURGE_AFTER_S = 0.25
"""A caller that has waited this long for a busy pool may fork an extra worker."""
RETIRE_IDLE_S = 30.0
"""Workers beyond ``size`` that have been idle this long are ended."""
FORK_REPLY_TIMEOUT_S = 30.0
_HEADER = struct.Struct(">I")
_MAX_REPLY_BYTES = 1 << 20


class WorkerStartupError(RuntimeError):
    """The math-verify fork server could not start (math-verify missing, interpreter broken...)."""


@dataclass(frozen=True)
class Comparison:
    """Outcome of one gold/prediction comparison.

    ``status``: ``equal``, ``different``, ``timeout`` (no answer within ``limit_s`` of the
    call's start: the worker was killed, or math-verify's own alarm fired, or no worker
    was free in time) or ``error`` (the worker died).
    """

    status: Literal["equal", "different", "timeout", "error"]
    detail: str = ""


class _Deadline(Exception):
    pass


class _WorkerGone(Exception):
    pass


class _ServerGone(Exception):
    pass


def _wait_readable(fd: int, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
        raise _Deadline()


class _Worker:
    """One forked worker: its pid (held as a pidfd, safe against pid reuse) and its socket."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock = pid, sock
        self.idle_since = time.monotonic()
        self.served = 0  # comparisons answered: sympy's caches are per process, so busier is warmer
        self._buffer = bytearray()
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = -1  # already gone: the first send or receive reports it

    def send(self, message: dict) -> None:
        payload = json.dumps(message).encode()
        self.sock.sendall(_HEADER.pack(len(payload)) + payload)

    def receive(self, deadline: float) -> dict:
        (length,) = _HEADER.unpack(self._read_exact(_HEADER.size, deadline))
        if length > _MAX_REPLY_BYTES:
            raise _WorkerGone(f"reply of {length} bytes exceeds {_MAX_REPLY_BYTES}")
        return json.loads(self._read_exact(length, deadline))

    def _read_exact(self, n: int, deadline: float) -> bytes:
        while len(self._buffer) < n:
            _wait_readable(self.sock.fileno(), deadline)
            chunk = self.sock.recv(max(n - len(self._buffer), 1 << 16))
            if not chunk:
                raise _WorkerGone("worker exited")
            self._buffer += chunk
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def kill(self) -> None:
        if self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(self._pidfd)
            self._pidfd = -1
        self.sock.close()


class _Server:
    """The fork server process and its control socket (one fork request at a time)."""

    def __init__(self, memory_limit_bytes: int) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER_PATH), str(memory_limit_bytes), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,  # own process group, deaf to the terminal's Ctrl-C
            )
        except OSError as error:
            ours.close()
            raise WorkerStartupError(f"cannot start {sys.executable} {WORKER_PATH}: {error}") from error
        finally:
            theirs.close()
        self.sock = ours
        self.started_at = time.monotonic()
        self.ready = False
        self.lock = threading.Lock()

    def fork_worker(self, deadline: float, startup_timeout_s: float) -> _Worker:
        """A new ready worker.  ``_Deadline``: the server is still importing at ``deadline``."""
        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise _Deadline()
        try:
            if not self.ready:
                give_up = self.started_at + startup_timeout_s
                try:
                    _wait_readable(self.sock.fileno(), min(deadline, give_up))
                except _Deadline:
                    if time.monotonic() < give_up:
                        raise
                    raise WorkerStartupError(
                        f"the math-verify server {WORKER_PATH} did not become ready within {startup_timeout_s:.0f} s"
                    ) from None
                if self.sock.recv(1) != b"R":
                    raise WorkerStartupError(
                        f"the math-verify server {WORKER_PATH} exited during start-up (exit code "
                        f"{self.process.poll()}); its error is on stderr above. Check that "
                        f"`{sys.executable} -c 'import math_verify'` works (pip install math-verify==0.9.0)"
                    )
                self.ready = True
            try:
                self.sock.sendall(b"F")
                _wait_readable(self.sock.fileno(), time.monotonic() + FORK_REPLY_TIMEOUT_S)
                message, fds, _, _ = socket.recv_fds(self.sock, _HEADER.size, 1)
            except (OSError, _Deadline) as error:
                raise _ServerGone(str(error) or type(error).__name__) from error
            if len(message) != _HEADER.size:
                for fd in fds:
                    os.close(fd)
                raise _ServerGone(f"exit code {self.process.poll()}")
            (pid,) = _HEADER.unpack(message)
            if pid == 0 or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise WorkerStartupError("the math-verify server could not fork a worker (out of processes or memory)")
            return _Worker(pid, socket.socket(fileno=fds[0]))
        finally:
            self.lock.release()

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.sock.close()
        self.process.wait()


class MathVerifyPool:
    """Thread-safe pool of math-verify workers: ``size`` kept, up to ``max_size`` under load.

    Args:
        size: worker processes kept (concurrent comparisons in normal operation).
        memory_limit_bytes: address-space limit of the server and of each worker.
        startup_timeout_s: how long the server may take to import math-verify before that
            is reported as an error (callers meanwhile get ``timeout`` at their own limit).
        max_size: most workers at once, extra ones included (default ``max(3 * size, 8)``).
    """

    def __init__(
        self,
        size: int,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        max_size: int | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"math-verify pool size must be at least 1, got {size}")
        self.size = size
        self.max_size = max(size, max_size if max_size is not None else max(3 * size, 8))
        self._memory_limit_bytes = memory_limit_bytes
        self._startup_timeout_s = startup_timeout_s
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._forking = 0
        self._server: _Server | None = None
        self._closed = False
        self.started = 0
        """Number of workers forked so far (replacements and extra ones included)."""
        self.killed = 0
        """Number of workers killed for overrunning their limit or dying."""

    def compare(self, gold: str, pred: str, limit_s: float, *, started: float | None = None) -> Comparison:
        """Compare with math-verify, returning within ``limit_s`` of ``started`` (default: now).

        ``started`` is the ``time.monotonic()`` at which the caller's call began, so time the
        caller already spent counts too.  A call that gets no answer in time returns ``timeout``.
        """
        if limit_s <= 0:
            raise ValueError(f"limit_s must be positive, got {limit_s}")
        deadline = (time.monotonic() if started is None else started) + limit_s
        no_worker = Comparison("timeout", f"no math-verify worker was ready within {limit_s:g} s")
        for attempt in range(2):
            worker = self._acquire(deadline)
            if worker is None:
                return no_worker
            healthy = False
            try:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    healthy = True
                    return no_worker
                try:
                    worker.send({"gold": gold, "pred": pred, "limit_s": remaining})
                except OSError:
                    if attempt == 0:
                        continue  # died while idle (e.g. the OOM killer): retry once on a fresh worker
                    return Comparison("error", "math-verify worker died before reading the request")
                try:
                    reply = worker.receive(deadline)
                except _Deadline:
                    return Comparison("timeout", f"killed at the {limit_s:g} s limit")
                except (_WorkerGone, OSError) as error:
                    return Comparison("error", f"math-verify worker died: {error}")
                healthy = True
                worker.served += 1
                return Comparison(reply["status"], reply.get("detail", ""))
            finally:
                self._release(worker, healthy)
        raise AssertionError("unreachable")

    def _acquire(self, deadline: float) -> _Worker | None:
        """An idle worker or a newly forked one; ``None`` once ``deadline`` passes."""
        waiting_since = time.monotonic()
        with self._condition:
            while True:
                if self._closed:
                    raise RuntimeError("the math-verify pool is closed")
                if self._idle:
                    warmest = max(self._idle, key=lambda idle: idle.served)
                    self._idle.remove(warmest)
                    return warmest
                now = time.monotonic()
                surge = now - waiting_since >= SURGE_AFTER_S
                if len(self._all) + self._forking < (self.max_size if surge else self.size):
                    self._forking += 1
                    break
                if now >= deadline:
                    return None
                wake = deadline if surge else min(deadline, waiting_since + SURGE_AFTER_S)
                self._condition.wait(max(0.0, wake - now))
        worker = None
        try:
            worker = self._fork(deadline)
        finally:
            with self._condition:
                self._forking -= 1
                if worker is not None:
                    self._all.add(worker)
                    self.started += 1
                self._condition.notify()
        return worker

    def _fork(self, deadline: float) -> _Worker | None:
        """Fork a worker from the server (started or restarted as needed); ``None`` at the deadline."""
        for _ in range(2):
            with self._condition:
                if self._server is None or self._server.process.poll() is not None:
                    if self._server is not None:
                        self._server.kill()
                    self._server = _Server(self._memory_limit_bytes)
                server = self._server
            try:
                return server.fork_worker(deadline, self._startup_timeout_s)
            except _Deadline:
                return None
            except _ServerGone:
                with self._condition:
                    if self._server is server:
                        self._server = None
                server.kill()
        raise WorkerStartupError(f"the math-verify server {WORKER_PATH} keeps exiting; its error is on stderr above")

    def _release(self, worker: _Worker, healthy: bool) -> None:
        retired: list[_Worker] = []
        with self._condition:
            now = time.monotonic()
            if healthy and not self._closed:
                worker.idle_since = now
                self._idle.append(worker)
                # end extra workers (beyond ``size``) that nobody needed for RETIRE_IDLE_S
                while len(self._all) - len(retired) > self.size:
                    oldest = min(self._idle, key=lambda idle: (idle.idle_since, idle.served))
                    if now - oldest.idle_since < RETIRE_IDLE_S:
                        break
                    self._idle.remove(oldest)
                    self._all.discard(oldest)
                    retired.append(oldest)
            else:
                self._all.discard(worker)
                self.killed += 0 if healthy else 1
                retired.append(worker)
            self._condition.notify()
        for old in retired:
            old.kill()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and diagnostics)."""
        with self._condition:
            return [worker.pid for worker in self._all]

    def close(self) -> None:
        """Kill every worker and the server; idempotent.  A closed pool refuses new comparisons."""
        with self._condition:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            server, self._server = self._server, None
            self._condition.notify_all()
        for worker in workers:
            worker.kill()
        if server is not None:
            server.kill()


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
