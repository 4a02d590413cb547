"""The math-verify worker process: reads requests on stdin, answers on stdout.

Run by :mod:`reward.math_verify_pool` as ``python <this file>`` (by path, so no package
import and no re-import of the parent's ``__main__``).  It runs in the process's main
thread, where math-verify's ``signal.alarm`` timeouts work; the parent additionally
enforces a hard wall-clock limit by killing this process, since an alarm cannot interrupt
long C-level arithmetic (``9^{9^{9^9}}``).

Wire format, both directions: a 4-byte big-endian length, then that many bytes of UTF-8
JSON.  Request ``{"gold": str, "pred": str, "limit_s": float}``; reply
``{"status": "equal" | "different" | "timeout" | "error", "detail": str}``.  On start-up
the worker sends ``{"status": "ready"}`` once math-verify is imported and warmed up.

Self-imposed limits (this code is trusted; the inputs are not): an address-space limit so
a sympy blow-up raises MemoryError instead of exhausting the host, and before every
request a CPU-time limit of the request's budget, so that a worker orphaned mid-request
(parent killed) still ends within seconds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import signal
import struct
import sys

_HEADER = struct.Struct(">I")


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


def main() -> int:
    memory_limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    # Keep the protocol pipes private: anything a library prints goes to stderr instead.
    requests_fd, replies_fd = os.dup(0), os.dup(1)
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

    compare("1", "\\frac{2}{2}", 5)  # pay the first-call cost before announcing readiness
    _send(replies_fd, {"status": "ready"})
    while True:
        header = _read_exact(requests_fd, _HEADER.size)
        if header is None:
            return 0  # parent closed the pipe: exit quietly
        payload = _read_exact(requests_fd, _HEADER.unpack(header)[0])
        if payload is None:
            return 0
        request = json.loads(payload)
        limit_s = float(request["limit_s"])
        _limit_cpu_for_next_request(limit_s)
        internal_timeout = max(1, int(limit_s))  # signal.alarm has whole-second resolution
        _send(replies_fd, compare(request["gold"], request["pred"], internal_timeout))


if __name__ == "__main__":
    sys.exit(main())
