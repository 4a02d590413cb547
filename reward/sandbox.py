"""Run untrusted programs with the strongest isolation this machine offers.

Isolation levels, strongest first (:func:`isolation` picks the first that works here and
reports it; ``python -m reward.sandbox --check`` prints the report):

``bwrap``
    bubblewrap: new user, PID, network, IPC, UTS and mount namespaces; the root file
    system is an empty tmpfs with read-only ``/usr`` (and the interpreter's prefix), a
    private ``/tmp`` and only the run's working directory writable; ``--die-with-parent``
    and a PID namespace, so nothing survives the run (``setsid()`` + ``fork`` included).
``unshare``
    util-linux ``unshare`` (needs root, or unprivileged user namespaces): new PID, network,
    IPC, UTS and mount namespaces, ``--kill-child``, private tmpfs over every world-writable
    directory, and the host file system otherwise as the unprivileged uid sees it.
``rlimits``
    no namespaces: own session and process group, resource limits, the dedicated uid when
    root (whose leftover processes are killed after each run).  **No network isolation**
    and world-writable directories stay writable: use only when nothing else works.

Every level: a fresh working directory (removed afterwards), a scrubbed environment,
``prlimit`` resource limits (address space, CPU seconds, file size, open files, no core
dumps; and processes when a dedicated uid is used), stdout/stderr capped by the parent,
and a wall-clock limit enforced by the parent, which kills the whole run.

Prepared runs (``run(prepared=True)``, used by the code scorer) take a sandbox launched
ahead: after each such run, up to ``spares`` sandboxes for the same command are started in
the background, each exactly as a run started on demand (its own uid, directory and
namespaces, its interpreter already started and its imports done) and waiting for the
word ``go`` on its standard input; the next run writes its files, says ``go``, and the
sandbox is torn down afterwards like any other.  Nothing is reused between problems: only
the start-up is moved off the caller's path.

When running as root, each concurrent run gets its own unprivileged uid and gid from
``REWARD_SANDBOX_UID_BASE`` (default 1999900000, 1024 of them) leased across all processes
of the host with ``flock``, so ``RLIMIT_NPROC`` is enforced per run and a run cannot signal
or read anything of another.  ``REWARD_SANDBOX_ISOLATION``
forces a level (an error if it does not work here).
"""

from __future__ import annotations

import argparse
import atexit
import fcntl
import os
import pwd
import queue
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

LEVELS: tuple[str, ...] = ("bwrap", "unshare", "rlimits")
DEFAULT_UID_BASE = 1_999_900_000
UID_COUNT = 1024
"""Size of the dedicated uid range (shared by all processes on the host)."""
UID_LOCK_DIR = "/run/reward-sandbox-uids"
MAX_CONCURRENT_RUNS = 64
"""Per process."""
SANDBOX_DIR = "/sandbox"
"""Where the working directory appears inside a ``bwrap`` sandbox."""

_WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")


class SandboxUnavailable(RuntimeError):
    """No isolation level works on this machine (or the forced one does not)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        wall_s: wall-clock limit of the whole run, enforced by the parent.
        cpu_s: CPU seconds per process (``RLIMIT_CPU``).
        memory_bytes: address space per process (``RLIMIT_AS``).
        file_size_bytes: largest file a process may write (``RLIMIT_FSIZE``).
        open_files: ``RLIMIT_NOFILE``.
        processes: ``RLIMIT_NPROC`` (only applied with a dedicated uid).
        output_bytes: stdout bytes kept; the run is killed when it prints more.
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_bytes: int = 2 << 30
    file_size_bytes: int = 16 << 20
    open_files: int = 256
    processes: int = 64
    output_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_bytes", "file_size_bytes", "open_files", "processes", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = Limits()


@dataclass
class RunResult:
    """What one sandboxed run did.

    ``returncode`` is the exit status of the launcher (negative: killed by that signal).
    ``timed_out``: the parent killed the run at ``wall_s``; ``output_truncated``: the
    parent killed it for exceeding ``output_bytes``; ``stopped_early``: the line callback
    asked to stop.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    output_truncated: bool = False
    stopped_early: bool = False
    wall_s: float = 0.0


