"""A GPU launch never runs model-written code in a weak sandbox in silence (docs/rewards.md,
"Sandbox isolation"): with ``REWARD_SANDBOX_REQUIRE_STRONG=1`` (set by the launch) a weak level is
refused, naming the node and the fix, unless ``REWARD_SANDBOX_ALLOW_WEAK=1`` (then said, once).
A node without bubblewrap and unshare is simulated by a PATH without them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from reward.sandbox import SandboxUnavailable, detect
from reward.sandbox.detect import IsolationReport, is_strong, node_check, refuse_weak_nodes

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = socket.gethostname()
WEAK = IsolationReport(
    level="rlimits", interpreter="/usr/bin/python3", dedicated_uids=True, weaknesses=("no network isolation",)
)


def path_without_namespace_tools(directory: Path) -> str:
    """A PATH with every program of /usr/bin and /bin except bwrap and unshare: a node where only
    the rlimits level works. ``directory`` must be reachable by the sandbox's uid (not under
    pytest's private tmp_path): the sandbox runs ``prlimit`` from PATH."""
    directory.mkdir(mode=0o755, exist_ok=True)
    for folder in ("/usr/bin", "/bin"):
        for entry in os.scandir(folder):
            if entry.name not in ("bwrap", "unshare") and not (directory / entry.name).exists():
                (directory / entry.name).symlink_to(entry.path)
    return str(directory)


def test_strong_levels_are_bwrap_and_unshare_with_a_dedicated_uid():
    assert is_strong("bwrap", True) and is_strong("bwrap", False)
    assert is_strong("unshare", True)
    assert not is_strong("unshare", False)  # runs as your user: your files, Ray's token
    assert not is_strong("rlimits", True) and not is_strong("rlimits", False)


def test_default_sandbox_refuses_a_weak_level_in_a_gpu_launch_unless_opted_in(monkeypatch, capsys):
    selected = object()
    monkeypatch.setattr(detect, "_selected", selected)
    monkeypatch.setattr(detect, "_report", WEAK)
    monkeypatch.setattr(detect, "_warned", False)
    monkeypatch.delenv("REWARD_SANDBOX_ALLOW_WEAK", raising=False)
    monkeypatch.delenv("REWARD_SANDBOX_REQUIRE_STRONG", raising=False)
    assert detect.default_sandbox() is selected  # CPU runs and tests: as before, no word
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("REWARD_SANDBOX_REQUIRE_STRONG", "1")
    with pytest.raises(
        SandboxUnavailable,
        match=f"node {HOST}: .*weak level rlimits.*install_system_deps.sh.*REWARD_SANDBOX_ALLOW_WEAK=1",
    ):
        detect.default_sandbox()
    monkeypatch.setenv("REWARD_SANDBOX_ALLOW_WEAK", "1")
    assert detect.default_sandbox() is selected and detect.default_sandbox() is selected
    err = capsys.readouterr().err
    assert err.count(f"WARNING: node {HOST}: REWARD_SANDBOX_ALLOW_WEAK=1") == 1  # once per process
    assert detect.isolation() is WEAK  # the report itself is never refused


@pytest.fixture(scope="module")
def node_path():
    """:func:`path_without_namespace_tools` in a directory every uid can reach."""
    directory = Path(tempfile.mkdtemp(prefix="dfpo-no-bwrap-"))
    directory.chmod(0o755)
    try:
        yield path_without_namespace_tools(directory / "bin")
    finally:
        shutil.rmtree(directory)


def _check_cli(tmp_path: Path, node_path: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": node_path, "HOME": str(tmp_path), **env}
    return subprocess.run(
        [sys.executable, "-m", "reward.sandbox", "--check", "--require-strong"],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_node_check_without_bwrap_and_unshare_names_the_node_and_the_fix(tmp_path, node_path):
    refused = _check_cli(tmp_path, node_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout.startswith("isolation level: rlimits\nstrength: WEAK")
    assert f"error: node {HOST}: the code-reward sandbox cannot isolate untrusted code here" in refused.stderr
    for fix in (
        "scripts/install_system_deps.sh",
        "kernel.unprivileged_userns_clone=1",
        "kernel.apparmor_restrict_unprivileged_userns=0",
        "REWARD_SANDBOX_ALLOW_WEAK=1",
    ):
        assert fix in refused.stderr
    allowed = _check_cli(tmp_path, node_path, REWARD_SANDBOX_ALLOW_WEAK="1")
    assert allowed.returncode == 0, allowed.stderr
    assert (
        f"WARNING: node {HOST}: REWARD_SANDBOX_ALLOW_WEAK=1: model-written code runs in the WEAK sandbox level rlimits"
        in allowed.stderr
    )


def test_every_refused_node_is_named(monkeypatch):
    monkeypatch.setenv("REWARD_SANDBOX_ISOLATION", "rlimits")
    monkeypatch.setattr(detect, "_selected", object())
    monkeypatch.setattr(detect, "_report", WEAK)
    monkeypatch.delenv("REWARD_SANDBOX_ALLOW_WEAK", raising=False)
    here = node_check()
    assert (
        here["host"] == HOST
        and here["level"] == "rlimits"
        and not here["strong"]
        and f"node {HOST}:" in here["refusal"]
    )
    fine = {"host": "gpu-a", "level": "bwrap", "strong": True, "refusal": None}
    refuse_weak_nodes([fine])
    with pytest.raises(SandboxUnavailable, match=rf"weak or missing on 2 of 3 node\(s\) \({HOST}, gpu-c\)"):
        refuse_weak_nodes([here, fine, {**here, "host": "gpu-c"}])
    monkeypatch.setenv("REWARD_SANDBOX_ALLOW_WEAK", "1")
    assert node_check()["refusal"] is None


def test_a_reward_worker_on_a_weak_node_stops_the_run_instead_of_scoring_code_0(monkeypatch):
    """The refusal passes the reward's guard (an input error: to be fixed, not scored), so a reward
    worker that meets a weak node the launch checks missed fails the step, loudly."""
    import json

    from reward.score import compute_score

    problem = json.dumps({"tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}], "fn_name": None})
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    monkeypatch.setattr(detect, "_selected", object())
    monkeypatch.setattr(detect, "_report", WEAK)
    monkeypatch.setenv("REWARD_SANDBOX_REQUIRE_STRONG", "1")
    monkeypatch.delenv("REWARD_SANDBOX_ALLOW_WEAK", raising=False)
    with pytest.raises(detect.WeakSandboxRefused, match=f"node {HOST}:"):
        compute_score("livecodebench", program, problem, code_test_timeout_s=5)
