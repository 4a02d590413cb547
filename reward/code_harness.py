"""Test runner executed INSIDE the sandbox; stand-alone, built-in modules only.

:mod:`reward.code_tests` passes this file's source with ``python -I -c`` and a manifest
path.  It compiles the candidate program once, then for each test forks a child that runs
the program with the test input and exits; the child's output goes to a file, never to
this process's stdout.  It never sees expected outputs: the parent compares, so a program
cannot fake a pass by tampering with comparison code.

Start-up cost matters (it is paid once per problem), so nothing beyond built-in modules
is imported here: no ``json`` (``json`` is imported only in children of functional tests).

Manifest, one item per line::

    <program path>
    <fn_name or "-">
    <per-test timeout in seconds>
    <output byte limit>
    <input path> <testtype>        (one line per test; testtype: stdin | functional)

Reports, one line each on stdout (``b64`` = base64 of UTF-8 bytes)::

    READY
    COMPILE_ERROR <b64 message>
    RESULT <i> <status> <seconds> <b64 output> <b64 detail>

with status ``ok``, ``timeout``, ``runtime_error`` or ``output_limit``.
"""

import binascii
import os
import signal
import sys
import time


class _Timeout(Exception):
    pass


def _b64(data):
    if isinstance(data, str):
        data = data.encode("utf-8", errors="replace")
    return binascii.b2a_base64(data, newline=False).decode() or "-"


def _emit(*fields):
    sys.stdout.write(" ".join(str(field) for field in fields) + "\n")
    sys.stdout.flush()


def _run_child(code, input_path, testtype, fn_name, output_path):
    """In the forked child: run one test and _exit; never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        input_fd = os.open(input_path, os.O_RDONLY)
        os.dup2(input_fd, 0)
        output_fd = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null_fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null_fd, 2)
        os.dup2(null_fd if testtype == "functional" else output_fd, 1)  # functional: prints are ignored
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        if testtype == "functional":
            import json

            with open(input_path) as handle:
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
            encoded = json.dumps(function(*args)).encode()
            os.write(output_fd, encoded)
        else:
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        status = 0
    except SystemExit as exit_request:
        status = 0 if exit_request.code in (None, 0) else 1
    except BaseException:  # noqa: BLE001 - any failure of the candidate program
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        status = 1
    os._exit(status)


def _on_alarm(signum, frame):
    raise _Timeout()


def _wait(pid, timeout_s):
    """(wait status or None on timeout, seconds); the timer interrupts the blocking wait."""
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        _, wait_status = os.waitpid(pid, 0)
    except _Timeout:
        return None, time.monotonic() - started
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return wait_status, time.monotonic() - started


def _reap_orphans():
    """Reap any finished process reparented to us (when we are PID 1 of a PID namespace)."""
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


def run_tests():
    with open(sys.argv[1]) as handle:
        lines = handle.read().split("\n")
    program_path, fn_name, timeout_s, output_bytes = lines[0], lines[1], float(lines[2]), int(lines[3])
    tests = [line.split(" ") for line in lines[4:] if line]
    with open(program_path) as handle:
        source = handle.read()
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as error:
        _emit("COMPILE_ERROR", _b64(f"{type(error).__name__}: {error}"[:2000]))
        return
    if any(testtype == "functional" for _, testtype in tests):
        import json  # noqa: F401 - loaded once here, inherited by every forked child

    signal.signal(signal.SIGALRM, _on_alarm)
    _emit("READY")
    for i, (input_path, testtype) in enumerate(tests):
        output_path = f"out_{i}"
        pid = os.fork()
        if pid == 0:
            _run_child(code, input_path, testtype, fn_name, output_path)
        wait_status, seconds = _wait(pid, timeout_s)
        try:
            os.killpg(pid, signal.SIGKILL)  # the test's whole process group, finished or not
        except (ProcessLookupError, PermissionError):
            pass
        if wait_status is None:
            os.waitpid(pid, 0)
            _reap_orphans()
            _emit("RESULT", i, "timeout", f"{seconds:.4f}", "-", "-")
            continue
        _reap_orphans()
        if os.WIFSIGNALED(wait_status):
            number = os.WTERMSIG(wait_status)
            status = {signal.SIGXFSZ: "output_limit", signal.SIGXCPU: "timeout"}.get(number, "runtime_error")
            _emit("RESULT", i, status, f"{seconds:.4f}", "-", _b64(f"signal {number}"))
            continue
        try:
            with open(output_path, "rb") as handle:
                output = handle.read(output_bytes + 1)
        except OSError as error:
            _emit("RESULT", i, "runtime_error", f"{seconds:.4f}", "-", _b64(str(error)))
            continue
        if len(output) > output_bytes:
            _emit("RESULT", i, "output_limit", f"{seconds:.4f}", "-", "-")
            continue
        exit_code = os.WEXITSTATUS(wait_status)
        status = "ok" if exit_code == 0 else "runtime_error"
        _emit("RESULT", i, status, f"{seconds:.4f}", _b64(output), _b64("" if exit_code == 0 else f"exit {exit_code}"))


def main():
    try:
        run_tests()
    finally:
        _end_namespace()


if __name__ == "__main__":
    main()
