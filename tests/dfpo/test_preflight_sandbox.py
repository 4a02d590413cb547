"""A GPU launch on a node without the strong code-reward sandbox stops before training, naming the
node (dfpo.launch.preflight.check_sandbox_isolation, run by ``python -m dfpo.main``; the Ray nodes'
check from the TaskRunner, dfpo.main.check_sandbox_on_every_node); with REWARD_SANDBOX_ALLOW_WEAK=1
it goes on, saying so. CPU runs are not checked, math-only runs are said not to use the sandbox.
The configs are the GPU and CPU recipes' own, composed as their driver does."""

from __future__ import annotations

import socket
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from dfpo import main as dfpo_main
from dfpo.launch import driver_setup as driver
from dfpo.launch.preflight import PreflightError, check_sandbox_isolation, local_code_scoring
from reward.sandbox import SandboxUnavailable, detect
from reward.sandbox.detect import IsolationReport
from tests.recipes.recipe_commands import REPO_ROOT, dry_run, resolved_config

GPU_SCRIPT = "run_dfpo_min_replace_qwen3_1p7b.sh"
CPU_SCRIPT = "run_dfpo_min_replace_tiny_cpu.sh"
HOST = socket.gethostname()
WEAK = IsolationReport(
    level="rlimits", interpreter="/usr/bin/python3", dedicated_uids=False, weaknesses=("no network isolation",)
)
STRONG = IsolationReport(level="bwrap", interpreter="/usr/bin/python3", dedicated_uids=True)


def _data(directory, *, code: bool):
    """DATA_DIR with the recipes' five files; their data_source math only, or with LiveCodeBench."""
    directory.mkdir(exist_ok=True)
    for name, source in (
        ("math_train", "math_dapo"),
        ("code_train", "livecodebench"),
        ("aime25", "aime25"),
        ("hmmt25", "hmmt25"),
        ("lcb_v6", "livecodebench"),
    ):
        source = source if code else "math_dapo"
        pq.write_table(
            pa.table({"data_source": [source, "math_dapo"], "prompt": ["p", "q"]}), directory / f"{name}.parquet"
        )
    return directory


def _config(script, tmp_path, *, code: bool = True, **variables):
    (command,) = dry_run(
        script, DATA_DIR=str(_data(tmp_path / "data", code=code)), OUTPUT_ROOT=str(tmp_path / "out"), **variables
    )
    return resolved_config(command.overrides)


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch):
    monkeypatch.setattr(detect, "_warned", False)


def test_a_gpu_recipe_on_a_weak_node_stops_naming_the_node_and_goes_on_only_when_opted_in(tmp_path):
    config = _config(GPU_SCRIPT, tmp_path)
    said = []
    with pytest.raises(
        PreflightError,
        match=f"node {HOST}: the code-reward sandbox cannot isolate.*REWARD_SANDBOX_ALLOW_WEAK=1"
        ".*has code sources \\(livecodebench\\)",
    ):
        check_sandbox_isolation(config, say=said.append, environ={}, report=WEAK)
    assert check_sandbox_isolation(config, say=said.append, environ={"REWARD_SANDBOX_ALLOW_WEAK": "1"}, report=WEAK)
    assert len(said) == 1 and said[0].startswith(f"WARNING: node {HOST}: REWARD_SANDBOX_ALLOW_WEAK=1")
    assert check_sandbox_isolation(config, say=said.append, environ={}, report=STRONG)
    assert "level bwrap (strong)" in said[-1]


def test_no_level_at_all_stops_a_gpu_recipe_too(tmp_path, monkeypatch):
    def unavailable():
        raise SandboxUnavailable("no sandbox isolation level works on this machine (bwrap: not installed)")

    monkeypatch.setattr(detect, "isolation", unavailable)
    with pytest.raises(PreflightError, match=f"node {HOST}: .*no level works"):
        check_sandbox_isolation(_config(GPU_SCRIPT, tmp_path), say=print, environ={"REWARD_SANDBOX_ALLOW_WEAK": "1"})


def test_math_only_and_remote_code_runs_are_not_blocked_but_said(tmp_path):
    said = []
    math_only = _config(GPU_SCRIPT, tmp_path, code=False)
    assert local_code_scoring(math_only) == (
        False,
        "math only: no file of data.train_files or data.val_files has a code source",
    )
    assert not check_sandbox_isolation(math_only, say=said.append, environ={}, report=WEAK)
    assert "the code-reward sandbox is not used by this run (math only" in said[-1]
    remote = _config(GPU_SCRIPT, tmp_path, code=True)
    OmegaConf.update(remote, "reward.custom_reward_function.reward_kwargs.code_backend", "sandbox_fusion")
    assert not check_sandbox_isolation(remote, say=said.append, environ={}, report=WEAK)
    assert "code_backend=sandbox_fusion" in said[-1]
    # a data file whose sources cannot be read here (not yet prepared, remote) may hold code
    unknown = _config(GPU_SCRIPT, tmp_path, code=False)
    OmegaConf.update(unknown, "data.val_files", [str(tmp_path / "missing.parquet")])
    assert local_code_scoring(unknown)[0]


def test_cpu_runs_are_not_checked(tmp_path):
    config = _config(CPU_SCRIPT, tmp_path)
    assert str(config.trainer.device) == "cpu"
    assert not check_sandbox_isolation(config, say=pytest.fail, environ={}, report=WEAK)


