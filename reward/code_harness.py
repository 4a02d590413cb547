"""Test runner executed INSIDE the sandbox; stand-alone (standard library only).

:mod:`reward.code_tests` passes this file's source with ``python -I -c`` and a manifest
path.  It compiles the candidate program once, then for each test forks a child that runs
the program with the test input and exits; the child's output goes to a file, never to
this process's stdout.  After each test it prints one JSON line
``{"i", "status", "output", "seconds", "detail"}`` where status is ``ok``, ``timeout``,
``runtime_error`` or ``output_limit``.  It never sees expected outputs: the parent
compares, so a program cannot fake a pass by tampering with comparison code.

Manifest (JSON): ``{"program": path, "fn_name": str | null, "tests": [{"input": path,
"testtype": "stdin" | "functional"}], "test_timeout_s": float, "output_bytes": int}``.
"""

import json
import os
import select
import signal
import sys
import time

READ_CHUNK = 1 << 16


def _emit(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _run_child(code, test, fn_name, output_path):
    """In the forked child: run one test and _exit; never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        input_fd = os.open(test["input"], os.O_RDONLY)
        os.dup2(input_fd, 0)
        output_fd = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null_fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null_fd, 2)
        if test["testtype"] == "functional":
            os.dup2(null_fd, 1)  # prints are ignored; the return value is the answer
        else:
            os.dup2(output_fd, 1)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        if test["testtype"] == "functional":
            with open(test["input"]) as handle:
                args = [json.loads(line) for line in handle.read().split("\n") if line.strip()]
            namespace = {"__name__": "solution", "__builtins__": __builtins__}
            exec(code, namespace)
            solution_class = namespace.get("Solution")
            if solution_class is not None and hasattr(solution_class, fn_name):
                function = getattr(solution_class(), fn_name)
            elif callable(namespace.get(fn_name)):
                function = namespace[fn_name]
            else:
                raise NameError(f"neither Solution().{fn_name} nor a function {fn_name} is defined")
            result = function(*args)
            encoded = json.dumps(result).encode()
            os.write(output_fd, encoded)
        else:
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        status = 0
    except SystemExit as exit_request:
        code_value = exit_request.code
        status = 0 if code_value in (None, 0) else 1
    except BaseException:  # noqa: BLE001 - any failure of the candidate program
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        status = 1
    os._exit(status)


def _wait(pid, timeout_s):
    """(wait status or None on timeout, seconds)."""
    started = time.monotonic()
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    deadline = started + timeout_s
    try:
        while True:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                return wait_status, time.monotonic() - started
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, time.monotonic() - started
            if pidfd is not None:
                select.select([pidfd], [], [], remaining)
            else:
                time.sleep(min(remaining, 0.002))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _reap_orphans():
    """Reap any finished process reparented to us (we are PID 1 of a PID namespace)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_namespace():
    """As PID 1 of the sandbox's PID namespace, kill and reap everything left.

    Only when we really are PID 1: elsewhere kill(-1) would reach every process of the user.
    """
    if os.getpid() != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main():
    try:
        run_tests()
    finally:
        _end_namespace()


def run_tests():
    with open(sys.argv[1]) as handle:
        manifest = json.load(handle)
    with open(manifest["program"]) as handle:
        source = handle.read()
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as error:
        _emit({"compile_error": f"{type(error).__name__}: {error}"[:2000]})
        return
    _emit({"ready": True})
    output_bytes = int(manifest["output_bytes"])
    for i, test in enumerate(manifest["tests"]):
        output_path = f"out_{i}"
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(code, test, manifest["fn_name"], output_path)
        wait_status, seconds = _wait(pid, float(manifest["test_timeout_s"]))
        try:
            os.killpg(pid, signal.SIGKILL)  # the test's whole process group, finished or not
        except (ProcessLookupError, PermissionError):
            pass
        if wait_status is None:
            os.waitpid(pid, 0)
            _reap_orphans()
            _emit({"i": i, "status": "timeout", "output": "", "seconds": seconds, "detail": ""})
            continue
        if os.WIFSIGNALED(wait_status):
            number = os.WTERMSIG(wait_status)
            status = (
                "output_limit"
                if number == signal.SIGXFSZ
                else "timeout"
                if number == signal.SIGXCPU
                else "runtime_error"
            )
            _emit({"i": i, "status": status, "output": "", "seconds": seconds, "detail": f"signal {number}"})
            continue
        try:
            with open(output_path, "rb") as handle:
                output = handle.read(output_bytes + 1)
        except OSError as error:
            _emit({"i": i, "status": "runtime_error", "output": "", "seconds": seconds, "detail": str(error)})
            continue
        if len(output) > output_bytes:
            _emit({"i": i, "status": "output_limit", "output": "", "seconds": seconds, "detail": ""})
            continue
        exit_code = os.WEXITSTATUS(wait_status)
        _emit(
            {
                "i": i,
                "status": "ok" if exit_code == 0 else "runtime_error",
                "output": output.decode("utf-8", errors="replace"),
                "seconds": seconds,
                "detail": "" if exit_code == 0 else f"exit code {exit_code}",
            }
        )


if __name__ == "__main__":
    main()
