"""What the sandbox actually enforces, checked from inside it, at every level this machine offers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from reward import sandbox as sandbox_module
from reward.sandbox import LEVELS, Limits, Sandbox

from .conftest import assert_no_stray_processes, sandbox_dirs

PROBE_LIMITS = Limits(wall_s=20.0, cpu_s=5, memory_bytes=512 << 20, file_size_bytes=1 << 20, open_files=64)


def _run(sandbox: Sandbox, code: str, limits: Limits = PROBE_LIMITS, **kwargs):
    return sandbox.run(["python", "-I", "-c", code], limits=limits, **kwargs)


def _available_levels() -> list[str]:
    available = []
    for level in LEVELS:
        sandbox, _ = sandbox_module._probe(level)
        if sandbox is not None:
            available.append(level)
    return available


AVAILABLE = _available_levels()


def test_check_cli_reports_the_level():
    done = subprocess.run(
        [sys.executable, "-m", "reward.sandbox", "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("isolation level: ")
    level = done.stdout.split("\n")[0].split(": ")[1]
    assert level == AVAILABLE[0]


def test_forcing_an_unknown_level_is_a_clear_error():
    env = dict(os.environ, REWARD_SANDBOX_ISOLATION="docker")
    done = subprocess.run(
        [sys.executable, "-m", "reward.sandbox", "--check"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 1 and "REWARD_SANDBOX_ISOLATION" in done.stderr


def test_ci_machine_gets_bubblewrap(isolation_report):
    """On the CI machine kind (root, bubblewrap installed by scripts/install_system_deps.sh)
    the strongest level must be the one in use."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/bwrap"):
        pytest.skip("not the CI machine kind (needs root and /usr/bin/bwrap)")
    assert isolation_report.level == "bwrap" and isolation_report.dedicated_uids
    assert isolation_report.weaknesses == ()


@pytest.fixture(params=AVAILABLE)
def sandbox(request):
    return Sandbox(request.param)


def test_resource_limits_are_in_force(sandbox):
    result = _run(sandbox, "print(open('/proc/self/limits').read())")
    limits = {
        line[:26].strip(): line[26:].split()[:2] for line in result.stdout.decode().splitlines()[1:] if line.strip()
    }
    assert limits["Max address space"] == [str(512 << 20)] * 2
    assert limits["Max cpu time"] == ["5", "5"]
    assert limits["Max file size"] == [str(1 << 20)] * 2
    assert limits["Max open files"] == ["64", "64"]
    assert limits["Max core file size"] == ["0", "0"]
    if os.geteuid() == 0:
        assert limits["Max processes"] == ["64", "64"]


def test_environment_is_scrubbed_and_user_is_unprivileged(sandbox):
    os.environ["REWARD_TEST_SECRET"] = "hunter2"
    try:
        result = _run(sandbox, "import os, json; print(json.dumps([dict(os.environ), os.getuid(), os.geteuid()]))")
    finally:
        del os.environ["REWARD_TEST_SECRET"]
    import json

    environment, uid, euid = json.loads(result.stdout)
    assert set(environment) <= {"PATH", "HOME", "LANG", "TMPDIR", "LC_CTYPE", "PWD", "SHLVL", "_"}
    assert "hunter2" not in result.stdout.decode()
    if os.geteuid() == 0 and sandbox.level != "unshare":
        assert uid != 0 and euid != 0
    if os.geteuid() == 0 and sandbox.level == "unshare":
        assert uid in sandbox.recent_uids()


def test_working_directory_is_fresh_and_removed(sandbox):
    code = "import os; open('mine.txt', 'w').write('x'); print(os.getcwd()); print(sorted(os.listdir('.')))"
    result = _run(sandbox, code, files={"given.txt": b"hello"})
    lines = result.stdout.decode().splitlines()
    assert lines[1] == "['given.txt', 'mine.txt']"
    assert not sandbox_dirs()  # sandboxes launched ahead (spares) excepted


def test_wall_clock_limit_kills_the_run(sandbox):
    started = time.monotonic()
    result = _run(sandbox, "import time\nwhile True: time.sleep(0.01)", limits=Limits(wall_s=1.0, cpu_s=5))
    assert result.timed_out and time.monotonic() - started < 5.0
    assert_no_stray_processes()


def test_a_run_ended_as_its_launcher_starts_leaves_nothing_at_once(sandbox):
    """A run whose limit is over the moment it is launched (as a spare discarded by close(), or a
    caller that waited out its limit for a slot) is ended before the launcher has forked the
    sandbox: ending it must not wait for a child that is not there yet (it waited 2 s, then a
    whole sandbox waiting for its input outlived the run)."""
    for _ in range(5):
        result = _run(sandbox, "import time\ntime.sleep(60)", limits=Limits(wall_s=0.001, cpu_s=5))
        assert result.timed_out
        assert result.wall_s < 1.5, f"ending a run that had just been launched took {result.wall_s:.2f} s"
        assert_no_stray_processes(grace_s=0.5)


def test_output_is_capped(sandbox):
    result = _run(
        sandbox, "import sys\nwhile True: sys.stdout.write('x' * 4096)", limits=Limits(wall_s=10, output_bytes=100_000)
    )
    assert result.output_truncated and len(result.stdout) == 100_000
    assert_no_stray_processes()


