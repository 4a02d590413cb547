"""Multi-node for real: a 2-node Ray cluster on this machine, the tiny DFPO recipe across it.

Two Ray nodes on one machine are two raylets, each with its own temp dir, ports and one logical
GPU, started by ``scripts/launch/ray_cluster.sh`` exactly as docs/recipes.md ("Multi-node") tells
a user to start them on two machines: ``head`` on node 0, ``worker <head>:<port>`` on the other,
``wait <head>:<port> 2``, the recipe on the head with ``RAY_ADDRESS`` and ``RAY_AUTH_MODE=token``
exported, ``scripts/launch/ray_job_submit.sh`` for the same recipe as a Ray job, then ``stop`` on
every node. The token file is the one a user without shared home directories would use
(``RAY_AUTH_TOKEN_PATH``), so the user's own ``~/.ray/auth_token`` is never touched.

What a multi-node run must get right, checked here: one FSDP rank on each node (Ray's actor
table), dfpo's verl plugin and ``VERL_PLATFORM=cpu`` in every process of both nodes that runs
verl (a probe, ``tests/e2e/process_probe/sitecustomize.py``, records each one), the checkpoint
shards of both ranks under the one ``OUTPUT_ROOT``; the worker node lost mid-run (every process of
its Ray killed by process id after step 1's checkpoint): the run ends by itself within a bound,
naming the node, with exit status 75 and the run's actors on the head ended too
(:mod:`dfpo.operations.node_watch`); the node started again, the same recipe through ``ray job
submit`` with the knobs in the job's runtime environment, followed to completion and resuming at the
step after the last complete checkpoint: over the two launches every step trained once, none lost
and none repeated; the token never in a log, a process's arguments or environment, and
both nodes stopped by the launcher with every process they started gone. Whatever is left at the end is
ended by its process id (other Ray clusters on the machine are left alone).

SIGTERM's path (a scheduler's time limit or preemption: the step in flight finished and saved, exit
75, the relaunch resuming after it) is tests/e2e/test_slurm_cpu.py's, through the sbatch template
under a real SLURM, which requeues the job; this module launched it once more before.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.e2e.recipe_runs import REPO_ROOT, RecipeRun, _end_processes, file_log_steps, run_command, run_recipe

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # serial: verl's trainer through Ray and vLLM needs the machine to itself

LAUNCHER = REPO_ROOT / "scripts" / "launch" / "ray_cluster.sh"
JOB_SUBMIT = REPO_ROOT / "scripts" / "launch" / "ray_job_submit.sh"
PROBE = REPO_ROOT / "tests" / "e2e" / "process_probe"
RECIPE = "run_dfpo_min_replace_tiny_cpu.sh"
EXPERIMENT = "dfpo_min_replace-tiny_cpu-g8-seed1"
RUN_TIMEOUT_S = 600
LAUNCH_TIMEOUT_S = 240
STEPS = 3  # the node lost during step 2, the Ray job resuming there: steps 2 and 3 after the loss
# dfpo.main's node watch period here (its default: 10 s) and the bound this test holds the run to
# from the loss to its end: Ray marks the node dead in about 15 s (GCS health checks), then the
# watch ends the driver; gloo's own timeout would be 30 minutes
NODE_WATCH_S = 2
NODE_LOSS_EXIT_BOUND_S = 120
NODE_PORTS = 8  # node manager, object manager, agent (2), runtime env agent, metrics, client server, spare
WORKER_PORTS = 200  # each node's own worker port range


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _free_port_block(size: int) -> int:
    """The first port of ``size`` consecutive free ports below Linux's ephemeral range."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - size)
        if all(_port_is_free(port) for port in range(base, base + size)):
            return base
    raise RuntimeError(f"no {size} consecutive free ports between 20000 and 32000")


@dataclass
class Node:
    name: str
    ray_dir: Path
    temp_dir: Path
    ray_start_args: list[str]
    pid: int = 0


