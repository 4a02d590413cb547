"""``python -m dfpo.main`` launched many times from one interpreter that imported it once.

Importing ``dfpo.main`` (verl, Ray, torch, transformers) is most of a launch that preflight stops
before Ray: 6-15 s on 2 cores, against a second or two for the rest. :class:`WarmMain` starts this
file as one interpreter, in the environment the launches share, which imports ``dfpo.main`` and
then, for each launch asked of it, forks a child that does what ``python -m dfpo.main ARGS`` does,
with the modules it imports already loaded: ``dfpo/main.py`` run as ``__main__`` by runpy with
``sys.argv`` set (so its ``main()``: Hydra's entry point, the command line parsed, the config
composed from ``dfpo/config``, the driver's set-up, its checks, and Ray if they pass),
with stdout and stderr to files and the exit status the interpreter would give (an uncaught
``SystemExit("message")`` prints the message to stderr and exits 1). Each child is a fresh copy of
an interpreter that has run no launch, so nothing leaks from one launch into the next. The launch
ends when the child's output is closed by everything that holds it (as ``subprocess.run``'s
``capture_output`` waits): the child reaps what it started (the console tees) before it exits.

Protocol: one JSON line per launch on stdin, ``{"argv": [...], "stdout": PATH, "stderr": PATH}``;
one line ``{"returncode": N}`` on stdout when it has ended. Import-time warnings go to this
interpreter's own stderr, not to a launch's.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import subprocess
import sys
import traceback
from pathlib import Path


def _exit_status(error: SystemExit) -> int:
    """What the interpreter does with an uncaught SystemExit (and says: a message goes to stderr)."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _launch(argv: list[str], stdout: str, stderr: str) -> None:
    """In the forked child: ``python -m dfpo.main *argv``'s run after its imports; never returns."""
    status = 1
    try:
        for fd, path in ((1, stdout), (2, stderr)):
            file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(file, fd)
            os.close(file)
        sys.argv = ["-m", *argv]  # runpy puts the module's file first, as ``python -m`` does
        sys.modules.pop("dfpo.main", None)  # only __main__ runs its code, as in a launch of its own
        try:
            runpy.run_module("dfpo.main", run_name="__main__", alter_sys=True)
            status = 0
        except SystemExit as error:
            status = _exit_status(error)
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os.close(1)  # the console tees (dfpo.launch.driver_setup.tee_console) see their input end
        os.close(2)
        while True:
            try:
                os.wait()
            except ChildProcessError:
                break
    finally:
        os._exit(status)


def serve() -> None:
    import dfpo.main  # noqa: F401  (the import every launch shares)

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _launch(request["argv"], request["stdout"], request["stderr"])
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


class WarmMain:
    """The server above, started in ``env`` from ``cwd``; :meth:`run` is one launch."""

    def __init__(self, env: dict[str, str], cwd: Path, output_dir: Path):
        self.output_dir = output_dir
        self.launches = 0
        self.server_stderr = open(output_dir / "server.stderr", "w")  # noqa: SIM115  (the server's, for its life)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.dfpo.warm_main"],  # sys.path[0] the root, as for ``-m dfpo.main``
            cwd=cwd,
            start_new_session=True,  # a launch that hangs is killed with the server, as a group
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.server_stderr,
            text=True,
        )

    def run(self, argv: list[str], timeout_s: float = 180) -> subprocess.CompletedProcess:
        """``python -m dfpo.main *argv`` in the server's environment: its exit status, stdout and stderr."""
        self.launches += 1
        stdout, stderr = (self.output_dir / f"launch{self.launches}.{name}" for name in ("stdout", "stderr"))
        self.process.stdin.write(json.dumps({"argv": argv, "stdout": str(stdout), "stderr": str(stderr)}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.kill()
            server_said = (self.output_dir / "server.stderr").read_text()[-3000:]
            raise AssertionError(
                f"no result for dfpo.main {argv} within {timeout_s:.0f} s; the server said:\n{server_said}"
            )
        returncode = json.loads(line)["returncode"]
        return subprocess.CompletedProcess(argv, returncode, stdout.read_text(), stderr.read_text())

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.server_stderr.close()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


if __name__ == "__main__":
    serve()
