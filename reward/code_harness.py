"""Test runner executed INSIDE the sandbox, with LiveCodeBench's harness semantics; standard library only.

LiveCodeBench (``lcb_runner/evaluation/testing_util.py``, also shipped by the
``nvidia-livecodebench`` package) defines what a passing program is.  This runner
reproduces its rules, written from a reading of that code:

* a fixed import preamble (:data:`PREAMBLE`: star imports of ``string``, ``re``, ...,
  ``builtins``, ``typing``, then plain imports, then ``sys.setrecursionlimit(50000)``) is
  prepended to every program, so ``List[int]`` or ``Counter`` work without an import;
* stdin programs: a final ``if __name__ == '__main__':`` block is replaced by its body,
  top-level imports are hoisted and every other top-level statement becomes the body of
  ``wrapped_function()`` (so ``__name__`` guards elsewhere do not run, and top-level
  names are locals of that function); each test calls it with ``sys.stdin`` an
  ``io.StringIO`` of the input and ``sys.stdout`` captured; ``SystemExit`` ends the test
  normally; the stream ``sys.stdin`` was at load time answers ``read``/``readline``/
  ``readlines`` from the test input (LiveCodeBench patches those three methods);
* functional programs: if the source contains ``class Solution`` the method is taken
  from ONE ``Solution()`` instance shared by all tests, else the module-level function;
  arguments are one JSON value per input line; a returned tuple counts as a list;
* the module is loaded once per problem under the per-test time limit, then the tests
  run one after the other in that process (state carries over, as in LiveCodeBench);
* the per-test limit is **CPU time** (LiveCodeBench's is wall-clock): this runner, the
  child's parent, reads the child's CPU time from /proc while a test runs and kills the
  child when the test has used its limit, or when its wall-clock backstop (a multiple of
  the limit, so a program that sleeps or blocks still ends) passes first; all tests together
  have the run's CPU budget (LiveCodeBench's whole-run limit), after which no test runs;
* LiveCodeBench's ``reliability_guard`` names are disabled (``os.fork``, ``os.kill``,
  ``subprocess.Popen``, ``quit``, ...; this is not isolation, the sandbox is) and
  integers print up to 50000 digits.

The runner never sees expected outputs: the parent process compares, outside the sandbox,
so a program cannot fake a pass.  Everything a program can reach (the report pipe, the
output files) is treated as untrusted by :mod:`reward.code_tests`.

Invocation: ``python -I -B -c <this source> manifest [go]``.  With ``go``, the runner
imports its modules, then waits for the line ``go`` on standard input before it reads any
file: the sandbox is started ahead of the problem (:meth:`reward.sandbox.Sandbox.run`,
``prepared``), and the files are written while it waits.  Manifest, one item per line::

    <program path>
    <fn_name, or "-" for stdin problems>
    <per-test limit: CPU seconds of the test's process>
    <per-test wall-clock backstop in seconds>
    <output byte limit per test>
    <1: stop at the first failing test, 0: run every test>
    <CPU seconds for all tests together (also RLIMIT_CPU of every process, rounded up, + 1)>
    <input path>            (one line per test)

Reports, one line each on stdout (``b64`` = base64 of UTF-8 bytes)::

    READY
    COMPILE_ERROR <b64 message>
    RESULT <i> <status> <CPU seconds> <b64 output> <b64 detail>

with status ``ok``, ``timeout``, ``runtime_error`` or ``output_limit``.  A functional
test's output is ``=`` followed by the JSON of the returned value, or ``!`` when the value
is not plain data (a set, a nested tuple, an object...), which can never equal a JSON
expected value.
"""

import binascii
import math
import os
import select
import signal
import sys
import time

STAR_IMPORTS = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
    "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing",
)  # fmt: skip
PLAIN_IMPORTS = STAR_IMPORTS[:-2]  # every star-imported module but builtins and typing
RECURSION_LIMIT = 50000
PREAMBLE = (
    "".join(f"from {name} import *\n" for name in STAR_IMPORTS)
    + "".join(f"import {name}\n" for name in PLAIN_IMPORTS)
    + f"sys.setrecursionlimit({RECURSION_LIMIT})\n"
)
"""What LiveCodeBench prepends to every program (its ``import_string``)."""
INT_DIGITS = 50000
"""LiveCodeBench's evaluator raises ``sys.set_int_max_str_digits`` to this."""
GUARDED_OS_NAMES = (
    "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty", "killpg",
    "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags",
    "lchmod", "lchown", "getcwd", "chdir",
)  # fmt: skip
GUARDED_SHUTIL_NAMES = ("rmtree", "move", "chown")
GUARDED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")
PRELOADED = ("ast", "types", "shutil", "subprocess") + STAR_IMPORTS
"""Imported by the runner before it forks, so a program's preamble costs nothing."""
MAIN_GUARD = "__name__ == '__main__'"


