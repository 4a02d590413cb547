"""Sandboxes launched ahead for prepared runs (``Sandbox.run(prepared=True)``).

After each prepared run, up to ``size`` sandboxes for the same command and limits are launched in
the background, each exactly as a run started on demand (its own uid, directory and namespaces)
and waiting for ``go`` on its standard input; the next run takes one. Each is used once.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable

from reward.sandbox.base import Launched, Limits

SPARE_START_S = 30.0
"""How long launching one spare may wait for a free uid."""


def _key(argv: list[str], limits: Limits) -> tuple:
    """What a prepared sandbox was launched with (the wall-clock and output caps are the caller's)."""
    return (tuple(argv), limits.memory_bytes, limits.cpu_s, limits.file_size_bytes, limits.open_files, limits.processes)


class SparePool:
    """The spares of one :class:`reward.sandbox.Sandbox`; thread-safe.

    ``launch(argv, limits, deadline, note)`` starts a prepared sandbox (None: no uid by
    ``deadline``) and calls ``note`` with it as soon as its directory exists; ``discard`` ends
    and removes a sandbox that will not be used.
    """

    def __init__(
        self,
        size: int,
        launch: Callable[[list[str], Limits, float, Callable[[Launched], None]], Launched | None],
        discard: Callable[[Launched], None],
    ) -> None:
        self.size = size
        self._launch, self._discard = launch, discard
        self._closed = False
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """Start empty; in a forked child, the spares belong to the parent (their pipes too)."""
        self._waiting: dict[tuple, list[Launched]] = {}
        self._starting_count: dict[tuple, int] = {}
        self._starting: dict[str, Launched] = {}
        """Working directory -> the sandbox being launched ahead there."""
        self._guard = threading.Lock()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._launcher: threading.Thread | None = None

    def _all(self) -> list[Launched]:
        """The spares, waiting or being launched (the caller holds the guard)."""
        return [spare for spares in self._waiting.values() for spare in spares] + list(self._starting.values())

    def uids(self) -> set[int | None]:
        """Uids held by the spares, waiting or being launched."""
        with self._guard:
            return {spare.uid for spare in self._all()}

    def pids(self) -> list[int]:
        """Launcher process ids of the spares."""
        with self._guard:
            return [spare.process.pid for spare in self._all() if spare.process is not None]

    def workdirs(self) -> list[str]:
        """Working directories of the spares, including those still starting."""
        with self._guard:
            return [spare.workdir for spare in self._all()]

    def take(self, argv: list[str], limits: Limits) -> Launched | None:
        """A live spare for this command and limits, or None (dead ones found on the way are discarded)."""
        key, dead = _key(argv, limits), []
        taken = None
        with self._guard:
            spares = self._waiting.get(key, [])
            while spares:
                spare = spares.pop()
                if spare.process.poll() is None:
                    taken = spare
                    break
                dead.append(spare)
        for spare in dead:
            self._discard(spare)
        return taken

    def replenish(self, argv: list[str], limits: Limits) -> None:
        """Launch one more spare for this command and limits in the background, up to ``size``."""
        key = _key(argv, limits)
        with self._guard:
            waiting = len(self._waiting.get(key, [])) + self._starting_count.get(key, 0)
            if self._closed or waiting >= self.size:
                return
            self._starting_count[key] = self._starting_count.get(key, 0) + 1
        with self._guard:
            if self._launcher is None:
                # One long-lived thread launches every spare: bwrap's --die-with-parent (like any
                # PR_SET_PDEATHSIG) fires when the launching THREAD exits, not the process.
                self._launcher = threading.Thread(target=self._launch_all, name="sandbox-spares", daemon=True)
                self._launcher.start()
        self._jobs.put((argv, limits, key))

    def _launch_all(self) -> None:
        while True:
            self._start(*self._jobs.get())

    def _start(self, argv: list[str], limits: Limits, key: tuple) -> None:
        with self._guard:
            if self._closed:  # queued before close(): launching it now would only leave a process to end
                self._starting_count[key] -= 1
                return
        noted: list[Launched] = []

        def note(launched: Launched) -> None:  # listed from now on, so checks for leftovers know it
            with self._guard:
                self._starting[launched.workdir] = launched
            noted.append(launched)

        launched = None
        try:
            launched = self._launch(argv, limits, time.monotonic() + SPARE_START_S, note)
        except Exception:  # noqa: BLE001 - a spare is an optimisation: the next run starts on demand
            launched = None
        finally:
            with self._guard:
                self._starting_count[key] -= 1
                for started in noted:
                    self._starting.pop(started.workdir, None)
                keep = launched is not None and not self._closed
                if keep:
                    self._waiting.setdefault(key, []).append(launched)
        if launched is not None and not keep:
            self._discard(launched)

    def close(self) -> None:
        """End the waiting spares and launch no more; idempotent."""
        with self._guard:
            self._closed = True
            spares = [spare for waiting in self._waiting.values() for spare in waiting]
            self._waiting.clear()
        for spare in spares:
            self._discard(spare)
