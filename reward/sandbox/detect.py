"""Which isolation level works here: each level is probed by actually running a program in it."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from reward.sandbox.base import LEVELS, Limits, SandboxUnavailable
from reward.sandbox.runner import Sandbox
from reward.sandbox.uids import uid_base


@dataclass(frozen=True)
class IsolationReport:
    """Which isolation runs use here, as detected by actually running a probe."""

    level: str
    interpreter: str
    dedicated_uids: bool
    weaknesses: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def strong(self) -> bool:
        """Whether the sandboxed program can neither reach the network nor read or write the
        launching user's files (see :func:`is_strong`)."""
        return is_strong(self.level, self.dedicated_uids)

    def describe(self) -> str:
        lines = [
            f"isolation level: {self.level}",
            "strength: "
            + (
                "strong (no network; the user's files neither readable nor writable)"
                if self.strong
                else "WEAK (refused in GPU launches without REWARD_SANDBOX_ALLOW_WEAK=1)"
            ),
            f"python interpreter inside the sandbox: {self.interpreter}",
            "processes run as: "
            + (
                f"a dedicated unprivileged uid per concurrent run (from {uid_base()})"
                if self.dedicated_uids
                else f"the current user (uid {os.getuid()}); RLIMIT_NPROC not applied"
            ),
        ]
        lines += [f"weakness: {w}" for w in self.weaknesses]
        lines += [f"not available: {level}: {why}" for level, why in self.rejected]
        return "\n".join(lines)


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


# A GPU launch sets REQUIRE_STRONG_ENV (scripts/launch/ray_cluster.sh on a GPU node, dfpo.main's
# driver in the runtime environment of every Ray worker of a GPU run): there, a weak level is
# refused unless ALLOW_WEAK_ENV says so, explicitly. CPU runs and tests set neither.
REQUIRE_STRONG_ENV = "REWARD_SANDBOX_REQUIRE_STRONG"
ALLOW_WEAK_ENV = "REWARD_SANDBOX_ALLOW_WEAK"
_TRUE = ("1", "true", "yes", "on")


class WeakSandboxRefused(SandboxUnavailable, ValueError):
    """A GPU launch's node has only a weak level and did not opt in. Also a ``ValueError``: the
    reward's guard re-raises input errors (``reward.guard.INPUT_ERRORS``: "to be fixed, not
    scored"), so a reward worker on such a node stops the run instead of scoring every code
    response 0."""


def is_strong(level: str, dedicated_uids: bool) -> bool:
    """``bwrap`` at any uid (the program sees an empty root with read-only ``/usr`` and its
    interpreter, a private ``/tmp`` and its own directory; no network), or ``unshare`` under a
    dedicated unprivileged uid (root: no network, nothing of the host writable, only what is
    world-readable readable; the Ray token and the runs' files are the user's and private).
    ``unshare`` without root runs as your own user (mapped to root in its namespace): it can read
    and write everything you can, Ray's token and this repository's reward code included, so it is
    weak, as is ``rlimits`` (no namespaces: also the network)."""
    return level == "bwrap" or (level == "unshare" and dedicated_uids)


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in _TRUE