def stdin_source(program):
    """LiveCodeBench's source for a stdin program: main guard unwrapped, body in ``wrapped_function``.

    Like LiveCodeBench, a program that does not parse is returned unchanged (it then
    fails to compile).
    """
    import ast

    try:
        tree = ast.parse(program)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == MAIN_GUARD:
            program = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001 - LiveCodeBench keeps the program as it was
        pass
    try:
        tree = ast.parse(program)
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        others = [node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom))]
        no_arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        wrapper = ast.FunctionDef(name="wrapped_function", args=no_arguments, body=others, decorator_list=[], lineno=-1)
        return PREAMBLE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(wrapper)
    except Exception:  # noqa: BLE001
        return program


def functional_source(program):
    """LiveCodeBench's source for a functional (LeetCode-style) program."""
    return PREAMBLE + "\n\n" + program


class _Incomparable(Exception):
    """The returned value holds something that is not plain JSON-like data."""


def _plain(value):
    """The value as plain data (``==`` with a JSON value is decided on this), else _Incomparable.

    Sub-classes of the plain types lose any ``__eq__`` of their own: outputs are compared
    outside the sandbox, on data, never with the program's objects.
    """
    if value is None or type(value) in (bool, int, float, str):
        return value
    # sub-classes: read through the base type's own methods, never the program's overrides
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, list):
        return [_plain(item) for item in list.__iter__(value)]
    if isinstance(value, dict):
        items = list(dict.items(value))
        if not all(type(key) is str for key, _ in items):
            raise _Incomparable()
        return {key: _plain(item) for key, item in items}
    raise _Incomparable()


def _b64(data):
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogatepass")
    return binascii.b2a_base64(data, newline=False).decode() or "-"


def _emit(*fields):
    sys.stdout.write(" ".join(str(field) for field in fields) + "\n")
    sys.stdout.flush()


def _guard():
    """Disable what LiveCodeBench's ``reliability_guard`` disables (behaviour, not isolation)."""
    import builtins
    import shutil
    import subprocess

    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in GUARDED_OS_NAMES:
        setattr(os, name, None)
    for name in GUARDED_SHUTIL_NAMES:
        setattr(shutil, name, None)
    subprocess.Popen = None
    for name in GUARDED_MODULES:
        sys.modules[name] = None


def _report(fd, text):
    os.write(fd, (text + "\n").encode())


def _write_output(index, data, output_bytes):
    if len(data) > output_bytes:
        return "output_limit"
    fd = os.open(f"out_{index}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return "ok"


def _run_stdin_test(function, text, load_time_stdin):
    """One stdin test as LiveCodeBench runs it; returns the captured output."""
    import io

    lines = iter(text.split("\n"))
    patched = {
        "readline": lambda *args: next(lines),
        "readlines": lambda *args: text.split("\n"),
        "read": lambda *args: text,
    }
    for name, method in patched.items():
        setattr(load_time_stdin, name, method)
    captured = io.StringIO()
    captured.close = lambda x: 1  # as LiveCodeBench's capture: close() is a no-op taking one argument
    saved_stdin, saved_stdout = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO(text), captured
    try:
        function()
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = saved_stdin, saved_stdout
        for name in patched:
            try:
                delattr(load_time_stdin, name)
            except AttributeError:
                pass
    return captured.getvalue()


def _run_functional_test(function, text):
    """One functional test; returns ``=<json>`` or ``!`` (not plain data)."""
    import json

    arguments = [json.loads(line) for line in text.split("\n")]
    result = function(*arguments)
    if isinstance(result, tuple):
        result = list(result)
    try:
        plain = _plain(result)
    except (_Incomparable, RecursionError):
        return "!"
    sys.set_int_max_str_digits(0)
    try:
        return "=" + json.dumps(plain)
    finally:
        sys.set_int_max_str_digits(INT_DIGITS)


def prepare_process():
    """The process state LiveCodeBench grades in: standard input at /dev/null (its grading
    process is a ``multiprocessing`` child), output and errors discarded, big integers
    printable, the guard applied.  Returns the load-time ``sys.stdin`` (see _run_stdin_test)."""
    null_in = os.open(os.devnull, os.O_RDONLY)
    null_out = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null_in, 0)
    os.dup2(null_out, 1)
    os.dup2(null_out, 2)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.set_int_max_str_digits(INT_DIGITS)
    _guard()
    return sys.stdin


