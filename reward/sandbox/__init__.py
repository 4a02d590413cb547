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

Strong and weak: ``bwrap``, and ``unshare`` as root (a dedicated uid), are strong (no network,
the launching user's files neither readable nor writable); ``rlimits``, and ``unshare`` without
root (your own user), are weak (:func:`~reward.sandbox.detect.is_strong`).  A GPU launch sets
``REWARD_SANDBOX_REQUIRE_STRONG=1``; there :func:`default_sandbox` refuses a weak level, naming the
node and the fix, unless ``REWARD_SANDBOX_ALLOW_WEAK=1`` (said once per process);
``python -m reward.sandbox --check --require-strong`` is the node set-up's check.

The parts, one job each: :mod:`~reward.sandbox.detect` (probing the levels, the report),
:mod:`~reward.sandbox.uids` (leasing uids), :mod:`~reward.sandbox.commands` (each level's command),
:mod:`~reward.sandbox.runner` (one run, :class:`Sandbox`), :mod:`~reward.sandbox.spares` (the
sandboxes launched ahead), :mod:`~reward.sandbox.processes` (capturing output, cleaning up).
"""

# The public names, as when this was one module (python -m reward.sandbox --check: __main__.py).
# ruff: noqa: F401
from reward.sandbox.base import DEFAULT_LIMITS, LEVELS, MAX_CONCURRENT_RUNS, Limits, RunResult, SandboxUnavailable
from reward.sandbox.commands import SANDBOX_DIR
from reward.sandbox.detect import IsolationReport, _probe, default_sandbox, isolation, main
from reward.sandbox.processes import processes_of_uid
from reward.sandbox.runner import Sandbox, spare_pids, spare_uids, spare_workdirs
from reward.sandbox.uids import DEFAULT_UID_BASE, UID_COUNT, UID_LOCK_DIR