def test_stdin_is_delivered(sandbox):
    result = _run(sandbox, "import sys; print(sys.stdin.read()[::-1])", stdin=b"abc")
    assert result.stdout == b"cba\n"


def test_no_network_with_namespaces(sandbox):
    if sandbox.level == "rlimits":
        pytest.skip("the rlimits level has no network namespace (reported as a weakness)")
    code = "import socket\nprint(sorted(name for _, name in socket.if_nameindex()))"
    result = _run(sandbox, code)
    assert result.stdout.decode().strip() == "['lo']"


def test_pid_namespace_hides_host_processes(sandbox):
    if sandbox.level == "rlimits":
        pytest.skip("the rlimits level has no PID namespace (reported as a weakness)")
    result = _run(sandbox, "import os\nprint(os.getpid(), len([p for p in os.listdir('/proc') if p.isdigit()]))")
    pid, visible = map(int, result.stdout.split())
    assert pid in (1, 2) and visible <= 3  # PID 1 is the program or bubblewrap's reaper


def test_bwrap_root_is_read_only_and_host_files_are_absent():
    if "bwrap" not in AVAILABLE:
        pytest.skip("bubblewrap is not available here")
    code = (
        "import os\nfor path in ['/usr/evil', '/etc/evil', '/evil']:\n"
        "    try:\n        open(path, 'w')\n        print('wrote', path)\n    except OSError:\n        pass\n"
        "print(os.path.exists('/root'), os.path.exists('/work'), os.path.exists('/home'))"
    )
    result = _run(Sandbox("bwrap"), code)
    assert result.stdout.decode().strip() == "False False False"
    assert not os.path.exists("/evil") and not os.path.exists("/etc/evil")


def test_rlimits_level_sweeps_escaped_processes_of_its_uid():
    if "rlimits" not in AVAILABLE or os.geteuid() != 0:
        pytest.skip("needs root for a dedicated uid")
    sandbox = Sandbox("rlimits")
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')"
    result = _run(sandbox, code)
    assert result.stdout.strip() == b"parent done"
    for uid in sandbox.recent_uids():
        assert sandbox_module.processes_of_uid(uid) == []


WAIT_FOR_GO = (
    "import os, sys\n"
    "if sys.stdin.readline() != 'go\\n':\n    sys.exit(0)\n"
    "print(os.getuid(), os.getcwd(), sorted(os.listdir('.')), open('given.txt').read())\n"
    "open('mine.txt', 'w').write('x')\n"
)


def test_prepared_runs_use_a_fresh_sandbox_each_launched_ahead(sandbox):
    """Spares are whole sandboxes started before their problem: one per run, never reused;
    a spare survives the exit of the thread that asked for it (bwrap's --die-with-parent
    follows the launching thread: spares come from one long-lived thread)."""
    seen = []

    def one_run(index: int) -> None:
        result = sandbox.run(
            ["python", "-I", "-c", WAIT_FOR_GO],
            files={"given.txt": f"run {index}".encode()},
            limits=PROBE_LIMITS,
            prepared=True,
        )
        seen.append(result.stdout.decode().strip())

    try:
        for index in range(3):
            thread = threading.Thread(target=one_run, args=(index,))  # a short-lived caller thread
            thread.start()
            thread.join()
            deadline = time.monotonic() + 20
            while not sandbox.spare_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sandbox.spare_pids(), "no sandbox was launched ahead"
            time.sleep(0.3)  # the spare must outlive the caller thread that triggered it
            assert all(os.path.exists(f"/proc/{pid}") for pid in sandbox.spare_pids())
        assert [line.split(" ", 1)[1].endswith(f"['given.txt'] run {i}") for i, line in enumerate(seen)] == [True] * 3
        if sandbox.is_root:
            assert len({line.split()[0] for line in seen}) == 3  # a uid of its own per run
    finally:
        sandbox.close()
    assert not sandbox.spare_pids()
    assert_no_stray_processes()
    assert not sandbox_dirs()


def test_a_forked_process_does_not_take_its_parents_spares():
    """verl may fork reward workers: a child must never write into (or say 'go' to) a sandbox
    its parent launched ahead; it starts with none of its own."""
    sandbox = Sandbox(sandbox_module.default_sandbox().level)
    try:
        sandbox.run(["python", "-I", "-c", WAIT_FOR_GO], files={"given.txt": b"x"}, limits=PROBE_LIMITS, prepared=True)
        deadline = time.monotonic() + 20
        while not sandbox.spare_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        parents = sandbox.spare_pids()
        assert parents
        pid = os.fork()
        if pid == 0:
            os._exit(0 if sandbox.spare_pids() == [] and sandbox.spare_workdirs() == [] else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child saw its parent's spares"
        assert sandbox.spare_pids() == parents
    finally:
        sandbox.close()


def test_the_leftover_check_leaves_a_uid_another_process_leases_now_to_that_process(tmp_path):
    """tests/reward/conftest.py's stray check looks at the uids this process used; one of them may
    since be leased by another scorer (a test on another pytest-xdist worker): while that process
    holds the lease, its processes are not this test's leftovers."""
    from reward.sandbox.uids import UID_COUNT, is_leased, uid_base, uid_lock_dir

    uid = uid_base() + UID_COUNT - 1
    os.makedirs(uid_lock_dir(), exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
            os.path.join(uid_lock_dir(), str(uid)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert is_leased(uid)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert not is_leased(uid)