def load_program(code, source, fn_name):
    """LiveCodeBench's compile step: run the module, take ``Solution().fn_name`` when the
    source says ``class Solution``, else the module's ``fn_name`` (``wrapped_function`` for stdin)."""
    import types

    module = types.ModuleType("tmp_sol", "")
    exec(code, module.__dict__)
    target = module.Solution() if "class Solution" in source else module
    return getattr(target, fn_name or "wrapped_function")


def run_test(function, fn_name, text, load_time_stdin):
    """One test: the captured stdout (stdin problems) or ``=<json>`` / ``!`` (functional)."""
    if fn_name:
        return _run_functional_test(function, text)
    return _run_stdin_test(function, text, load_time_stdin)


def _child(code, source, fn_name, first, inputs, report_fd, output_bytes):
    """In the forked child: load the module once, run tests ``first``.., report, _exit."""
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        load_time_stdin = prepare_process()
        try:
            function = load_program(code, source, fn_name)
        except BaseException as error:  # noqa: BLE001 - the program failed to load
            _report(report_fd, "C " + _b64(f"{type(error).__name__}: {error}"[:500]))
            os._exit(1)
        _report(report_fd, "C ok")
        for index in range(first, len(inputs)):
            with open(inputs[index], encoding="utf-8", errors="surrogatepass") as handle:
                text = handle.read()
            try:
                output = run_test(function, fn_name, text, load_time_stdin)
                outcome = _write_output(index, output.encode("utf-8", errors="surrogatepass"), output_bytes)
            except BaseException:  # noqa: BLE001 - any failure of the program
                outcome = "runtime_error"
            _report(report_fd, f"D {index} {outcome}")
        status = 0
    except BaseException:  # noqa: BLE001
        status = 1
    os._exit(status)


class _Reports:
    """Reads the child's report lines."""

    def __init__(self, fd):
        self.fd, self.buffer = fd, b""

    def next_line(self, timeout_s):
        """A report line, ``None`` if none came within ``timeout_s``, ``b""`` when the child closed
        the pipe.  What is already written is read even when ``timeout_s`` is 0."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            remaining = max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], remaining)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return b""
            self.buffer += chunk
            if len(self.buffer) > 1 << 20:
                return b""  # not a report stream any more
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.1
"""Longest wait between two looks at a running test's CPU time."""


def _cpu_seconds(pid):
    """CPU seconds used so far by process ``pid``, all its threads (from /proc); None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


class _Run:
    """The whole run's limits and what it has spent: ``cpu_limit_s`` and ``wall_limit_s`` per test
    (and for loading the program), ``budget_s`` CPU seconds for all children together."""

    def __init__(self, cpu_limit_s, wall_limit_s, budget_s):
        self.cpu_limit_s, self.wall_limit_s, self.budget_s = cpu_limit_s, wall_limit_s, budget_s
        self.spent_s = 0.0
        """CPU seconds of the children already ended."""
        self.exhausted = False
        """The run's CPU budget ran out: no further test runs."""

    def next_report(self, reports, pid):
        """(line, CPU seconds of this test): the child's next report line, ``None`` when the test
        ran out of time first (its CPU limit, its wall-clock backstop or the run's budget), ``b""``
        when the child closed the pipe.

        The test's CPU time is the child's (every thread of it) since this call, read from /proc;
        where that cannot be read, its wall-clock time stands in for it.
        """
        started = time.monotonic()
        cpu_at_start = _cpu_seconds(pid)
        while True:
            now, cpu = time.monotonic(), _cpu_seconds(pid)
            used = now - started if cpu is None or cpu_at_start is None else cpu - cpu_at_start
            budget_left = self.budget_s - self.spent_s - (used if cpu is None else cpu)
            left = min(self.cpu_limit_s - used, started + self.wall_limit_s - now, budget_left)
            # one thread's CPU time grows no faster than the clock: nothing can expire sooner
            line = reports.next_line(max(0.0, min(left, POLL_S)))
            if line is not None:
                return line, used
            if left <= 0:
                self.exhausted = budget_left <= 0
                return None, used

    def end_child(self, pid):
        """Kill and reap the child; count its CPU time; its wait status."""
        wait_status, cpu_s = _end_child(pid)
        self.spent_s += cpu_s
        return wait_status


