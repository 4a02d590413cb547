"""Which isolation level works here: each level is probed by actually running a program in it."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
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

    def describe(self) -> str:
        lines = [
            f"isolation level: {self.level}",
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
    """``python -m reward.sandbox --check``: print the isolation report (exit 1 when none works)."""
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

