"""The :class:`Sandbox`: one run from its fresh directory to its teardown, at one isolation level."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from reward.sandbox import commands
from reward.sandbox.base import DEFAULT_LIMITS, LEVELS, Launched, Limits, RunResult, SandboxUnavailable
from reward.sandbox.processes import collect, end_run, kill_uid, remove_tree, say_go
from reward.sandbox.slots import RunSlots, check_max_runs, default_max_runs, slot_lock_dir
from reward.sandbox.spares import SparePool
from reward.sandbox.uids import UID_COUNT, UidLeases, uid_base, uid_lock_dir


class Sandbox:
    """Runs commands at one isolation level; thread-safe, at most ``max_runs`` runs at a time.

    ``max_runs``: run slots, host-wide (:mod:`reward.sandbox.slots`): every process whose
    sandboxes use the same ``slot_dir`` (default: one per host and user) shares them.  Default
    ``REWARD_SANDBOX_MAX_RUNS``, else the cores this process may use.
    ``spares``: how many sandboxes per command to keep launched ahead for ``prepared`` runs.
    """

    def __init__(
        self,
        level: str,
        interpreter: str | None = None,
        max_runs: int | None = None,
        spares: int = 2,
        slot_dir: str | None = None,
    ) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown isolation level {level!r}; choose one of {LEVELS}")
        self.level = level
        self.interpreter = interpreter or commands.find_interpreter()
        self.is_root = os.geteuid() == 0
        self._uids = UidLeases(uid_base(), UID_COUNT, uid_lock_dir()) if self.is_root else None
        max_runs = default_max_runs() if max_runs is None else check_max_runs(max_runs, "Sandbox max_runs")
        self._slots = RunSlots(max_runs, slot_dir or slot_lock_dir())
        self._spares = SparePool(
            spares,
            lambda argv, limits, deadline, note: self._launch(argv, limits, deadline, None, True, note),
            self._discard,
        )
        atexit.register(self.close)
        _INSTANCES.add(self)
        self._prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
        if not os.access(self._prlimit, os.X_OK):
            raise SandboxUnavailable("prlimit (util-linux) is missing; run scripts/install_system_deps.sh")

    @property
    def max_runs(self) -> int:
        """How many runs may go at once (host-wide, see :mod:`reward.sandbox.slots`)."""
        return self._slots.capacity

    def set_max_runs(self, max_runs: int, name: str = "max_runs") -> None:
        """Allow ``max_runs`` runs at once from now on; a bad value is a ValueError naming ``name``."""
        self._slots.resize(max_runs, name)

    @property
    def spares(self) -> int:
        """Sandboxes kept launched ahead per command and limits (``run(prepared=True)``)."""
        return self._spares.size

    def recent_uids(self) -> list[int]:
        """The dedicated uids this Sandbox used most recently, spares excepted (empty when not root)."""
        if self._uids is None:
            return []
        waiting = self.spare_uids()
        return [uid for uid in self._uids.recent if uid not in waiting]

    def spare_uids(self) -> set[int | None]:
        """Uids held by this Sandbox's spares, waiting or being launched."""
        return self._spares.uids()

    def spare_pids(self) -> list[int]:
        """Launcher process ids of the sandboxes launched ahead (see ``run(prepared=True)``)."""
        return self._spares.pids()

    def spare_workdirs(self) -> list[str]:
        """Working directories of the sandboxes launched ahead, including those still starting."""
        return self._spares.workdirs()

    def workdir_inside(self, workdir: str) -> str:
        """The path of the working directory as the sandboxed program sees it."""
        return commands.workdir_inside(self.level, workdir)

    def close(self) -> None:
        """End the sandboxes prepared ahead; idempotent (runs still work, started on demand)."""
        self._spares.close()

    # ----------------------------------------------------------------- running
    def run(
        self,
        argv: list[str],
        *,
        files: dict[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        stdin: bytes | None = None,
        on_line: Callable[[bytes], bool] | None = None,
        queue_deadline: float | None = None,
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
            queue_deadline: the ``time.monotonic()`` by which the run must have its slot (None:
                wait as long as it takes); past it the run returns ``not_started`` without
                running.  Waiting for the slot is not part of the run: ``limits.wall_s`` counts
                from the moment the run gets it.
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
        queued = time.monotonic()
        slot = self._slots.acquire(queue_deadline)
        begun = time.monotonic()
        if slot is None:
            return RunResult(None, b"", b"", not_started=True, queued_s=begun - queued)
        deadline = begun + limits.wall_s
        try:
            launched = self._spares.take(argv, limits) if prepared else None
            if launched is None:
                launched = self._launch(argv, limits, deadline, stdin, prepared)
                if launched is None:  # no uid became free before the deadline
                    return RunResult(
                        None, b"", b"", timed_out=True, wall_s=time.monotonic() - begun, queued_s=begun - queued
                    )
            try:
                self._write_files(launched, files or {})
                if prepared:
                    say_go(launched.process)
                result = None
                try:
                    result = collect(launched.process, deadline, limits.output_bytes, on_line)
                finally:
                    finished = result is not None and not (
                        result.timed_out or result.output_truncated or result.stopped_early
                    )
                    end_run(launched.process, finished, self.level != "rlimits")
                    if self.level == "rlimits" and launched.uid is not None:
                        kill_uid(launched.uid)
                result.returncode = launched.process.returncode
                result.wall_s, result.queued_s = time.monotonic() - begun, begun - queued
                return result
            finally:
                self._dispose(launched)
                if prepared:
                    self._spares.replenish(argv, limits)
        finally:
            self._slots.release(slot)

    def _launch(
        self,
        argv: list[str],
        limits: Limits,
        deadline: float,
        stdin: bytes | None,
        go_pipe: bool,
        note: Callable[[Launched], None] | None = None,
    ) -> Launched | None:
        """Lease a uid, make the run's directory and start the command (None: no uid by ``deadline``).

        ``note`` is called with the run as soon as its directory exists (the spare pool lists it).
        """
        lease_held = self._uids.acquire(deadline) if self._uids is not None else (None, -1)
        if lease_held is None:
            return None
        uid, lease = lease_held
        workdir = tempfile.mkdtemp(prefix=f"reward-sandbox-{os.getpid()}-")
        launched = Launched(None, workdir, uid, lease)  # type: ignore[arg-type]
        if note is not None:
            note(launched)
        try:
            self._prepare_workdir(workdir, stdin, uid)
            command, popen = commands.command(
                self.level,
                argv,
                limits,
                workdir,
                uid,
                prlimit=self._prlimit,
                interpreter=self.interpreter,
                dedicated_uids=self._uids is not None,
            )
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
                    env=commands.scrubbed_env(self.workdir_inside(workdir)),
                    **popen,
                )
            finally:
                if stdin is not None and not go_pipe:
                    stdin_handle.close()
        except BaseException:
            self._dispose(launched)
            raise
        return launched

    def _dispose(self, launched: Launched) -> None:
        """Remove the run's directory and give its uid back (after its processes are gone)."""
        remove_tree(launched.workdir)
        if launched.uid is not None and self._uids is not None:
            if self.level == "rlimits":
                kill_uid(launched.uid)
            self._uids.release(launched.lease)

    def _discard(self, launched: Launched) -> None:
        """End and remove a sandbox launched ahead that will not run."""
        end_run(launched.process, False, self.level != "rlimits")
        self._dispose(launched)

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
    def _write_files(launched: Launched, files: dict[str, bytes]) -> None:
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


_INSTANCES: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def spare_pids() -> list[int]:
    """Launcher pids of the sandboxes launched ahead by every Sandbox of this process."""
    return [pid for sandbox in list(_INSTANCES) for pid in sandbox.spare_pids()]


def spare_uids() -> set[int]:
    """Uids held by the sandboxes launched ahead (or being launched) by every Sandbox of this process."""
    return {uid for sandbox in list(_INSTANCES) for uid in sandbox.spare_uids() if uid is not None}


def spare_workdirs() -> list[str]:
    """Working directories of the sandboxes launched ahead (or being launched) in this process."""
    return [workdir for sandbox in list(_INSTANCES) for workdir in sandbox.spare_workdirs()]