def test_the_ray_workers_of_a_run_that_scores_code_are_told_to_require_the_strong_sandbox(tmp_path):
    config = _config(GPU_SCRIPT, tmp_path)
    assert driver.require_strong_sandbox(config, environ={}) == {"REWARD_SANDBOX_REQUIRE_STRONG": "1"}
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.REWARD_SANDBOX_REQUIRE_STRONG == "1" and "REWARD_SANDBOX_ALLOW_WEAK" not in env_vars
    assert env_vars.VERL_FILE_LOGGER_PATH  # the recipe's own variables kept
    driver.require_strong_sandbox(config, environ={"REWARD_SANDBOX_ALLOW_WEAK": "1"})
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.REWARD_SANDBOX_ALLOW_WEAK == "1"


class _FakeRay:
    """ray.nodes / ray.remote / ray.get for three nodes, each task's node_check faked per node."""

    def __init__(self, by_node):
        self.by_node = by_node
        self.placed = []

    def nodes(self):
        return [{"NodeID": node, "Alive": True, "Resources": {"CPU": 8.0}} for node in self.by_node] + [
            {"NodeID": "dead", "Alive": False, "Resources": {"CPU": 8.0}}
        ]

    def remote(self, num_cpus):
        assert num_cpus == 0
        fake = self

        class Probe:
            def options(self, scheduling_strategy):
                fake.placed.append((scheduling_strategy.node_id, scheduling_strategy.soft))
                return self

            def remote(self):
                return fake.by_node[fake.placed[-1][0]]

        return lambda function: Probe()

    def get(self, refs, timeout):
        return refs


def test_every_ray_node_is_checked_and_the_weak_ones_named(monkeypatch):
    ok = {"host": "gpu-a", "level": "bwrap", "strong": True, "refusal": None}
    weak = {
        "host": "gpu-b",
        "level": "rlimits",
        "strong": False,
        "refusal": "node gpu-b: the code-reward sandbox cannot isolate untrusted code here",
    }
    n1, n2, n3 = (f"{i:02x}" * 28 for i in (1, 2, 3))  # Ray's node ids: 28 bytes in hex
    fake = _FakeRay({n1: ok, n2: weak, n3: dict(ok, host="gpu-c")})
    for name in ("nodes", "remote", "get"):
        monkeypatch.setattr(dfpo_main.ray, name, getattr(fake, name))
    monkeypatch.delenv("REWARD_SANDBOX_REQUIRE_STRONG", raising=False)
    assert dfpo_main.check_sandbox_on_every_node(say=pytest.fail) == []  # not a GPU run that scores code
    monkeypatch.setenv("REWARD_SANDBOX_REQUIRE_STRONG", "1")
    said = []
    with pytest.raises(SandboxUnavailable, match=r"weak or missing on 1 of 3 node\(s\) \(gpu-b\):\nnode gpu-b:"):
        dfpo_main.check_sandbox_on_every_node(say=said.append)
    assert fake.placed == [(n1, False), (n2, False), (n3, False)]  # one task pinned to each live node
    assert said == ["dfpo: code-reward sandbox per node: gpu-a bwrap, gpu-b rlimits (weak), gpu-c bwrap"]


@pytest.mark.slow
def test_a_gpu_launch_on_a_node_without_the_strong_sandbox_stops_before_training(tmp_path):
    """The recipe's own command, ``python -m dfpo.main ...`` as a GPU launch runs it (here with
    dfpo.dry_run=true, which would stop before Ray anyway): exit 1 naming the node, nothing run."""
    import os
    import subprocess

    model = tmp_path / "model"
    model.mkdir()
    (command,) = dry_run(
        GPU_SCRIPT,
        MODEL_PATH=str(model),
        DATA_DIR=str(_data(tmp_path / "data", code=True)),
        OUTPUT_ROOT=str(tmp_path / "out"),
    )
    env = {**os.environ, "REWARD_SANDBOX_ISOLATION": "rlimits"}  # a node where only rlimits works
    env.pop("REWARD_SANDBOX_ALLOW_WEAK", None)
    done = subprocess.run(
        [sys.executable, *command.argv[1:], "dfpo.dry_run=true"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        f"dfpo preflight: node {HOST}: the code-reward sandbox cannot isolate untrusted code here: "
        "only the weak level rlimits" in done.stderr
    )
    assert "bash scripts/install_system_deps.sh" in done.stderr and "REWARD_SANDBOX_ALLOW_WEAK=1" in done.stderr
    assert "dfpo dry run" not in done.stdout and "Started a local Ray instance" not in done.stdout + done.stderr


def test_doctor_fails_a_gpu_node_with_a_weak_sandbox_unless_opted_in():
    from dfpo.launch.doctor import FAIL, OK, WARN, check_sandbox

    refused = check_sandbox("gpu", {}, WEAK)
    assert (
        refused.status == FAIL
        and "install_system_deps.sh" in refused.fix
        and "REWARD_SANDBOX_ALLOW_WEAK=1" in refused.fix
    )
    assert check_sandbox("gpu", {"REWARD_SANDBOX_ALLOW_WEAK": "1"}, WEAK).status == WARN
    assert check_sandbox("cpu", {}, WEAK).status == WARN  # the CPU stack: CI and laptops, as before
    assert check_sandbox("gpu", {}, STRONG).status == OK


def test_the_task_runner_checks_every_node_before_verl_starts_any_worker(monkeypatch):
    calls = []
    monkeypatch.setattr(dfpo_main, "check_sandbox_on_every_node", lambda: calls.append("sandbox on every node"))
    monkeypatch.setattr(dfpo_main._TaskRunnerV1, "run", lambda self, config: calls.append("verl's TaskRunner.run"))
    runner = dfpo_main.DFPOTaskRunner.__new__(dfpo_main.DFPOTaskRunner)
    dfpo_main.DFPOTaskRunner.run(runner, config=None)
    assert calls == ["sandbox on every node", "verl's TaskRunner.run"]
