"""The command line and ``Popen`` arguments of one run at each isolation level."""

from __future__ import annotations

import os
import sys

from reward.sandbox.base import Limits

SANDBOX_DIR = "/sandbox"
"""Where the working directory appears inside a ``bwrap`` sandbox."""

_WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")


def find_interpreter() -> str:
    """A Python the unprivileged sandbox user can run: the system one if present."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment of a run."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def workdir_inside(level: str, workdir: str) -> str:
    """The path of the working directory as the sandboxed program sees it."""
    return SANDBOX_DIR if level == "bwrap" else workdir


def _limits_prefix(prlimit: str, limits: Limits, dedicated_uid: bool) -> list[str]:
    prefix = [
        prlimit,
        f"--as={limits.memory_bytes}",
        f"--cpu={limits.cpu_s}",
        f"--fsize={limits.file_size_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
    ]
    if dedicated_uid:
        prefix.append(f"--nproc={limits.processes}")
    return prefix + ["--"]


def _bwrap_prefix(workdir: str, interpreter: str) -> list[str]:
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
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(interpreter)))
    if not prefix.startswith("/usr") and prefix != "/":
        args += ["--ro-bind", prefix, prefix]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
    args += ["--bind", workdir, SANDBOX_DIR, "--remount-ro", "/"]
    args += ["--chdir", SANDBOX_DIR, "--hostname", "sandbox", "--"]
    return args


def _unshare_prefix(uid: int | None) -> list[str]:
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


def command(
    level: str,
    argv: list[str],
    limits: Limits,
    workdir: str,
    uid: int | None,
    *,
    prlimit: str,
    interpreter: str,
    dedicated_uids: bool,
) -> tuple[list[str], dict]:
    """(command line, ``Popen`` keyword arguments) running ``argv`` in ``workdir`` at ``level``.

    ``uid``: the run's dedicated uid (None without one); ``dedicated_uids``: whether this
    sandbox leases them (then ``RLIMIT_NPROC`` applies).
    """
    popen: dict = {"start_new_session": True, "close_fds": True, "cwd": workdir}
    inner = _limits_prefix(prlimit, limits, dedicated_uids) + argv
    if level == "bwrap":
        if uid is not None:
            popen.update(user=uid, group=uid, extra_groups=[])
        return _bwrap_prefix(workdir, interpreter) + inner, popen
    if level == "unshare":
        return _unshare_prefix(uid) + inner, popen
    if uid is not None:
        popen.update(user=uid, group=uid, extra_groups=[])
    return inner, popen
