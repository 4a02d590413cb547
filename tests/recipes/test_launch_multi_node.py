"""Multi-node runs: checkpoints on shared storage, the Ray launcher of every node
(scripts/launch/ray_cluster.sh: the token, its own session, stop by process id) and the two launches
verl's examples ship (`ray job submit`, SLURM sbatch), run here with stand-ins for ray, srun and
scontrol. The real 2-node Ray cluster is tests/e2e/test_multi_node_cpu.py."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from dfpo.launch.preflight import PreflightError
from tests.recipes.recipe_commands import REPO_ROOT, dry_run, preflight_says

SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"
LAUNCH = REPO_ROOT / "scripts" / "launch"


def test_multi_node_run_refuses_node_local_checkpoints(tmp_path):
    """dfpo.main's preflight on the recipe's config: several nodes with OUTPUT_ROOT on local disk stop
    before Ray, naming the key and the knob; one node, or ALLOW_LOCAL_CHECKPOINTS=1, pass."""
    local = {"OUTPUT_ROOT": str(tmp_path / "runs")}
    with pytest.raises(PreflightError, match=r"not shared storage, with trainer.nnodes=2.*OUTPUT_ROOT"):
        preflight_says(SCRIPT, NNODES="2", environ={}, **local)
    preflight_says(SCRIPT, NNODES="1", environ={}, **local)
    preflight_says(SCRIPT, NNODES="2", environ={"ALLOW_LOCAL_CHECKPOINTS": "1"}, **local)


def _stand_in(directory, name, body):
    path = directory / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _token(home, mode=0o600):
    path = home / ".ray" / "auth_token"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("f" * 64)
    path.chmod(mode)
    return path


def test_ray_job_submit_sends_the_recipe_and_the_exported_knobs(tmp_path):
    _stand_in(
        tmp_path, "ray", 'printf "%s\\n" "$@" > "$FAKE_RAY_ARGS"\necho "$RAY_AUTH_MODE" > "$FAKE_RAY_ARGS.auth"\n'
    )
    _token(tmp_path)
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY_ADDRESS": "http://head:8265",
        "MODEL_PATH": "/shared/models/Qwen3-32B",
        "SEED": "3",
        "TRAINER_MODE": "colocate_async",
        "SUBMISSION_ID": "dfpo-test-1",
        "UNRELATED_SECRET": "x",
        "FAKE_RAY_ARGS": str(tmp_path / "ray_args.txt"),
    }
    result = subprocess.run(
        ["bash", str(LAUNCH / "ray_job_submit.sh"), f"recipes/{SCRIPT}", "trainer.total_training_steps=5"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "ray_args.txt").read_text().splitlines()
    assert args[:4] == ["job", "submit", "--address=http://head:8265", "--submission-id=dfpo-test-1"]
    runtime_env = json.loads(next(a for a in args if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime_env["env_vars"] == {
        "MODEL_PATH": "/shared/models/Qwen3-32B",
        "SEED": "3",
        "TRAINER_MODE": "colocate_async",
    }
    entrypoint = args[args.index("--") + 1 :]
    assert entrypoint[:2] == ["bash", "-c"]
    assert entrypoint[2] == f"cd {REPO_ROOT} && bash {REPO_ROOT}/recipes/{SCRIPT} trainer.total_training_steps=5"
    # token authentication by default (the clusters of ray_cluster.sh have it); the token stays in its file
    assert (tmp_path / "ray_args.txt.auth").read_text().strip() == "token"
    assert "f" * 64 not in result.stdout + result.stderr + "\n".join(args)
    assert "ray job logs --follow dfpo-test-1" in result.stderr


def test_ray_job_submit_forwards_every_knob_the_recipes_read(tmp_path):
    """Every variable the recipes read (dfpo/launch/recipe_knobs.py, the launcher's one list, and every
    knob that dfpo/launch/recipe.py reads itself) and those the driver reads, exported here, reach the job."""
    from dfpo.launch.recipe_knobs import JOB_ENVIRONMENT, names
    from dfpo.operations.node_watch import PERIOD_ENV
    from dfpo.operations.preemption import GRACE_ENV

    recipe_source = (REPO_ROOT / "dfpo" / "launch" / "recipe.py").read_text() + (
        REPO_ROOT / "recipes" / "common.sh"
    ).read_text()
    read_by_launcher = set(re.findall(r'environ(?:\.get\(|\[)"([A-Z][A-Z0-9_]*)"', recipe_source)) | set(
        re.findall(r"\$\{([A-Z][A-Z0-9_]*)", recipe_source)
    )
    assert read_by_launcher - {"HOME", "BASH_SOURCE"} <= set(names()), sorted(read_by_launcher - set(names()))
    _stand_in(tmp_path, "ray", 'printf "%s\\n" "$@" > "$FAKE_RAY_ARGS"\n')
    _token(tmp_path)
    exported = {name: f"value-of-{name}" for name in [*names(), *JOB_ENVIRONMENT, PERIOD_ENV, GRACE_ENV]}
    assert {"GPU_MEMORY_GB", "REWARD_SANDBOX_ISOLATION", "REWARD_SANDBOX_UID_BASE", "REWARD_SANDBOX_ALLOW_WEAK"} <= set(
        exported
    )
    env = {
        **exported,
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY_ADDRESS": "http://head:8265",
        "FAKE_RAY_ARGS": str(tmp_path / "args"),
    }
    env.pop("PYTHON")
    result = subprocess.run(
        ["bash", str(LAUNCH / "ray_job_submit.sh"), f"recipes/{SCRIPT}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "args").read_text().splitlines()
    runtime_env = json.loads(next(a for a in args if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert {k: v for k, v in exported.items() if k != "PYTHON"} == runtime_env["env_vars"]


def test_ray_job_submit_needs_the_cluster_address():
    result = subprocess.run(
        ["bash", str(LAUNCH / "ray_job_submit.sh"), f"recipes/{SCRIPT}"],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "RAY_ADDRESS" in result.stderr


def test_ray_job_submit_names_the_missing_token_file(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAY_ADDRESS": "http://head:8265"}
    result = subprocess.run(
        ["bash", str(LAUNCH / "ray_job_submit.sh"), f"recipes/{SCRIPT}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert (
        f"no Ray token file at {tmp_path}/.ray/auth_token" in result.stderr and "RAY_AUTH_TOKEN_PATH" in result.stderr
    )


def _launcher(args, tmp_path, **env):
    base = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY": str(tmp_path / "ray"),
        "DFPO_RAY_DIR": str(tmp_path / "node"),
    }
    return subprocess.run(
        ["bash", str(LAUNCH / "ray_cluster.sh"), *args],
        cwd=REPO_ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_launcher_token_is_created_private_and_never_printed(tmp_path):
    result = _launcher(["token"], tmp_path)
    assert result.returncode == 0, result.stderr
    token_file = tmp_path / ".ray" / "auth_token"
    assert result.stdout.strip() == str(token_file)
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    token = token_file.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    assert token not in result.stdout + result.stderr
    # a second call keeps it; a token file others can read is made private
    token_file.chmod(0o644)
    again = _launcher(["token"], tmp_path)
    assert again.returncode == 0 and token_file.read_text() == token
    assert oct(token_file.stat().st_mode & 0o777) == "0o600" and "made it 0600" in again.stderr


def test_launcher_worker_without_the_token_says_how_to_get_it(tmp_path):
    _stand_in(tmp_path, "ray", "exit 0\n")
    result = _launcher(["worker", "10.0.0.1:6379"], tmp_path, RAY_AUTH_TOKEN_PATH=str(tmp_path / "shared" / "token"))
    assert result.returncode == 1
    assert f"no Ray token file at {tmp_path}/shared/token" in result.stderr and "scp -p" in result.stderr
    assert not (tmp_path / "node" / "ray.pid").exists()


def test_launcher_refuses_a_token_in_the_environment(tmp_path):
    _stand_in(tmp_path, "ray", "exit 0\n")
    result = _launcher(["head"], tmp_path, RAY_AUTH_TOKEN="0" * 64)
    assert result.returncode == 1 and "RAY_AUTH_TOKEN_PATH" in result.stderr and "0" * 64 not in result.stderr


def test_launcher_starts_ray_in_its_own_session_and_stops_only_that(tmp_path):
    # a stand-in `ray start --block`: says it is up, then blocks until SIGTERM (as Ray does)
    _stand_in(
        tmp_path,
        "ray",
        'echo "$* RAY_AUTH_MODE=$RAY_AUTH_MODE RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH" >> "$HOME/calls.txt"\n'
        'echo "Ray runtime started."\ntrap "exit 0" TERM\nwhile true; do sleep 0.1; done\n',
    )
    bystander = subprocess.Popen(["sleep", "60"])  # another Ray on the machine, say: left alone
    try:
        started = _launcher(
            ["head", "--num-cpus=4"], tmp_path, GPUS_PER_NODE="2", DFPO_RAY_NODE_IP="10.0.0.1", DFPO_RAY_PORT="7000"
        )
        assert started.returncode == 0, started.stderr
        assert "bash scripts/launch/ray_cluster.sh worker 10.0.0.1:7000" in started.stdout
        assert "export RAY_ADDRESS=10.0.0.1:7000 RAY_AUTH_MODE=token" in started.stdout
        pid = int((tmp_path / "node" / "ray.pid").read_text())
        assert os.getsid(pid) == pid  # its own session: a closed terminal does not end it
        call = (tmp_path / "calls.txt").read_text()
        # Ray's CPUs: those this process may run on (nproc), the user's --num-cpus after them winning
        assert call.startswith(
            "start --head --port=7000 --dashboard-host=10.0.0.1 --dashboard-port=8265 --num-gpus=2 "
            f"--num-cpus={len(os.sched_getaffinity(0))} --node-ip-address=10.0.0.1"
        )
        assert (
            "--num-cpus=4 --block" in call
            and f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={tmp_path}/.ray/auth_token" in call
        )
        again = _launcher(["head"], tmp_path)
        assert again.returncode == 1 and f"already running here (pid {pid}" in again.stderr
        stopped = _launcher(["stop"], tmp_path)
        assert stopped.returncode == 0 and f"stopped Ray (pid {pid})" in stopped.stderr
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert bystander.poll() is None
        assert "no Ray started by this launcher" in _launcher(["stop"], tmp_path).stderr
    finally:
        bystander.kill()
        bystander.wait()


def _recorded_start(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """``ray_cluster.sh head`` with a stand-in ray that records its arguments and GPU variables."""
    _stand_in(
        tmp_path,
        "ray",
        'echo "$* CUDA=${CUDA_VISIBLE_DEVICES-unset} ROCR=${ROCR_VISIBLE_DEVICES-unset}" >> "$HOME/calls.txt"\n'
        'echo "Ray runtime started."\ntrap "exit 0" TERM\nwhile true; do sleep 0.1; done\n',
    )
    started = _launcher(["head"], tmp_path, **env)
    _launcher(["stop"], tmp_path)
    return started


def test_launcher_gives_ray_the_cpus_per_node_asked_and_refuses_a_bad_count(tmp_path):
    started = _recorded_start(tmp_path, CPUS_PER_NODE="16")
    assert started.returncode == 0, started.stderr
    assert "--num-cpus=16 " in (tmp_path / "calls.txt").read_text()
    (tmp_path / "calls.txt").unlink()
    refused = _recorded_start(tmp_path, CPUS_PER_NODE="all")
    assert refused.returncode == 1 and "CPUS_PER_NODE must be a number of CPUs, got 'all'" in refused.stderr
    assert not (tmp_path / "calls.txt").exists()


def test_launcher_starts_ray_without_slurms_rocr_visible_devices_beside_cuda_visible_devices(tmp_path):
    """SLURM's GRES sets both; verl's workers refuse both at once."""
    started = _recorded_start(tmp_path, CUDA_VISIBLE_DEVICES="0,1", ROCR_VISIBLE_DEVICES="0,1")
    assert started.returncode == 0, started.stderr
    assert "CUDA=0,1 ROCR=unset" in (tmp_path / "calls.txt").read_text()
    assert "Ray starts with CUDA_VISIBLE_DEVICES only" in started.stderr
    (tmp_path / "calls.txt").unlink()
    alone = _recorded_start(tmp_path, ROCR_VISIBLE_DEVICES="0,1")  # an AMD node's only variable: kept
    assert alone.returncode == 0 and "CUDA=unset ROCR=0,1" in (tmp_path / "calls.txt").read_text()


@pytest.mark.parametrize(("written", "kept"), [("10.0.0.1:7000", False), ("10.0.0.9:6379", True)])
def test_stop_forgets_the_address_ray_left_for_ray_init_only_if_it_names_this_node(tmp_path, written, kept):
    """`ray start` writes <temp dir>/ray_current_cluster, which a plain ray.init() on the machine joins;
    only `ray stop` removes it. The launcher removes it when its node stops, unless another cluster
    started since (its address, not this head's port, in the file)."""
    address_file = tmp_path / "raytmp" / "ray" / "ray_current_cluster"
    _stand_in(
        tmp_path,
        "ray",
        f'mkdir -p {address_file.parent}; echo -n "{written}" > {address_file}\n'
        'echo "Ray runtime started."\ntrap "exit 0" TERM\nwhile true; do sleep 0.1; done\n',
    )
    env = {"RAY_TMPDIR": str(tmp_path / "raytmp"), "DFPO_RAY_PORT": "7000", "DFPO_RAY_NODE_IP": "10.0.0.1"}
    assert _launcher(["head"], tmp_path, **env).returncode == 0
    assert address_file.exists()
    stopped = _launcher(["stop"], tmp_path, **env)
    assert stopped.returncode == 0, stopped.stderr
    assert address_file.exists() == kept
    assert kept or f"removed {address_file} (it named the stopped cluster 10.0.0.1:7000)" in stopped.stderr


def test_launcher_reports_a_node_that_does_not_come_up(tmp_path):
    _token(tmp_path)
    _stand_in(tmp_path, "ray", 'echo "could not connect to 10.0.0.1:6379" >&2\nexit 1\n')
    result = _launcher(["worker", "10.0.0.1:6379"], tmp_path)
    assert result.returncode == 1
    assert "could not connect to 10.0.0.1:6379" in result.stderr and "exited before the node was up" in result.stderr


def _slurm_stand_ins(tmp_path: Path, log: Path) -> dict[str, str]:
    """scontrol, srun and ray stand-ins for a 3-node allocation; the environment sbatch gives."""
    _stand_in(
        tmp_path,
        "scontrol",
        f'if [[ "$1" == requeue ]]; then echo "scontrol $*" >> {log}; exit 0; fi\nprintf "gpu-a\\ngpu-b\\ngpu-c\\n"\n',
    )
    _stand_in(
        tmp_path,
        "srun",
        f'echo "srun $*" >> {log}\n'
        'while [[ "$1" == -* ]]; do case "$1" in -w) node="$2"; shift ;; -c) shift ;; esac; shift; done\n'
        'if [[ "$1" == hostname ]]; then echo 10.0.0.1; exit 0; fi\n'
        f'DFPO_RAY_DIR={tmp_path}/ray-$node FAKE_NODE="$node" exec "$@"\n',
    )
    _stand_in(
        tmp_path,
        "ray",
        'if [[ "$1" == start ]]; then echo "ray $* on $FAKE_NODE auth=$RAY_AUTH_MODE token_env=${RAY_AUTH_TOKEN:-}" '
        f">> {log}; exit 0; fi\n"
        f'if [[ "$1" == status ]]; then echo "ray $*" >> {log}; echo Active:; grep -c "^ray start" {log} | xargs '
        '-I{} seq {} | sed "s/^/ 1 node_/"; echo; fi\n',
    )
    return {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY": str(tmp_path / "ray"),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu-[a-c]",
        "SLURM_JOB_CPUS_PER_NODE": "96(x2),64",  # two nodes of 96 CPUs, one of 64
        "SLURM_GPUS_ON_NODE": "8",
        "SLURM_SUBMIT_DIR": str(REPO_ROOT),
        "DFPO_RAY_POLL_S": "0.2",
    }


def _run_template(recipe: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``bash slurm_dfpo.sbatch RECIPE ARGS...`` as sbatch would run it, with the stand-ins of ``env``."""
    return subprocess.run(
        ["bash", str(LAUNCH / "slurm_dfpo.sbatch"), str(recipe), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_slurm_script_starts_the_launcher_on_every_node_then_the_recipe_on_the_head(tmp_path):
    """The node roles with the SLURM variables of a 3-node allocation: srun runs each step here,
    with a stand-in `ray` whose `status` lists the nodes started so far."""
    log = tmp_path / "calls.txt"
    env = _slurm_stand_ins(tmp_path, log)
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(
        'echo "recipe NNODES=$NNODES GPUS_PER_NODE=$GPUS_PER_NODE RAY_ADDRESS=$RAY_ADDRESS '
        "RAY_AUTH_MODE=$RAY_AUTH_MODE "
        f'RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH $*" >> {log}\n'
    )
    result = _run_template(recipe, env, "trainer.save_freq=5")
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    starts = [c for c in calls if c.startswith("ray start")]
    assert starts[0].startswith(
        "ray start --head --port=6379 --dashboard-host=10.0.0.1 --dashboard-port=8265 --num-gpus=8 "
        f"--num-cpus={len(os.sched_getaffinity(0))} --node-ip-address=10.0.0.1"  # the stand-in srun binds nothing
    )
    assert starts[0].endswith("--block on gpu-a auth=token token_env=")
    workers = starts[1:]
    assert sorted(c.split(" on ")[1].split()[0] for c in workers) == ["gpu-b", "gpu-c"]
    assert all(
        c.startswith("ray start --address=10.0.0.1:6379 --num-gpus=8") and "auth=token token_env=" in c for c in workers
    )
    token_file = tmp_path / ".ray" / "auth_token"
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    recipe_line = (
        "recipe NNODES=3 GPUS_PER_NODE=8 RAY_ADDRESS=10.0.0.1:6379 RAY_AUTH_MODE=token "
        f"RAY_AUTH_TOKEN_PATH={token_file} trainer.save_freq=5"
    )
    assert recipe_line in calls
    before = calls[: calls.index(recipe_line)]
    assert all(start in before for start in starts), "the recipe ran before every node had started"
    assert any(c.startswith("ray status --address=10.0.0.1:6379") for c in before)
    assert token_file.read_text() not in log.read_text() + result.stderr + result.stdout
    # every step asks for the CPUs of the smallest node (SLURM_EXACT would give a step without -c one)
    sruns = [c for c in calls if c.startswith("srun ") and not c.startswith("srun --overlap")]
    assert len(sruns) == 5 and all(" -c 64 " in c for c in sruns), sruns
    # at the end every node's launcher stops its Ray, in a step beside the Ray steps (which end then)
    assert calls[-1] == (
        f"srun --overlap --nodes=3 --ntasks=3 --ntasks-per-node=1 bash {REPO_ROOT}/scripts/launch/ray_cluster.sh stop"
    )
    assert not any(c.startswith("scontrol requeue") for c in calls)  # exit 0: nothing to requeue


def test_slurm_passes_its_sigterm_to_the_recipe_and_exits_with_its_status(tmp_path):
    """sbatch --signal=B:TERM@360 signals the batch shell only: it passes SIGTERM on to the recipe
    (the driver: dfpo.operations.preemption stops after the step in flight) and exits with the recipe's status
    (75: relaunch to resume)."""
    log = tmp_path / "calls.txt"
    env = _slurm_stand_ins(tmp_path, log)
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(
        f"trap 'echo \"recipe got TERM\" >> {log}; exit 75' TERM\n"
        f'echo "recipe up" >> {log}\n'
        "while true; do sleep 0.1; done\n"
    )
    job = subprocess.Popen(
        ["bash", str(LAUNCH / "slurm_dfpo.sbatch"), str(recipe)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and "recipe up" in log.read_text()):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate(timeout=5)
            time.sleep(0.1)
        os.kill(job.pid, signal.SIGTERM)
        _, stderr = job.communicate(timeout=30)
    finally:
        job.kill()
    assert job.returncode == 75, stderr
    calls = log.read_text().splitlines()
    # the recipe stopped, then every node's Ray by its launcher (one overlapping step), then the requeue
    assert calls[-3:] == [
        "recipe got TERM",
        f"srun --overlap --nodes=3 --ntasks=3 --ntasks-per-node=1 bash {REPO_ROOT}/scripts/launch/ray_cluster.sh stop",
        "scontrol requeue 4242",
    ], calls
    assert "requeueing job 4242 (requeue 1 of at most 20)" in stderr
    text = (LAUNCH / "slurm_dfpo.sbatch").read_text()
    assert "#SBATCH --signal=B:TERM@360" in text and "#SBATCH --requeue" in text


@pytest.mark.parametrize(
    ("knobs", "said"),
    [
        ({"DFPO_SLURM_REQUEUE": "0"}, None),
        ({"SLURM_RESTART_COUNT": "3", "DFPO_SLURM_MAX_REQUEUES": "3"}, "after 3 requeues (DFPO_SLURM_MAX_REQUEUES)"),
    ],
)
def test_slurm_exit_75_is_not_requeued_when_turned_off_or_past_the_bound(tmp_path, knobs, said):
    log = tmp_path / "calls.txt"
    env = {**_slurm_stand_ins(tmp_path, log), **knobs}
    recipe = tmp_path / "recipe.sh"
    recipe.write_text("exit 75\n")
    result = _run_template(recipe, env)
    assert result.returncode == 75, result.stderr
    assert "scontrol requeue" not in log.read_text()
    assert said is None or said in result.stderr


def test_launch_scripts_parse_are_shellcheck_clean_and_hold_no_cluster_paths():
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is not installed: run scripts/install_system_deps.sh (Debian package shellcheck)"
    for path in LAUNCH.iterdir():
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, path
        checked = subprocess.run([shellcheck, "--shell=bash", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout
        text = path.read_text()
        for forbidden in ("/mnt/", "/cpfs", "/nas/", "conda activate", "--output=/", "API_KEY", "ray stop"):
            lines = [line for line in text.splitlines() if forbidden in line and not line.lstrip().startswith("#")]
            assert not lines, f"{path.name} uses {forbidden}: {lines}"


def test_a_driver_joining_a_running_cluster_does_not_size_ray(tmp_path):
    """Ray refuses ray.init(num_cpus/num_gpus/object_store_memory) when it connects to a cluster:
    with RAY_ADDRESS set, dfpo.main's driver leaves the nodes' resources to their ray start (every
    path: the CPU recipe's platform file sets them)."""
    from dfpo.launch.driver_setup import drop_node_resources_on_a_cluster

    (command,) = dry_run("run_dfpo_min_replace_tiny_cpu.sh", OUTPUT_ROOT=str(tmp_path), NNODES="2", GPUS_PER_NODE="1")
    local, joined = copy.deepcopy(command.config), copy.deepcopy(command.config)
    said: list[str] = []
    assert drop_node_resources_on_a_cluster(local, say=said.append, environ={"RAY_TMPDIR": str(tmp_path)}) == []
    assert not said
    assert drop_node_resources_on_a_cluster(joined, say=said.append, environ={"RAY_ADDRESS": "10.0.0.1:6379"}) == [
        "num_cpus",
        "num_gpus",
        "object_store_memory",
    ]
    for key in ("num_gpus", "num_cpus", "object_store_memory"):
        assert key in local.ray_kwargs.ray_init and key not in joined.ray_kwargs.ray_init
    assert joined.ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"
    assert "joining the running Ray cluster at 10.0.0.1:6379" in said[0]
    assert (
        drop_node_resources_on_a_cluster(
            copy.deepcopy(command.config), say=said.append, environ={"RAY_ADDRESS": "local"}
        )
        == []
    )


@pytest.fixture(scope="module")
def weak_node_path():
    """A PATH with every program of /usr/bin and /bin but bwrap and unshare (a node where only the
    weak rlimits sandbox works), in a directory the sandbox's uid can reach."""
    directory = Path(tempfile.mkdtemp(prefix="dfpo-weak-node-"))
    directory.chmod(0o755)
    for folder in ("/usr/bin", "/bin"):
        for entry in os.scandir(folder):
            if entry.name not in ("bwrap", "unshare") and not (directory / entry.name).exists():
                (directory / entry.name).symlink_to(entry.path)
    try:
        yield str(directory)
    finally:
        shutil.rmtree(directory)


GPU_LIST = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n'


def test_launcher_on_a_gpu_node_without_the_strong_sandbox_stops_before_ray(tmp_path, weak_node_path):
    """ray_cluster.sh on a GPU node (a stand-in nvidia-smi lists one) without bwrap and unshare:
    head (and worker) stop before `ray start`, naming the node and the fix; with
    REWARD_SANDBOX_ALLOW_WEAK=1 the node starts, saying so, with REWARD_SANDBOX_REQUIRE_STRONG=1
    in its Ray's environment (so its reward workers refuse a weak level unless opted in). A node
    without a GPU (CPU clusters, whose GPUS_PER_NODE are logical) is not required to have it."""
    _stand_in(
        tmp_path,
        "ray",
        'echo "$* REQUIRE=${REWARD_SANDBOX_REQUIRE_STRONG:-} ALLOW=${REWARD_SANDBOX_ALLOW_WEAK:-}" >> '
        '"$HOME/calls.txt"\n'
        'echo "Ray runtime started."\ntrap "exit 0" TERM\nwhile true; do sleep 0.1; done\n',
    )
    host = socket.gethostname()
    node = {"PATH": f"{tmp_path}:{weak_node_path}", "PYTHON": sys.executable}
    cpu_node = _launcher(["head"], tmp_path, GPUS_PER_NODE="1", **node)
    try:
        assert cpu_node.returncode == 0, cpu_node.stderr
        assert f"{host}: no GPU (or VERL_PLATFORM=cpu): the code-reward sandbox is not required here" in cpu_node.stderr
        assert (tmp_path / "calls.txt").read_text().strip().endswith("REQUIRE= ALLOW=")
    finally:
        assert _launcher(["stop"], tmp_path).returncode == 0
    (tmp_path / "calls.txt").unlink()
    (tmp_path / ".ray" / "auth_token").unlink()
    _stand_in(tmp_path, "nvidia-smi", GPU_LIST)
    refused = _launcher(["head"], tmp_path, **node)
    assert refused.returncode == 1
    assert f"error: node {host}: the code-reward sandbox cannot isolate untrusted code here" in refused.stderr
    assert f"dfpo ray_cluster error: node {host}: the code-reward sandbox is not strong here" in refused.stderr
    assert "install_system_deps.sh" in refused.stderr and "REWARD_SANDBOX_ALLOW_WEAK=1" in refused.stderr
    assert not (tmp_path / "calls.txt").exists() and not (tmp_path / "node" / "ray.pid").exists()
    _token(tmp_path)
    assert (
        _launcher(["worker", "10.0.0.1:6379"], tmp_path, **node).returncode == 1
        and not (tmp_path / "calls.txt").exists()
    )
    allowed = _launcher(["head"], tmp_path, REWARD_SANDBOX_ALLOW_WEAK="1", **node)
    try:
        assert allowed.returncode == 0, allowed.stderr
        assert (
            f"WARNING: node {host}: REWARD_SANDBOX_ALLOW_WEAK=1: model-written code runs in the WEAK sandbox level "
            "rlimits" in allowed.stderr
        )
        assert f"node {host}: REWARD_SANDBOX_ALLOW_WEAK is set" in allowed.stderr
        assert (tmp_path / "calls.txt").read_text().strip().endswith("REQUIRE=1 ALLOW=1")
    finally:
        assert _launcher(["stop"], tmp_path).returncode == 0


def test_slurm_stops_before_any_ray_when_a_gpu_node_lacks_the_strong_sandbox(tmp_path, weak_node_path):
    """The sbatch template's first step checks every node: a GPU node without the strong sandbox
    ends the job before any `ray start` and before the recipe, naming the node."""
    log = tmp_path / "calls.txt"
    env = _slurm_stand_ins(tmp_path, log)
    _stand_in(tmp_path, "nvidia-smi", GPU_LIST)
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f'echo "recipe ran" >> {log}\n')
    env.update(PATH=f"{tmp_path}:{weak_node_path}", PYTHON=sys.executable)
    result = _run_template(recipe, env)
    assert result.returncode == 1
    assert f"node {socket.gethostname()}: the code-reward sandbox is not strong here" in result.stderr
    assert "the code-reward sandbox check failed on a node named above: nothing was started" in result.stderr
    calls = log.read_text()
    assert "check" in calls and "ray start" not in calls and "recipe ran" not in calls