@dataclass
class Cluster:
    address: str
    dashboard: str
    token_file: Path
    output_root: Path
    probe_records: Path
    client_env: dict[str, str]
    head: Node
    worker: Node
    launcher_output: list[str] = field(default_factory=list)
    runs: dict[str, RecipeRun] = field(default_factory=dict)
    seen_pids: set[int] = field(default_factory=set)
    token_seen_in: list[str] = field(default_factory=list)
    stopped: bool = False

    def ray(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        """A ``ray`` CLI command against this cluster, as a user on the head runs it."""
        done = subprocess.run(
            [sys.executable, "-m", "ray.scripts.scripts", *args],
            env={**os.environ, **self.client_env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.launcher_output.append(done.stdout + done.stderr)
        return done

    def state(self, kind: str) -> list[dict]:
        done = self.ray("list", kind, "--detail", "--format=json", "--limit=10000", f"--address={self.dashboard}")
        assert done.returncode == 0, f"ray list {kind} failed:\n{done.stderr[-3000:]}"
        if done.stdout.strip() == "No resource in the cluster":  # what `ray list` prints for none
            return []
        return json.loads(done.stdout)

    def node_ids(self) -> dict[str, str]:
        """{"head": node id, "worker": node id} of the live nodes."""
        nodes = [node for node in self.state("nodes") if node["state"] == "ALIVE"]
        assert len(nodes) == 2, nodes
        return {("head" if node["is_head_node"] else "worker"): node["node_id"] for node in nodes}


def _launch(
    role_args: list[str], env: dict[str, str], cluster_output: list[str] | None = None
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", str(LAUNCHER), *role_args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    if cluster_output is not None:
        cluster_output.append(done.stdout + done.stderr)
    return done


def _node_ports(base: int, worker_base: int, head: bool) -> list[str]:
    args = [
        f"--node-manager-port={base}",
        f"--object-manager-port={base + 1}",
        f"--dashboard-agent-listen-port={base + 2}",
        f"--dashboard-agent-grpc-port={base + 3}",
        f"--runtime-env-agent-port={base + 4}",
        f"--metrics-export-port={base + 5}",
        f"--min-worker-port={worker_base}",
        f"--max-worker-port={worker_base + WORKER_PORTS - 1}",
    ]
    if head:
        args.append(f"--ray-client-server-port={base + 6}")
    return args


def _watch(cluster: Cluster, stop: threading.Event) -> None:
    """Record every process of the cluster and of the test's commands while they run, and
    whether the token shows in any process's arguments or environment."""
    token = cluster.token_file.read_bytes().strip()
    checked: set[int] = set()
    while not stop.is_set():
        for root in (
            os.getpid(),
            cluster.head.pid,
            cluster.worker.pid,
        ):  # the worker's pid changes when it is restarted
            try:
                pids = [root, *(child.pid for child in psutil.Process(root).children(recursive=True))]
            except psutil.Error:
                continue
            for pid in pids:
                if pid == os.getpid() or pid in checked:
                    continue
                checked.add(pid)
                if root != os.getpid():
                    cluster.seen_pids.add(pid)
                for part in ("cmdline", "environ"):
                    try:
                        if token in Path(f"/proc/{pid}/{part}").read_bytes():
                            cluster.token_seen_in.append(f"/proc/{pid}/{part}")
                    except OSError:
                        pass
        stop.wait(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_example):
    root = tmp_path_factory.mktemp("multi_node")
    # Ray's socket paths live under the temp dir and must stay below 107 characters
    short = Path(tempfile.mkdtemp(prefix="dfpo-mn-", dir="/tmp"))
    base = _free_port_block(2 + 2 * NODE_PORTS + 2 * WORKER_PORTS)
    head_port, dashboard_port = base, base + 1
    head_base, worker_base = base + 2, base + 2 + NODE_PORTS
    workers_from = base + 2 + 2 * NODE_PORTS
    records = root / "probe_records"
    records.mkdir()
    token_file = root / "ray_token"
    python_path = os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH", "")]))
    common = {
        # as with the environment activated: `ray` is the interpreter's
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        "PYTHON": sys.executable,
        "RAY_AUTH_TOKEN_PATH": str(token_file),
        "DFPO_RAY_NODE_IP": "127.0.0.1",
        "GPUS_PER_NODE": "1",
        "PYTHONPATH": python_path,
        "DFPO_PROCESS_PROBE_DIR": str(records),
    }
    head = Node(
        "head",
        root / "head",
        short / "h",
        [
            f"--temp-dir={short / 'h'}",
            "--num-cpus=8",
            "--object-store-memory=500000000",
            *_node_ports(head_base, workers_from, True),
        ],
    )
    worker = Node(
        "worker",
        root / "worker",
        short / "w",
        [
            f"--temp-dir={short / 'w'}",
            "--num-cpus=8",
            "--object-store-memory=500000000",
            *_node_ports(worker_base, workers_from + WORKER_PORTS, False),
        ],
    )
    address = f"127.0.0.1:{head_port}"
    cluster = Cluster(
        address=address,
        dashboard=f"http://127.0.0.1:{dashboard_port}",
        token_file=token_file,
        output_root=tiny_example(root / "runs"),
        probe_records=records,
        client_env={**common, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "token"},
        head=head,
        worker=worker,
    )
    stop_watching = threading.Event()
    watcher = None
    try:
        started = time.monotonic()
        head_env = {
            **common,
            "DFPO_RAY_DIR": str(head.ray_dir),
            "DFPO_RAY_PORT": str(head_port),
            "DFPO_RAY_DASHBOARD_PORT": str(dashboard_port),
        }
        done = _launch(["head", *head.ray_start_args], head_env, cluster.launcher_output)
        assert done.returncode == 0, f"ray_cluster.sh head failed:\n{done.stdout}\n{done.stderr}"
        assert f"bash scripts/launch/ray_cluster.sh worker {address}" in done.stdout
        head.pid = int((head.ray_dir / "ray.pid").read_text())
        done = _launch(
            ["worker", address, *worker.ray_start_args],
            {**common, "DFPO_RAY_DIR": str(worker.ray_dir)},
            cluster.launcher_output,
        )
        assert done.returncode == 0, f"ray_cluster.sh worker failed:\n{done.stdout}\n{done.stderr}"
        worker.pid = int((worker.ray_dir / "ray.pid").read_text())
        watcher = threading.Thread(target=_watch, args=(cluster, stop_watching), daemon=True)
        watcher.start()
        done = _launch(["wait", address, "2"], common, cluster.launcher_output)
        assert done.returncode == 0, f"ray_cluster.sh wait failed:\n{done.stdout}\n{done.stderr}"
        print(f"2-node cluster up in {time.monotonic() - started:.0f} s", file=sys.stderr)
        yield cluster
    finally:
        if not cluster.stopped:
            for node in (worker, head):
                if node.ray_dir.exists():
                    _launch(["stop"], {**common, "DFPO_RAY_DIR": str(node.ray_dir)})
        stop_watching.set()
        if watcher is not None:
            watcher.join(timeout=5)
        _end_processes({pid for pid in cluster.seen_pids if _running(pid)})
        shutil.rmtree(short, ignore_errors=True)


def _recipe_env(cluster: Cluster, **knobs: str) -> dict[str, str]:
    return {
        **cluster.client_env,
        "NNODES": "2",
        "GPUS_PER_NODE": "1",
        # both "nodes" share this machine's cores: one torch thread per rank, as on 2 cores before
        "CPU_THREADS_PER_RANK": "1",
        "OUTPUT_ROOT": str(cluster.output_root),
        # one machine: its local disk is storage both nodes share
        "ALLOW_LOCAL_CHECKPOINTS": "1",
        "SAVE_FREQ": "1",
        "VAL_BEFORE_TRAIN": "false",
        "TEST_FREQ": "-1",
        # dfpo's transformers rollout: what is under test is placement, plugin, checkpoints and
        # launches, and it starts in seconds where a vLLM engine per rank takes about a minute
        # (docs/cpu.md); the rollout's own multi-rank path is the single-node e2e tests'
        "ROLLOUT_NAME": "local",
        **knobs,
    }


def _check_exit(run: RecipeRun) -> None:
    assert run.returncode == 0, f"exited with {run.returncode} after {run.seconds:.0f} s:\n{run.tail()}"


def _new_actors(cluster: Cluster, before: set[str]) -> list[dict]:
    return [actor for actor in cluster.state("actors") if actor["actor_id"] not in before]


def _holds_a_gpu(actor: dict) -> bool:
    # an actor in a placement group asks for the group's renamed resource (GPU_group_<i>_<id>)
    resources = actor.get("required_resources") or {}
    return any(value > 0 for key, value in resources.items() if key == "GPU" or key.startswith("GPU_group_"))


def _rank_actors(actors: list[dict]) -> list[dict]:
    """verl's FSDP ranks: the actors holding a (logical) GPU."""
    return [actor for actor in actors if _holds_a_gpu(actor)]


def _training_steps(steps: dict[int, dict]) -> list[int]:
    return sorted(step for step, metrics in steps.items() if "actor/grad_norm" in metrics)


def _node_processes(node: Node) -> list[psutil.Process]:
    """Every process of a node's Ray: its `ray start --block` and everything under it (raylet,
    agents, the workers and actors the raylet started)."""
    root = psutil.Process(node.pid)
    return [root, *root.children(recursive=True)]


def _lose_node(node: Node) -> int:
    """The node lost as a machine is lost: every process of its Ray killed at once (SIGKILL, by
    process id). Returns how many."""
    processes = _node_processes(node)
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=10)
    return len(processes)


@dataclass
class NodeLoss:
    run: RecipeRun
    actors: list[dict]
    nodes: dict[str, str]  # {"head": id, "worker": id} during the run (a restarted node gets a new id)
    logs: dict[Path, dict[int, dict]]  # the run's file log: {path: {step: metrics}}
    lost_node_id: str
    killed: int
    seconds_to_exit: float
    checkpoint_at_loss: int
    actors_alive_after: list[dict]


@pytest.fixture(scope="module")
def first_run(cluster):
    """The recipe for 3 steps on both nodes, a checkpoint every step; once step 1 is logged and its
    checkpoint complete (verl's tracker says 1), the worker node is lost mid-run: every process of its Ray
    killed. The run must end on its own, saying which node, well before any collective times out.
    Then the worker node is started again, as a user would, for the resume (``job_run``)."""
    before = {actor["actor_id"] for actor in cluster.state("actors")}
    nodes = cluster.node_ids()
    tracker = cluster.output_root / "checkpoints" / "dfpo" / EXPERIMENT / "latest_checkpointed_iteration.txt"
    env = _recipe_env(cluster, TOTAL_TRAINING_STEPS=str(STEPS), DFPO_NODE_WATCH_S=str(NODE_WATCH_S))
    outcome: dict = {}
    launcher = threading.Thread(
        target=lambda: outcome.update(run=run_recipe(RECIPE, env, timeout_s=RUN_TIMEOUT_S)), daemon=True
    )
    launcher.start()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    log_dir = cluster.output_root / "logs" / "dfpo"

    def step_1_done() -> bool:  # its checkpoint complete (verl writes the tracker last) and its metrics logged
        logged = (
            any(1 in _training_steps(steps) for steps in file_log_steps(log_dir).values())
            if log_dir.exists()
            else False
        )
        return logged and tracker.exists() and tracker.read_text().strip() == "1"

    while not step_1_done():
        assert launcher.is_alive() and time.monotonic() < deadline, (
            "the run ended or stalled before step 1's checkpoint: "
            + (outcome["run"].tail() if "run" in outcome else "still running")
        )
        time.sleep(0.2)
    killed = _lose_node(cluster.worker)
    lost_at = time.monotonic()
    launcher.join(timeout=NODE_LOSS_EXIT_BOUND_S + 30)
    assert not launcher.is_alive(), f"the run did not end within {NODE_LOSS_EXIT_BOUND_S} s of losing the worker node"
    run = outcome["run"]
    cluster.runs["first"] = run
    seconds_to_exit = time.monotonic() - lost_at
    print(
        f"first run: worker node lost after step 1's checkpoint ({killed} processes killed); the run ended "
        f"{seconds_to_exit:.0f} s later",
        file=sys.stderr,
    )
    actors = _new_actors(cluster, before)
    # Ray ends the job's actors on the surviving node when its driver ends
    deadline = time.monotonic() + 60
    while True:
        alive = [actor for actor in _new_actors(cluster, before) if actor["state"] != "DEAD"]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(2)
    checkpoint_at_loss = int(tracker.read_text().strip())
    # the worker node back, as docs/recipes.md says: ray_cluster.sh worker <head>, then wait for both
    done = _launch(
        ["worker", cluster.address, *cluster.worker.ray_start_args],
        {**cluster.client_env, "DFPO_RAY_DIR": str(cluster.worker.ray_dir)},
        cluster.launcher_output,
    )
    assert done.returncode == 0, f"restarting the worker node failed:\n{done.stdout}\n{done.stderr}"
    cluster.worker.pid = int((cluster.worker.ray_dir / "ray.pid").read_text())
    done = _launch(["wait", cluster.address, "2"], cluster.client_env, cluster.launcher_output)
    assert done.returncode == 0, f"ray_cluster.sh wait failed after the restart:\n{done.stdout}\n{done.stderr}"
    logs = file_log_steps(cluster.output_root / "logs" / "dfpo")
    return NodeLoss(run, actors, nodes, logs, nodes["worker"], killed, seconds_to_exit, checkpoint_at_loss, alive)


@pytest.fixture(scope="module")
def job_run(cluster, first_run):
    """The same experiment relaunched as a Ray job after the node loss: the job submission, and the
    resume on two nodes from the last complete checkpoint (one launch for both, to keep CI's budget:
    each launch costs about 1-2 minutes here)."""
    before = {actor["actor_id"] for actor in cluster.state("actors")}
    logs_before = set(file_log_steps(cluster.output_root / "logs" / "dfpo"))
    submission_id = f"dfpo-multi-node-test-{os.getpid()}"
    knobs = _recipe_env(
        cluster, TOTAL_TRAINING_STEPS=str(STEPS), EXPERIMENT_NAME=EXPERIMENT, SUBMISSION_ID=submission_id
    )
    # as docs/recipes.md has it: RAY_ADDRESS is the head's dashboard for the job commands
    knobs["RAY_ADDRESS"] = cluster.dashboard
    submitted = run_command(["bash", str(JOB_SUBMIT), f"recipes/{RECIPE}"], knobs, timeout_s=120)
    cluster.runs["submit"] = submitted
    assert submitted.returncode == 0, submitted.tail()
    assert f"ray job logs --follow {submission_id}" in submitted.output
    followed = run_command(
        [sys.executable, "-m", "ray.scripts.scripts", "job", "logs", "--follow", submission_id],
        {**cluster.client_env, "RAY_ADDRESS": cluster.dashboard},
        timeout_s=RUN_TIMEOUT_S,
    )
    cluster.runs["job"] = followed
    print(
        f"ray job submit run (resumed on 2 nodes after the node loss), followed: {followed.seconds:.0f} s",
        file=sys.stderr,
    )
    status = cluster.ray("job", "status", submission_id, RAY_ADDRESS=cluster.dashboard)
    # "Status for job '<id>': SUCCEEDED" / "Job '<id>' succeeded"
    assert "succeeded" in (status.stdout + status.stderr).lower(), (
        f"{status.stdout}\n{status.stderr}\njob log:\n{followed.tail()}"
    )
    jobs = [
        job
        for job in cluster.state("jobs")
        if job.get("submission_id") == submission_id and job.get("type") == "SUBMISSION"
    ]
    new_logs = {
        path: steps
        for path, steps in file_log_steps(cluster.output_root / "logs" / "dfpo").items()
        if path not in logs_before
    }
    return followed, jobs, _new_actors(cluster, before), new_logs


def test_both_nodes_join_with_one_logical_gpu_each(cluster):
    nodes = [node for node in cluster.state("nodes") if node["state"] == "ALIVE"]
    assert sorted(node["is_head_node"] for node in nodes) == [False, True]
    for node in nodes:
        assert node["resources_total"].get("GPU") == 1.0, node["resources_total"]
    # the token file the head created: the user's alone
    assert oct(cluster.token_file.stat().st_mode & 0o777) == "0o600"
    assert len(cluster.token_file.read_text().strip()) == 64


def test_a_client_with_another_token_or_without_token_mode_is_refused(cluster):
    wrong = cluster.output_root.parent / "wrong_token"
    wrong.write_text("0" * 64)
    wrong.chmod(0o600)
    for env in ({"RAY_AUTH_TOKEN_PATH": str(wrong)}, {"RAY_AUTH_MODE": "disabled"}):
        done = cluster.ray("status", f"--address={cluster.address}", **env)
        assert done.returncode != 0 and "InvalidAuthToken" in done.stderr, (env, done.stdout, done.stderr[-2000:])
        assert "node_" not in done.stdout


def test_one_rank_on_each_node(cluster, first_run):
    ranks = _rank_actors(first_run.actors)
    assert len(ranks) == 2, [(actor["class_name"], actor.get("required_resources")) for actor in first_run.actors]
    assert {actor["node_id"] for actor in ranks} == set(first_run.nodes.values()), ranks


def test_plugin_and_platform_in_every_process_of_both_nodes(cluster, first_run):
    records = [json.loads(path.read_text()) for path in cluster.probe_records.glob("*.json")]
    assert records, "no process recorded an import of verl"
    for record in records:
        assert record["verl_platform"] == "cpu", record
        assert record["plugin_loaded"] and record["dfpo_loss_registered"] and record["cpu_backend_active"], record
    on_node = {node: [r for r in records if r.get("node_id") == node_id] for node, node_id in first_run.nodes.items()}
    assert on_node["head"] and on_node["worker"], f"records per node: { {k: len(v) for k, v in on_node.items()} }"
    # both FSDP ranks ran verl under the probe (their processes are among the records)
    recorded_pids = {record["pid"] for record in records}
    for actor in _rank_actors(first_run.actors):
        assert actor["pid"] in recorded_pids, actor


def test_a_lost_worker_node_ends_the_run_in_bounded_time_saying_which(cluster, first_run):
    """dfpo.operations.node_watch: the driver ends with status 75 (EX_TEMPFAIL) naming the node, not after
    gloo's 30-minute timeout, and Ray ends the run's actors on the surviving node with it."""
    run = first_run.run
    assert first_run.killed >= 3, first_run.killed  # ray start, raylet, rank 1 at least
    assert run.returncode == 75, f"exit {run.returncode}:\n{run.tail()}"
    assert first_run.seconds_to_exit < NODE_LOSS_EXIT_BOUND_S
    message = next((line for line in run.output.splitlines() if "was lost during the run" in line), "")
    assert f"Ray node {first_run.lost_node_id} (" in message, run.tail()
    assert "relaunch the same command" in message
    assert first_run.actors_alive_after == [], [
        (a["class_name"], a["state"], a["node_id"]) for a in first_run.actors_alive_after
    ]
    assert first_run.checkpoint_at_loss == 1


def test_checkpoint_shards_of_both_ranks_under_the_shared_output_root(cluster, first_run):
    experiment = cluster.output_root / "checkpoints" / "dfpo" / EXPERIMENT
    actor = experiment / "global_step_1" / "actor"
    for rank in range(2):
        for kind in ("model", "optim", "extra_state"):
            assert (actor / f"{kind}_world_size_2_rank_{rank}.pt").is_file(), (
                f"{kind} of rank {rank} missing in {actor}"
            )


def test_each_relaunch_resumes_at_the_next_step_losing_and_repeating_none(cluster, first_run, job_run):
    """After the node loss the Ray job resumes at the step after the last complete checkpoint; the
    two launches trained steps 1..3 once each."""
    followed, _, _, new_logs = job_run
    assert len(new_logs) == 1, sorted(map(str, new_logs))
    (lost,) = first_run.logs.values()
    (finished,) = new_logs.values()
    done = first_run.checkpoint_at_loss
    # the lost run logged exactly the steps its checkpoint holds; the relaunch trains on from there
    assert _training_steps(lost) == list(range(1, done + 1)), first_run.run.tail()
    assert _training_steps(finished) == list(range(done + 1, STEPS + 1)), followed.tail()
    experiment = cluster.output_root / "checkpoints" / "dfpo" / EXPERIMENT
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    # the relaunch was compared with the config the first launch recorded (dfpo.launch.resume)
    assert (experiment / "dfpo_run_config.yaml").is_file()
    assert "has no dfpo_run_config.yaml" not in followed.output
    for rank in range(2):
        assert (experiment / f"global_step_{STEPS}" / "actor" / f"model_world_size_2_rank_{rank}.pt").is_file()


def test_ray_job_submit_runs_the_recipe_across_both_nodes_with_the_knobs(cluster, job_run):
    followed, jobs, actors, new_logs = job_run
    assert len(jobs) == 1
    env_vars = jobs[0]["runtime_env"]["env_vars"]
    for knob in (
        "NNODES",
        "GPUS_PER_NODE",
        "OUTPUT_ROOT",
        "TOTAL_TRAINING_STEPS",
        "EXPERIMENT_NAME",
        "ALLOW_LOCAL_CHECKPOINTS",
        "PYTHON",
    ):
        assert knob in env_vars, sorted(env_vars)
    assert env_vars["TOTAL_TRAINING_STEPS"] == str(STEPS) and env_vars["EXPERIMENT_NAME"] == EXPERIMENT
    assert not any(key.startswith("RAY_AUTH") for key in env_vars), sorted(env_vars)
    # the knobs reached the recipe: its run is named, sized and stored as exported at submission
    assert [path.name.split(".")[0] for path in new_logs] == [EXPERIMENT], followed.tail()
    ranks = _rank_actors(actors)
    assert len(ranks) == 2 and {actor["node_id"] for actor in ranks} == set(cluster.node_ids().values()), ranks


def _running(pid: int) -> bool:
    """The process exists and has not ended (an ended child nobody reaped is a zombie)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _command(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())[:160]
    except psutil.Error:
        return "?"


def test_the_launcher_stops_both_nodes_and_everything_they_started(cluster, job_run):
    assert cluster.seen_pids, "the watcher saw no process of the cluster"
    for node in (cluster.worker, cluster.head):
        done = _launch(["stop"], {**cluster.client_env, "DFPO_RAY_DIR": str(node.ray_dir)}, cluster.launcher_output)
        assert done.returncode == 0, done.stderr
        assert f"stopped Ray (pid {node.pid})" in done.stderr
    cluster.stopped = True
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = [pid for pid in cluster.seen_pids if _running(pid)]
        if not alive:
            break
        time.sleep(1)
    assert not alive, [(pid, _command(pid)) for pid in alive]
    assert not (cluster.head.ray_dir / "ray.pid").exists() and not (cluster.worker.ray_dir / "ray.pid").exists()


def test_the_token_never_shows_in_logs_arguments_or_environments(cluster, job_run):
    token = cluster.token_file.read_text().strip()
    assert not cluster.token_seen_in, cluster.token_seen_in
    outputs = cluster.launcher_output + [run.output for run in cluster.runs.values()]
    assert not any(token in text for text in outputs)
    searched = 0
    for directory in (
        cluster.head.ray_dir,
        cluster.worker.ray_dir,
        cluster.head.temp_dir,
        cluster.worker.temp_dir,
        cluster.output_root / "logs",
    ):
        for path in directory.rglob("*"):
            if path.is_file() and not path.is_symlink() and path.stat().st_size < 50_000_000:
                searched += 1
                assert token.encode() not in path.read_bytes(), f"the token is in {path}"
    assert searched > 10