@dataclass(frozen=True)
class IsolationReport:
    """Which isolation runs use here, as detected by actually running a probe."""

    level: str
    interpreter: str
    dedicated_uids: bool
    weaknesses: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def describe(self) -> str:
        lines = [
            f"isolation level: {self.level}",
            f"python interpreter inside the sandbox: {self.interpreter}",
            "processes run as: "
            + (
                f"a dedicated unprivileged uid per concurrent run (from {_uid_base()})"
                if self.dedicated_uids
                else f"the current user (uid {os.getuid()}); RLIMIT_NPROC not applied"
            ),
        ]
        lines += [f"weakness: {w}" for w in self.weaknesses]
        lines += [f"not available: {level}: {why}" for level, why in self.rejected]
        return "\n".join(lines)


def _uid_base() -> int:
    raw = os.environ.get("REWARD_SANDBOX_UID_BASE", str(DEFAULT_UID_BASE))
    try:
        return int(raw)
    except ValueError as error:
        raise SandboxUnavailable(f"REWARD_SANDBOX_UID_BASE={raw!r} is not an integer uid") from error


def _uid_lock_dir() -> str:
    return (
        UID_LOCK_DIR
        if os.path.isdir(os.path.dirname(UID_LOCK_DIR))
        else os.path.join(tempfile.gettempdir(), "reward-sandbox-uids")
    )


