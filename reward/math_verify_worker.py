"""The math-verify fork server and its workers.

Run by :mod:`reward.math_verify_pool` as ``python <this file> <memory limit> <control fd>``
(by path, so no package import and no re-import of the parent's ``__main__``).  This
process imports math-verify and warms it up once, sends one byte ``R`` (ready) on the
control socket, and then, for each byte ``F`` it receives there, forks a worker: a
process that is ready at once (the imports are already done), talks to the pool over its
own socket pair (the pool's end is passed back with ``SCM_RIGHTS``, after the worker's
pid as 4 big-endian bytes), and answers requests until its socket closes.  Forking from a
warm process costs milliseconds, so a killed worker is replaced at once and the pool can
add workers under load without paying math-verify's import time (seconds) again.

A worker runs in its process's main thread, where math-verify's ``signal.alarm``
timeouts work; the pool additionally enforces a hard wall-clock limit by killing the
worker, since an alarm cannot interrupt long C-level arithmetic (``9^{9^{9^9}}``).

Worker wire format, both directions: a 4-byte big-endian length, then that many bytes of
UTF-8 JSON.  Request ``{"gold": str, "pred": str, "limit_s": float}``; reply
``{"status": "equal" | "different" | "timeout" | "error", "detail": str}``.

Self-imposed limits (this code is trusted; the inputs are not): an address-space limit so
a sympy blow-up raises MemoryError instead of exhausting the host, and before every
request a CPU-time limit of the request's budget, so that a worker orphaned mid-request
(pool gone) still ends within seconds.  The server exits when the control socket closes;
a worker exits when its socket closes.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import resource
import signal
import socket
import struct
import sys

_HEADER = struct.Struct(">I")
WARM_UP = (
    ("1", "\\frac{2}{2}"),
    ("\\sqrt{18}", "3\\sqrt{2}"),
    ("(0, 5]", "(0,5]"),
    ("\\frac{5\\pi}{3}", "\\frac{5}{3}\\pi"),
    ("x^2-1", "(x-1)(x+1)"),
    ("y = 3x - 1", "3x-1"),
    ("a - b", "-b+a"),
    ("2 + 3i", "3i+2"),
    ("\\log_3 5", "\\log_{3}5"),
    ("e^3", "e^{3}"),
    ("\\{2, 5\\}", "\\{5, 2\\}"),
    ("4, 5", "5,4"),
    ("\\begin{pmatrix} 3 \\\\ 4 \\end{pmatrix}", "\\begin{pmatrix}3\\\\4\\end{pmatrix}"),
    ("\\text{Alice}", "Alice"),
    ("7", "7\\text{ cm}"),
    ("2500", "2,500"),
    ("20\\%", "0.2"),
    ("\\infty", "\\infty"),
)
"""Typical answer shapes (none taken from the test corpora) compared once in the server before
any worker is forked, so every worker starts with warm parser and sympy caches."""


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, message: dict) -> None:
    payload = json.dumps(message).encode()
    data = _HEADER.pack(len(payload)) + payload
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _limit_cpu_for_next_request(limit_s: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(math.ceil(used + limit_s)) + 2
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _serve(fd: int, compare) -> int:
    """A worker's request loop on socket ``fd``; returns when the pool closes it."""
    while True:
        header = _read_exact(fd, _HEADER.size)
        if header is None:
            return 0  # the pool closed the socket: exit quietly
        payload = _read_exact(fd, _HEADER.unpack(header)[0])
        if payload is None:
            return 0
        request = json.loads(payload)
        limit_s = float(request["limit_s"])
        _limit_cpu_for_next_request(limit_s)
        internal_timeout = max(1, int(limit_s))  # signal.alarm has whole-second resolution
        _send(fd, compare(request["gold"], request["pred"], internal_timeout))


def _fork_worker(control: socket.socket, compare) -> None:
    """Fork one worker and pass the pool its pid and its end of the worker's socket."""
    pool_end, worker_end = socket.socketpair()
    try:
        pid = os.fork()
    except OSError:
        pool_end.close()
        worker_end.close()
        control.sendall(_HEADER.pack(0))  # pid 0: no worker (the pool reports the failure)
        return
    if pid == 0:
        status = 1
        try:
            control.close()
            pool_end.close()
            os.setpgid(0, 0)  # its own process group: the pool kills it as a unit
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            status = _serve(worker_end.fileno(), compare)
        finally:
            os._exit(status)
    worker_end.close()
    socket.send_fds(control, [_HEADER.pack(pid)], [pool_end.fileno()])
    pool_end.close()


def main() -> int:
    memory_limit, control_fd = int(sys.argv[1]), int(sys.argv[2])
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when we stop
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    control = socket.socket(fileno=control_fd)
    # Anything a library prints goes to stderr, never into a protocol socket.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from math_verify.errors import TimeoutException

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]

    def compare(gold: str, pred: str, internal_timeout: int) -> dict:
        try:
            gold_parsed = parse("\\boxed{" + gold + "}", configs, parsing_timeout=internal_timeout, raise_on_error=True)
            pred_parsed = parse("\\boxed{" + pred + "}", configs, parsing_timeout=internal_timeout, raise_on_error=True)
            if not gold_parsed or not pred_parsed:
                return {"status": "different", "detail": "unparseable " + ("gold" if not gold_parsed else "prediction")}
            equal = verify(gold_parsed, pred_parsed, timeout_seconds=internal_timeout, raise_on_error=True)
        except TimeoutException:
            return {"status": "timeout", "detail": "math-verify alarm"}
        except MemoryError:
            return {"status": "timeout", "detail": "memory limit hit while parsing or verifying"}
        except RecursionError:
            return {"status": "timeout", "detail": "recursion limit hit while parsing or verifying"}
        except Exception as error:  # noqa: BLE001 - any parser failure means "not shown equal"
            return {"status": "different", "detail": f"{type(error).__name__}: {error}"[:500]}
        return {"status": "equal" if equal else "different", "detail": ""}

    for gold, pred in WARM_UP:
        compare(gold, pred, 5)  # fill parser and sympy caches once; every forked worker inherits them
    gc.freeze()  # keep the warm objects out of collections: fewer copy-on-write page copies per worker
    control.sendall(b"R")
    while True:
        command = control.recv(1)
        if not command:
            return 0  # the pool went away
        _fork_worker(control, compare)


if __name__ == "__main__":
    sys.exit(main())