def strong_required(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process belongs to a GPU launch (``REWARD_SANDBOX_REQUIRE_STRONG=1``)."""
    return _flag(os.environ if environ is None else environ, REQUIRE_STRONG_ENV)


def weak_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the launch opted in to a weak level (``REWARD_SANDBOX_ALLOW_WEAK=1``)."""
    return _flag(os.environ if environ is None else environ, ALLOW_WEAK_ENV)


FIX = (
    "install bubblewrap (bash scripts/install_system_deps.sh) and let it create user namespaces: "
    "sysctl -w kernel.unprivileged_userns_clone=1 (Debian/Ubuntu kernels) and user.max_user_namespaces>0; "
    "on Ubuntu 23.10+/24.04 also kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap); "
    "or run as root (bwrap or unshare with a dedicated uid per run); then check with python -m reward.sandbox --check"
)


def weak_refusal(report: IsolationReport | None, why: str = "", host: str | None = None) -> str:
    """The message that stops a GPU launch on this node: the node, what it has, the fix, the opt-in."""
    host = host or socket.gethostname()
    has = (
        f"only the weak level {report.level} works ({'; '.join(report.weaknesses)})"
        if report
        else f"no level works ({why})"
    )
    rejected = "; ".join(f"{level}: {reason}" for level, reason in report.rejected) if report else ""
    return (
        f"node {host}: the code-reward sandbox cannot isolate untrusted code here: {has}"
        + (f" [not available: {rejected}]" if rejected else "")
        + (
            ". Model-written code would run as your user, reading and writing everything you can (Ray's token, shared "
            "storage, this repository's reward code)"
            if report and report.level == "unshare"
            else ". Model-written code would reach the network and the host's files (running as your user, without "
            "root: "
            "everything you can read and write, Ray's token and shared storage included)"
        )
        + f". Fix: {FIX}."
        + (
            f" Or opt in to the weak level explicitly, on every node and the driver: export {ALLOW_WEAK_ENV}=1"
            " (a math-only run, whose data has no code source, never runs the sandbox)"
            if report
            else ""
        )
    )


def weak_warning(report: IsolationReport, host: str | None = None) -> str:
    """The loud line a launch that opted in to a weak level prints at its start."""
    host = host or socket.gethostname()
    return (
        f"WARNING: node {host}: {ALLOW_WEAK_ENV}=1: model-written code runs in the WEAK sandbox level "
        f"{report.level} ({'; '.join(report.weaknesses)}). Fix: {FIX}"
    )


_warned = False


def require_strong(report: IsolationReport, environ: Mapping[str, str] | None = None, say=None) -> None:
    """In a GPU launch (:func:`strong_required`), refuse a weak ``report`` unless the launch opted in
    (:func:`weak_allowed`), which is said once per process through ``say`` (default: stderr).

    Raises:
        WeakSandboxRefused: naming this node, the fix and the opt-in.
    """
    global _warned
    environ = os.environ if environ is None else environ
    if report.strong or not strong_required(environ):
        return
    if not weak_allowed(environ):
        raise WeakSandboxRefused(weak_refusal(report))
    if not _warned:
        _warned = True
        (say or (lambda text: print(text, file=sys.stderr, flush=True)))(weak_warning(report))


def node_check(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """This node as a GPU launch sees it (one Ray task per node runs it: dfpo.main's TaskRunner):
    ``host``, ``level`` (None when none works), ``strong``, and ``refusal`` (None when the node may
    score code: strong, or the launch opted in, whose warning is then printed here, on the node)."""
    environ = {**(os.environ if environ is None else environ), REQUIRE_STRONG_ENV: "1"}
    host = socket.gethostname()
    try:
        report = isolation()
    except SandboxUnavailable as error:
        return {"host": host, "level": None, "strong": False, "refusal": weak_refusal(None, str(error), host)}
    try:
        require_strong(report, environ)
    except SandboxUnavailable as error:
        return {"host": host, "level": report.level, "strong": False, "refusal": str(error)}
    return {"host": host, "level": report.level, "strong": report.strong, "refusal": None}


def refuse_weak_nodes(results: list[dict[str, object]]) -> None:
    """Stop a launch when any node's :func:`node_check` refused, naming every such node.

    Raises:
        SandboxUnavailable: one line per refused node.
    """
    refused = [result for result in results if result["refusal"]]
    if refused:
        hosts = ", ".join(str(result["host"]) for result in refused)
        raise SandboxUnavailable(
            f"the code-reward sandbox is weak or missing on {len(refused)} of {len(results)} node(s) ({hosts}):\n"
            + "\n".join(str(result["refusal"]) for result in refused)
        )


def isolation() -> IsolationReport:
    """Detect (once per process) and report the isolation runs use (weak or not: a report)."""
    _select()
    assert _report is not None
    return _report


def default_sandbox() -> Sandbox:
    """The process-wide sandbox at the strongest working level (detected on first use).

    In a GPU launch (``REWARD_SANDBOX_REQUIRE_STRONG=1``) a weak level is refused unless
    ``REWARD_SANDBOX_ALLOW_WEAK=1`` (:func:`require_strong`): model-written code never runs weakly
    there in silence.

    Raises:
        SandboxUnavailable: when no level works, or ``REWARD_SANDBOX_ISOLATION`` names one that does not,
            or (GPU launch) only a weak level works and the launch did not opt in to it.
    """
    sandbox = _select()
    assert _report is not None
    require_strong(_report)
    return sandbox


def _select() -> Sandbox:
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
    """``python -m reward.sandbox --check [--require-strong]``: print the isolation report; exit 1
    when no level works, or (``--require-strong``, or ``REWARD_SANDBOX_REQUIRE_STRONG=1``: a GPU
    launch's node check) when only a weak level works and ``REWARD_SANDBOX_ALLOW_WEAK=1`` is not set,
    naming this node and the fix."""
    parser = argparse.ArgumentParser(description="Report the sandbox isolation used for code rewards.")
    parser.add_argument("--check", action="store_true", help="detect the isolation level and print it")
    parser.add_argument(
        "--require-strong",
        action="store_true",
        help="a GPU launch's node check: fail unless the level is strong (bwrap; unshare as root), or "
        f"{ALLOW_WEAK_ENV}=1",
    )
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 2
    required = args.require_strong or strong_required()
    try:
        report = isolation()
    except SandboxUnavailable as error:
        print(f"error: {weak_refusal(None, str(error)) if required else error}", file=sys.stderr)
        return 1
    print(report.describe(), flush=True)
    if required:
        try:
            require_strong(report, environ={**os.environ, REQUIRE_STRONG_ENV: "1"})
        except SandboxUnavailable as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0