def _find_interpreter() -> str:
    """A Python the unprivileged sandbox user can run: the system one if present."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


class _UidLeases:
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
                fd = os.open(os.path.join(self._lock_dir, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
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


class Sandbox:
    """Runs commands at one isolation level; thread-safe, at most ``max_runs`` runs at a time.

    ``spares``: how many sandboxes per command to keep launched ahead for ``prepared`` runs.
    """

    def __init__(
        self, level: str, interpreter: str | None = None, max_runs: int = MAX_CONCURRENT_RUNS, spares: int = 2
    ) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown isolation level {level!r}; choose one of {LEVELS}")
        self.level = level
        self.interpreter = interpreter or _find_interpreter()
        self.is_root = os.geteuid() == 0
        self._uids = _UidLeases(_uid_base(), UID_COUNT, _uid_lock_dir()) if self.is_root else None
        self._concurrency = threading.BoundedSemaphore(max_runs)
        self.spares = spares
        """Sandboxes kept launched ahead per command and limits (``run(prepared=True)``)."""
        self._spares: dict[tuple, list[_Launched]] = {}
        self._spares_starting: dict[tuple, int] = {}
        self._starting: dict[str, _Launched] = {}
        """Working directory -> the sandbox being launched ahead there."""
        self._spare_jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._launcher: threading.Thread | None = None
        self._spare_guard = threading.Lock()
        self._closed = False
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._forget_spares)
        _INSTANCES.add(self)
        self._prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
        if not os.access(self._prlimit, os.X_OK):
            raise SandboxUnavailable("prlimit (util-linux) is missing; run scripts/install_system_deps.sh")

    def _forget_spares(self) -> None:
        """In a forked child: the spares belong to the parent (their pipes too); start afresh."""
        self._spares, self._spares_starting, self._starting = {}, {}, {}
        self._spare_guard = threading.Lock()
        self._spare_jobs = queue.SimpleQueue()
        self._launcher = None

    # ----------------------------------------------------------------- launching
    def _limits_prefix(self, limits: Limits) -> list[str]:
        prefix = [
            self._prlimit,
            f"--as={limits.memory_bytes}",
            f"--cpu={limits.cpu_s}",
            f"--fsize={limits.file_size_bytes}",
            f"--nofile={limits.open_files}",
            "--core=0",
        ]
        if self._uids is not None:
            prefix.append(f"--nproc={limits.processes}")
        return prefix + ["--"]

    def _bwrap_prefix(self, workdir: str) -> list[str]:
        args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        args += ["--tmpfs", "/", "--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(self.interpreter)))
        if not prefix.startswith("/usr") and prefix != "/":
            args += ["--ro-bind", prefix, prefix]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
        args += ["--bind", workdir, SANDBOX_DIR, "--remount-ro", "/"]
        args += ["--chdir", SANDBOX_DIR, "--hostname", "sandbox", "--"]
        return args

    def _unshare_prefix(self, uid: int | None) -> list[str]:
        mounts = " ".join(
            f"mount -t tmpfs -o size=64m,mode=1777 tmpfs {d} || exit 97;"
            for d in _WORLD_WRITABLE_DIRS
            if os.path.isdir(d) and not os.path.islink(d)
        )
        namespaces = ["--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc"]
        if uid is not None:  # root: drop to the dedicated uid after mounting
            drop = (
                f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --no-new-privs "
                '--inh-caps=-all --bounding-set=-all -- "$@"'
            )
            return ["unshare", *namespaces, "--", "/bin/sh", "-c", f"{mounts} {drop}", "sandbox"]
        return [
            "unshare",
            "--user",
            "--map-root-user",
            *namespaces,
            "--",
            "/bin/sh",
            "-c",
            f'{mounts} exec "$@"',
            "sandbox",
        ]

    def _command(self, argv: list[str], limits: Limits, workdir: str, uid: int | None) -> tuple[list[str], dict]:
        popen: dict = {"start_new_session": True, "close_fds": True, "cwd": workdir}
        inner = self._limits_prefix(limits) + argv
        if self.level == "bwrap":
            if uid is not None:
                popen.update(user=uid, group=uid, extra_groups=[])
            return self._bwrap_prefix(workdir) + inner, popen
        if self.level == "unshare":
            return self._unshare_prefix(uid) + inner, popen
        if uid is not None:
            popen.update(user=uid, group=uid, extra_groups=[])
        return inner, popen

    def recent_uids(self) -> list[int]:
        """The dedicated uids this Sandbox used most recently, spares excepted (empty when not root)."""
        if self._uids is None:
            return []
        waiting = self.spare_uids()
        return [uid for uid in self._uids.recent if uid not in waiting]

    def _all_spares(self) -> list["_Launched"]:
        """This Sandbox's spares, waiting or being launched (the caller holds the guard)."""
        return [spare for spares in self._spares.values() for spare in spares] + list(self._starting.values())

    def spare_uids(self) -> set[int | None]:
        """Uids held by this Sandbox's spares, waiting or being launched."""
        with self._spare_guard:
            return {spare.uid for spare in self._all_spares()}

    def spare_pids(self) -> list[int]:
        """Launcher process ids of the sandboxes launched ahead (see ``run(prepared=True)``)."""
        with self._spare_guard:
            return [spare.process.pid for spare in self._all_spares() if spare.process is not None]

    def spare_workdirs(self) -> list[str]:
        """Working directories of the sandboxes launched ahead, including those still starting."""
        with self._spare_guard:
            return [spare.workdir for spare in self._all_spares()]

    def workdir_inside(self, workdir: str) -> str:
        """The path of the working directory as the sandboxed program sees it."""
        return SANDBOX_DIR if self.level == "bwrap" else workdir

    # ----------------------------------------------------------------- running
    def run(
        self,
        argv: list[str],
        *,
        files: dict[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        stdin: bytes | None = None,
        on_line: Callable[[bytes], bool] | None = None,
        started: float | None = None,
        prepared: bool = False,
    ) -> RunResult:
        """Run ``argv`` (first element ``"python"`` means the sandbox interpreter) in a fresh directory.

        Args:
            argv: the command, as seen inside the sandbox; its working directory holds ``files``.
            files: relative path -> content, written (read-only) before the run.
            limits: resource limits.
            stdin: bytes fed on standard input (from a file, so no pipe deadlock).
            on_line: called with each complete stdout line while the run goes on; returning
                ``False`` stops the run (``stopped_early``).
            started: the ``time.monotonic()`` at which the caller's call began (default: now).
                ``limits.wall_s`` counts from it, waiting for a free run slot or uid included:
                a run that cannot start before then returns ``timed_out`` without running.
            prepared: the command first reads one line ``go`` on its standard input and
                only then its files (``stdin`` must be None).  Such runs are started ahead:
                after each one, up to ``spares`` sandboxes for the same command and limits
                are launched in the background -- each with its own uid, directory and
                namespaces, exactly as a run started on demand, used once -- and the next
                call takes one, writes its files and says ``go``.
        """
        argv = [self.interpreter if argv and argv[0] == "python" else argv[0], *argv[1:]] if argv else argv
        if not argv:
            raise ValueError("empty command")
        if prepared and stdin is not None:
            raise ValueError("a prepared run reads 'go' on its standard input: stdin must be None")
        begun = time.monotonic() if started is None else started
        deadline = begun + limits.wall_s
        if not self._concurrency.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return RunResult(None, b"", b"", timed_out=True, wall_s=time.monotonic() - begun)
        try:
            launched = self._take_spare(argv, limits) if prepared else None
            if launched is None:
                launched = self._launch(argv, limits, deadline, stdin, prepared)
                if launched is None:  # no uid became free before the deadline
                    return RunResult(None, b"", b"", timed_out=True, wall_s=time.monotonic() - begun)
            try:
                self._write_files(launched, files or {})
                if prepared:
                    _say_go(launched.process)
                result = None
                try:
                    result = _collect(launched.process, deadline, limits.output_bytes, on_line)
                finally:
                    finished = result is not None and not (
                        result.timed_out or result.output_truncated or result.stopped_early
                    )
                    self._end(launched.process, finished)
                    if self.level == "rlimits" and launched.uid is not None:
                        _kill_uid(launched.uid)
                result.returncode = launched.process.returncode
                result.wall_s = time.monotonic() - begun
                return result
            finally:
                self._dispose(launched)
                if prepared:
                    self._replenish(argv, limits)
        finally:
            self._concurrency.release()

    def _launch(
        self, argv: list[str], limits: Limits, deadline: float, stdin: bytes | None, go_pipe: bool, spare: bool = False
    ) -> "_Launched | None":
        """Lease a uid, make the run's directory and start the command (None: no uid by ``deadline``)."""
        lease_held = self._uids.acquire(deadline) if self._uids is not None else (None, -1)
        if lease_held is None:
            return None
        uid, lease = lease_held
        workdir = tempfile.mkdtemp(prefix=f"reward-sandbox-{os.getpid()}-")
        launched = _Launched(None, workdir, uid, lease)  # type: ignore[arg-type]
        if spare:  # listed from now on, so checks for leftover directories and processes know it
            with self._spare_guard:
                self._starting[workdir] = launched
        try:
            self._prepare_workdir(workdir, stdin, uid)
            command, popen = self._command(argv, limits, workdir, uid)
            if go_pipe:
                stdin_handle = subprocess.PIPE
            else:
                stdin_handle = open(os.path.join(workdir, ".stdin"), "rb") if stdin is not None else subprocess.DEVNULL
            try:
                launched.process = subprocess.Popen(
                    command,
                    stdin=stdin_handle,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=_scrubbed_env(self.workdir_inside(workdir)),
                    **popen,
                )
            finally:
                if stdin is not None and not go_pipe:
                    stdin_handle.close()
        except BaseException:
            self._dispose(launched)
            with self._spare_guard:
                self._starting.pop(workdir, None)
            raise
        return launched

    def _dispose(self, launched: "_Launched") -> None:
        """Remove the run's directory and give its uid back (after its processes are gone)."""
        _remove_tree(launched.workdir)
        if launched.uid is not None and self._uids is not None:
            if self.level == "rlimits":
                _kill_uid(launched.uid)
            self._uids.release(launched.lease)

    # ----------------------------------------------------------------- prepared runs
    @staticmethod
    def _spare_key(argv: list[str], limits: Limits) -> tuple:
        """What a prepared sandbox was launched with (the wall-clock and output caps are the caller's)."""
        return (tuple(argv), limits.memory_bytes, limits.cpu_s, limits.file_size_bytes, limits.open_files, limits.processes)

    def _take_spare(self, argv: list[str], limits: Limits) -> "_Launched | None":
        key, dead = self._spare_key(argv, limits), []
        taken = None
        with self._spare_guard:
            spares = self._spares.get(key, [])
            while spares:
                spare = spares.pop()
                if spare.process.poll() is None:
                    taken = spare
                    break
                dead.append(spare)
        for spare in dead:
            self._end(spare.process, False)
            self._dispose(spare)
        return taken

    def _replenish(self, argv: list[str], limits: Limits) -> None:
        key = self._spare_key(argv, limits)
        with self._spare_guard:
            waiting = len(self._spares.get(key, [])) + self._spares_starting.get(key, 0)
            if self._closed or waiting >= self.spares:
                return
            self._spares_starting[key] = self._spares_starting.get(key, 0) + 1
        with self._spare_guard:
            if self._launcher is None:
                # One long-lived thread launches every spare: bwrap's --die-with-parent (like any
                # PR_SET_PDEATHSIG) fires when the launching THREAD exits, not the process.
                self._launcher = threading.Thread(target=self._launch_spares, name="sandbox-spares", daemon=True)
                self._launcher.start()
        self._spare_jobs.put((argv, limits, key))

    def _launch_spares(self) -> None:
        while True:
            self._start_spare(*self._spare_jobs.get())

    def _start_spare(self, argv: list[str], limits: Limits, key: tuple) -> None:
        launched = None
        try:
            launched = self._launch(argv, limits, time.monotonic() + 30.0, None, True, spare=True)
        except Exception:  # noqa: BLE001 - a spare is an optimisation: the next run starts on demand
            launched = None
        finally:
            with self._spare_guard:
                self._spares_starting[key] -= 1
                if launched is not None:
                    self._starting.pop(launched.workdir, None)
                keep = launched is not None and not self._closed
                if keep:
                    self._spares.setdefault(key, []).append(launched)
        if launched is not None and not keep:
            self._end(launched.process, False)
            self._dispose(launched)

    def close(self) -> None:
        """End the sandboxes prepared ahead; idempotent (runs still work, started on demand)."""
        with self._spare_guard:
            self._closed = True
            spares = [spare for waiting in self._spares.values() for spare in waiting]
            self._spares.clear()
        for spare in spares:
            self._end(spare.process, False)
            self._dispose(spare)

    def _end(self, process: subprocess.Popen, finished: bool) -> None:
        """Make sure nothing of the run survives, and let the launcher reap its own children.

        With namespaces, the launcher's child is PID 1 of the sandbox: killing it tears the
        whole PID namespace down, and the launcher (``bwrap``/``unshare``) then reaps it and
        exits, so no zombie is handed to the host's init.
        """
        if self.level != "rlimits":
            if not finished:
                for child in _children(process.pid):
                    try:
                        os.kill(child, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            try:
                process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(process)
        process.wait()

    @staticmethod
    def _prepare_workdir(workdir: str, stdin: bytes | None, uid: int | None) -> None:
        os.chmod(workdir, 0o700)
        if stdin is not None:
            stdin_path = Path(workdir, ".stdin")
            stdin_path.write_bytes(stdin)
            os.chmod(stdin_path, 0o400)
        if uid is not None:
            os.chown(workdir, uid, uid)

    @staticmethod
    def _write_files(launched: "_Launched", files: dict[str, bytes]) -> None:
        """Write the run's files, read-only; new sub-directories belong to the run's uid."""
        root = Path(launched.workdir).resolve()
        for relative, content in files.items():
            path = Path(launched.workdir, relative)
            if path.resolve().parent != root and root not in path.resolve().parents:
                raise ValueError(f"sandbox file {relative!r} escapes the working directory")
            for parent in reversed(path.relative_to(launched.workdir).parents[:-1]):
                directory = Path(launched.workdir, parent)
                if not directory.exists():
                    directory.mkdir()
                    if launched.uid is not None:
                        os.chown(directory, launched.uid, launched.uid)
            path.write_bytes(content)
            os.chmod(path, 0o444)


_INSTANCES: "weakref.WeakSet[Sandbox]" = weakref.WeakSet()


def spare_pids() -> list[int]:
    """Launcher pids of the sandboxes launched ahead by every Sandbox of this process."""
    return [pid for sandbox in list(_INSTANCES) for pid in sandbox.spare_pids()]


def spare_uids() -> set[int]:
    """Uids held by the sandboxes launched ahead (or being launched) by every Sandbox of this process."""
    return {uid for sandbox in list(_INSTANCES) for uid in sandbox.spare_uids() if uid is not None}


def spare_workdirs() -> list[str]:
    """Working directories of the sandboxes launched ahead (or being launched) in this process."""
    return [workdir for sandbox in list(_INSTANCES) for workdir in sandbox.spare_workdirs()]


@dataclass
class _Launched:
    """A started sandbox: its launcher process, working directory and leased uid."""

    process: subprocess.Popen
    workdir: str
    uid: int | None
    lease: int


def _say_go(process: subprocess.Popen) -> None:
    """Tell a prepared run its files are written (a run that already died just reads nothing)."""
    assert process.stdin is not None
    try:
        process.stdin.write(b"go\n")
        process.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _scrubbed_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def _collect(
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


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _kill_group(process: subprocess.Popen) -> None:
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


def _kill_uid(uid: int) -> None:
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


def _remove_tree(path: str) -> None:
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


# --------------------------------------------------------------------- detection
_PROBE = "import os, socket\nprint('sandbox-ok', os.getuid(), os.getpid())"


def _probe(level: str) -> tuple[Sandbox | None, str]:
    try:
        sandbox = Sandbox(level)
    except SandboxUnavailable as error:
        return None, str(error)
    needed = {"bwrap": "bwrap", "unshare": "unshare"}.get(level)
    if needed and shutil.which(needed) is None:
        return None, f"{needed} is not installed (scripts/install_system_deps.sh installs it)"
    if level == "unshare" and sandbox.is_root and shutil.which("setpriv") is None:
        return None, "setpriv is not installed"
    try:
        result = sandbox.run(["python", "-I", "-c", _PROBE], limits=Limits(wall_s=20.0, cpu_s=20))
    except OSError as error:
        return None, f"{type(error).__name__}: {error}"
    if result.returncode != 0 or not result.stdout.startswith(b"sandbox-ok"):
        why = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
        return None, f"probe exited with {result.returncode}: {why[-1] if why else 'no output'}"
    return sandbox, ""


_selected: Sandbox | None = None
_report: IsolationReport | None = None
_select_lock = threading.Lock()

_WEAKNESSES = {
    "bwrap": (),
    "unshare": (
        "the host file system stays visible with the sandbox uid's permissions "
        "(world-writable directories are replaced by private tmpfs)",
    ),
    "rlimits": (
        "no network isolation (no namespaces available)",
        "world-writable directories (/tmp, /dev/shm...) are writable by the sandboxed program",
        "no PID namespace: the program can see other processes",
    ),
}


def isolation() -> IsolationReport:
    """Detect (once per process) and report the isolation runs use."""
    default_sandbox()
    assert _report is not None
    return _report


def default_sandbox() -> Sandbox:
    """The process-wide sandbox at the strongest working level (detected on first use).

    Raises:
        SandboxUnavailable: when no level works, or ``REWARD_SANDBOX_ISOLATION`` names one that does not.
    """
    global _selected, _report
    with _select_lock:
        if _selected is not None:
            return _selected
        forced = os.environ.get("REWARD_SANDBOX_ISOLATION", "").strip()
        if forced and forced not in LEVELS:
            raise SandboxUnavailable(f"REWARD_SANDBOX_ISOLATION={forced!r}; choose one of {LEVELS}")
        rejected: list[tuple[str, str]] = []
        for level in (forced,) if forced else LEVELS:
            sandbox, why = _probe(level)
            if sandbox is None:
                rejected.append((level, why))
                continue
            weaknesses = list(_WEAKNESSES[level])
            if not sandbox.is_root:
                weaknesses.append("not root: no dedicated uid, so RLIMIT_NPROC is not applied")
                if level == "rlimits":
                    weaknesses.append("not root: the program runs as your user and can signal your processes")
            _selected = sandbox
            _report = IsolationReport(
                level=level,
                interpreter=sandbox.interpreter,
                dedicated_uids=sandbox.is_root,
                weaknesses=tuple(weaknesses),
                rejected=tuple(rejected),
            )
            return sandbox
        details = "; ".join(f"{level}: {why}" for level, why in rejected)
        raise SandboxUnavailable(f"no sandbox isolation level works on this machine ({details})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Report the sandbox isolation used for code rewards.")
    parser.add_argument("--check", action="store_true", help="detect the isolation level and print it")
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 2
    try:
        report = isolation()
    except SandboxUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(report.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