def _end_child(pid):
    """Kill and reap a child: (wait status or None, its CPU seconds)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        _, wait_status, usage = os.wait4(pid, 0)
        cpu_s = usage.ru_utime + usage.ru_stime
    except ChildProcessError:
        wait_status, cpu_s = None, 0.0
    _reap_orphans()
    return wait_status, cpu_s


def _death_status(wait_status):
    if wait_status is not None and os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        return {signal.SIGXFSZ: "output_limit", signal.SIGXCPU: "timeout"}.get(number, "runtime_error")
    return "runtime_error"


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


def _run_from(first, code, source, fn_name, inputs, run, output_bytes, stop_on_failure):
    """Fork one child that runs tests ``first``..; emit their results; return where to resume (or None)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(code, source, fn_name, first, inputs, write_fd, output_bytes)
    os.close(write_fd)
    reports = _Reports(read_fd)
    try:
        line, used = run.next_report(reports, pid)
        if line != b"C ok":
            # The module did not load (an exception, a crash, or its time limit): every test
            # fails, as a runtime error -- LiveCodeBench reports a load that times out so too.
            run.end_child(pid)
            for index in range(first, len(inputs)):
                _emit("RESULT", index, "runtime_error", f"{used:.4f}", "-", "-")
                if stop_on_failure:
                    break
            return None
        for index in range(first, len(inputs)):
            line, used = run.next_report(reports, pid)
            seconds = f"{used:.4f}"
            if line is None or not line.startswith(f"D {index} ".encode()):
                wait_status = run.end_child(pid)
                status = "timeout" if line is None else _death_status(wait_status)
                _emit("RESULT", index, status, seconds, "-", "-")
                return None if stop_on_failure or run.exhausted else index + 1
            status = line.split(b" ")[2].decode("ascii", errors="replace")
            if status != "ok":
                _emit("RESULT", index, status if status == "output_limit" else "runtime_error", seconds, "-", "-")
                if stop_on_failure:
                    run.end_child(pid)
                    return None
                continue
            try:
                with open(f"out_{index}", "rb") as handle:
                    output = handle.read(output_bytes + 1)
            except OSError as error:
                _emit("RESULT", index, "runtime_error", seconds, "-", _b64(str(error)))
                continue
            if len(output) > output_bytes:
                _emit("RESULT", index, "output_limit", seconds, "-", "-")
                continue
            _emit("RESULT", index, "ok", seconds, _b64(output), "-")
        run.end_child(pid)
        return None
    finally:
        os.close(read_fd)


def run_tests():
    for name in PRELOADED:
        __import__(name)
    if sys.argv[2:] == ["go"] and sys.stdin.readline() != "go\n":
        return  # the sandbox was started ahead and is being discarded unused
    with open(sys.argv[1]) as handle:
        lines = handle.read().split("\n")
    program_path, fn_name, cpu_limit_s, wall_limit_s = lines[0], lines[1], float(lines[2]), float(lines[3])
    output_bytes, stop_on_failure, budget_s = int(lines[4]), lines[5] == "1", float(lines[6])
    import resource

    backstop = math.ceil(budget_s) + 1  # RLIMIT_CPU of every process from here on, the run's budget
    resource.setrlimit(resource.RLIMIT_CPU, (backstop, backstop + 1))
    inputs = [line for line in lines[7:] if line]
    fn_name = None if fn_name == "-" else fn_name
    with open(program_path, encoding="utf-8", errors="surrogatepass") as handle:
        program = handle.read()
    source = functional_source(program) if fn_name else stdin_source(program)
    try:
        code = compile(source, "<solution>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as error:
        _emit("COMPILE_ERROR", _b64(f"{type(error).__name__}: {error}"[:2000]))
        return
    _emit("READY")
    run = _Run(cpu_limit_s, wall_limit_s, budget_s)
    first = 0
    while first is not None and first < len(inputs):
        first = _run_from(first, code, source, fn_name, inputs, run, output_bytes, stop_on_failure)


def main():
    try:
        run_tests()
    finally:
        _end_namespace()


if __name__ == "__main__":
    main()
