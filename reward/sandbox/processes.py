"""Capturing a run's output, and making sure nothing of it survives: processes, uid, directory."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable

from reward.sandbox.base import RunResult


def say_go(process: subprocess.Popen) -> None:
    """Tell a prepared run its files are written (a run that already died just reads nothing)."""
    assert process.stdin is not None
    try:
        process.stdin.write(b"go\n")
        process.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def collect(
    process: subprocess.Popen, deadline: float, output_cap: int, on_line: Callable[[bytes], bool] | None
) -> RunResult:
    """Read stdout and stderr until the process ends, the deadline passes or output overflows."""
    assert process.stdout is not None and process.stderr is not None
    out, err = bytearray(), bytearray()
    result = RunResult(returncode=None, stdout=b"", stderr=b"")
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "out")
    selector.register(process.stderr, selectors.EVENT_READ, "err")
    exit_fd = os.pidfd_open(process.pid) if hasattr(os, "pidfd_open") else None
    if exit_fd is not None:
        selector.register(exit_fd, selectors.EVENT_READ, "exit")
    line_start = 0
    exited_at: float | None = None
    open_pipes = 2
    try:
        while open_pipes:
            now = time.monotonic()
            if now >= deadline:
                result.timed_out = True
                break
            if exited_at is not None and now - exited_at > 0.5:
                break  # the launcher is gone; a leftover holding the pipe is not waited for
            wait = deadline - now if exited_at is None else min(deadline - now, 0.05)
            events = selector.select(timeout=min(wait, 0.25) if exit_fd is None else wait)
            if exit_fd is None and exited_at is None and process.poll() is not None:
                exited_at = time.monotonic()
            for key, _ in events:
                if key.data == "exit":
                    selector.unregister(exit_fd)
                    exited_at = time.monotonic()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                if key.data == "err":
                    if len(err) < 65536:
                        err += chunk[: 65536 - len(err)]
                    continue
                out += chunk
                if len(out) > output_cap:
                    del out[output_cap:]
                    result.output_truncated = True
                    open_pipes = 0
                    break
                if on_line is not None:
                    while True:
                        newline = out.find(b"\n", line_start)
                        if newline < 0:
                            break
                        keep_going = on_line(bytes(out[line_start:newline]))
                        line_start = newline + 1
                        if not keep_going:
                            result.stopped_early = True
                            open_pipes = 0
                            break
                if result.stopped_early:
                    break
    finally:
        selector.close()
        if exit_fd is not None:
            os.close(exit_fd)
    result.stdout, result.stderr = bytes(out), bytes(err)
    return result


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (none once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the run's process group (its own session) and close the parent's ends of its pipes."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def processes_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) process ids whose real uid is ``uid`` (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as status:
                zombie = False
                for line in status:
                    if line.startswith(b"State:"):
                        zombie = line.split()[1] in (b"Z", b"X")
                    elif line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid and not zombie:
                            pids.append(int(entry))
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` until none is left (closes setsid() escapes)."""
    for _ in range(100):
        pids = processes_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def remove_tree(path: str) -> None:
    """Remove a run's working directory, whatever permissions the program left inside it.

    Only paths inside ``path`` are ever chmod-ed (never ``path``'s parent, e.g. ``/tmp``).
    """
    root = os.path.realpath(path)

    def inside(candidate: str) -> bool:
        return os.path.realpath(candidate).startswith(root + os.sep) or os.path.realpath(candidate) == root

    def make_writable_and_retry(function, failed_path, _excinfo):
        if not inside(failed_path):
            return
        parent = os.path.dirname(failed_path)
        try:
            if inside(parent):
                os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, stat.S_IRWXU)
        except OSError:
            return
        try:
            function(failed_path)
        except FileNotFoundError:
            pass
        except OSError:
            raise

    for attempt in range(40):
        try:
            shutil.rmtree(path, onerror=make_writable_and_retry)
            return
        except FileNotFoundError:
            return
        except OSError:
            if attempt == 39:
                raise
            time.sleep(0.05)  # a process of the run may still be writing while its namespace is torn down


def end_run(process: subprocess.Popen, finished: bool, namespaces: bool) -> None:
    """Make sure nothing of the run survives, and let the launcher reap its own children.

    With namespaces, the launcher's child is PID 1 of the sandbox: killing it tears the
    whole PID namespace down, and the launcher (``bwrap``/``unshare``) then reaps it and
    exits, so no zombie is handed to the host's init.  A launcher started a moment ago may
    not have forked that child yet, so its children are looked for until it exits (2 s at
    most; then the launcher itself is killed, and ``--die-with-parent`` ends the rest).
    """
    if namespaces:
        deadline = time.monotonic() + 2.0
        while True:
            if not finished:
                # again until the launcher exits: one just started may not have forked its child yet
                for child in children(process.pid):
                    try:
                        os.kill(child, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            try:
                process.wait(timeout=0.02 if not finished else max(0.0, deadline - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    break
    kill_group(process)
    process.wait()
