"""The sbatch template under a real SLURM: the tiny DFPO recipe trains, stops, is requeued and resumes.

A one-node SLURM cluster runs on this machine (:mod:`tests.slurm_cluster`: munged, slurmctld and
slurmd of Debian's slurm-wlm, ``TaskPlugin=task/affinity``, two GRES GPUs). Every job is submitted
with ``SLURM_EXACT=1`` in its environment: a step that asks for no CPUs gets one, as on clusters with
newer releases' ``--exact`` step semantics or cgroup-constrained cores.

``sbatch scripts/launch/slurm_dfpo.sbatch recipes/run_dfpo_min_replace_tiny_cpu.sh`` (1 node, its 2
CPUs, ``--gpus-per-node=2``: 2 training ranks) as a user submits it, with W&B in offline mode among
the loggers. Once step 1 is logged, the batch shell gets SIGTERM as ``--signal=B:TERM@360`` sends it
before a time limit (``scancel --batch --signal=TERM``): the run finishes its step, checkpoints it
and exits 75; the template stops the job's Ray and requeues the job; SLURM holds it (released here
at once, as an operator may) and starts it again; the recipe resumes from that checkpoint and
finishes: exit 0. Checked:

* every Python process of every step of both attempts (a probe records each one as it starts:
  ``tests/e2e/process_probe``) may run on both CPUs, and sees the two GPUs the job asked for in
  ``CUDA_VISIBLE_DEVICES``; the old template's steps (no ``srun -c``: a mutant made from the template)
  run on one CPU under the same SLURM, so this check fails it;
* the stop: exit 75 within a bound, the step in flight checkpointed, the job requeued by the template;
* every training step logged exactly once over the two attempts, the second starting at the step
  after the checkpoint, and the experiment's file logs read as one series;
* one W&B run: both attempts' offline runs carry the same run id, the experiment's;
* both ranks' checkpoints; nothing of the job left running; and at the end, the SLURM daemons
  stopped by process id with no job, step daemon or process of theirs left.

This module's launches replace the SIGTERM'd relaunch tests/e2e/test_multi_node_cpu.py made before:
the preemption path is checked here, through the scheduler that sends it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from dfpo.launch.run_identity import tracker_run_id
from dfpo.operations.training_logs import read_training_log
from tests.e2e.recipe_runs import REPO_ROOT, file_log_steps
from tests.slurm_cluster import GPUS, SlurmCluster, free_ports

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # serial: verl's trainer through Ray needs the machine to itself

TEMPLATE = REPO_ROOT / "scripts" / "launch" / "slurm_dfpo.sbatch"
PROBE = REPO_ROOT / "tests" / "e2e" / "process_probe"
RECIPE = "recipes/run_dfpo_min_replace_tiny_cpu.sh"
PROJECT = "dfpo"
STEPS = 3
START_TIMEOUT_S = 300  # submission to step 1 logged (Ray, verl's trainer, 2 ranks on 2 cores)
STOP_BOUND_S = 240  # SIGTERM to the job requeued: the rest of one step, its checkpoint, Ray's stop
FINISH_TIMEOUT_S = 420
# where `ray start` (default temp dir) leaves the address a plain ray.init() on this machine joins
RAY_ADDRESS_FILE = Path("/tmp/ray/ray_current_cluster")


def _job_env(root: Path, records: Path, **knobs: str) -> dict[str, str]:
    """The submitting shell's environment (sbatch exports it to the job) with the recipe's knobs."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_", "WANDB_"))}
    ray_port, dashboard_port = free_ports(2)
    return {
        **inherited,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        "PYTHON": sys.executable,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH", "")])),
        "DFPO_PROCESS_PROBE_DIR": str(records),
        "DFPO_PROCESS_PROBE_START": "1",
        # newer releases' step semantics: a step that asks for no CPUs gets one
        "SLURM_EXACT": "1",
        "DFPO_RAY_DIR": str(root / "ray"),
        "DFPO_RAY_PORT": str(ray_port),
        "DFPO_RAY_DASHBOARD_PORT": str(dashboard_port),
        "RAY_AUTH_TOKEN_PATH": str(root / "ray_token"),
        # Ray's default object store (30% of memory) is too much for a 24 GiB machine
        "RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION": "0.04",
        **knobs,
    }


def _records(records: Path, job_id: int) -> list[dict]:
    found = []
    for path in records.glob("start-*.json"):
        record = json.loads(path.read_text())
        if record["slurm_job_id"] == str(job_id):
            found.append(record)
    return found


def _steps_off_their_allocation(records: list[dict], cpus: list[int]) -> list[str]:
    """Each process that may run on fewer CPUs than the job's: '<step> <argv>: <its CPUs>'."""
    return [
        f"step {record['slurm_step_id'] or 'batch'} {' '.join(record['argv'][:3])}: CPUs {record['cpus']}"
        for record in records
        if record["cpus"] != cpus
    ]


def _job_processes(job_id: int) -> list[str]:
    left = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.environ().get("SLURM_JOB_ID") == str(job_id):
                left.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])[:120]}")
        except psutil.Error:
            continue
    return left


@pytest.fixture(scope="module")
def slurm():
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="dfpo-slurm-", dir="/tmp"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.remove()


@dataclass
class RequeuedRun:
    job_id: int
    root: Path
    output: str
    first: dict  # scontrol's view once the first attempt was requeued
    final: dict  # once the job ended
    signalled_after: int  # the last step logged when SIGTERM was sent
    seconds_to_requeue: float
    checkpoint_after_stop: int
    logs: dict[Path, dict[int, dict]]
    records: list[dict]
    left_after: list[str]
    ray_port: str
    address_after: str | None  # what the default ray_current_cluster said once the job had ended

    @property
    def experiment_dir(self) -> Path:
        (folder,) = (self.root / "runs" / "checkpoints" / PROJECT).iterdir()
        return folder


@pytest.fixture(scope="module")
def requeued(slurm, tiny_example, tmp_path_factory):
    root = Path(tempfile.mkdtemp(prefix="dfpo-sl-", dir="/tmp"))  # Ray's socket paths stay short
    records = root / "probe"
    records.mkdir()
    output_root = tiny_example(root / "runs")
    log_dir = output_root / "logs" / PROJECT
    output = root / "job.out"
    env = _job_env(
        root,
        records,
        OUTPUT_ROOT=str(output_root),
        ALLOW_LOCAL_CHECKPOINTS="1",
        TOTAL_TRAINING_STEPS=str(STEPS),
        SAVE_FREQ="100",  # no checkpoint due before the last step: the stop's is the one resumed from
        VAL_BEFORE_TRAIN="false",
        TEST_FREQ="-1",
        # dfpo's transformers rollout: under test are the scheduler, the binding and the resume;
        # a vLLM engine per rank would add a minute to each attempt
        ROLLOUT_NAME="local",
        CPU_THREADS_PER_RANK="1",
        # on a CPU node Ray's CPUs are logical slots for the trainer's actors (each rank's bundle asks
        # for 3), as the CPU platform's own ray.init has 16 of them; the binding is what the probe checks
        CPUS_PER_NODE="16",
        WANDB_MODE="offline",
        WANDB_DIR=str(root),
    )
    job_id = slurm.sbatch(
        [
            "--nodes=1",
            f"--gpus-per-node={GPUS}",
            f"--output={output}",
            str(TEMPLATE),
            RECIPE,
            "trainer.logger=[console,file,wandb]",
        ],
        env,
        REPO_ROOT,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S

        def logged() -> list[int]:
            if not log_dir.exists():
                return []
            return sorted(
                step
                for steps in file_log_steps(log_dir).values()
                for step, metrics in steps.items()
                if "actor/grad_norm" in metrics
            )

        while 1 not in logged():
            state = slurm.job(job_id).get("JobState")
            assert state in ("PENDING", "RUNNING") and time.monotonic() < deadline, (
                f"job {job_id} ({state}) did not log step 1 within {START_TIMEOUT_S} s:\n"
                + (output.read_text()[-6000:] if output.exists() else "no output")
            )
            time.sleep(0.5)
        signalled_after = max(logged())
        slurm.signal_batch(job_id, "TERM")
        signalled_at = time.monotonic()
        deadline = signalled_at + STOP_BOUND_S
        while True:
            first = slurm.job(job_id)
            if first.get("Restarts") == "1" and first.get("JobState") == "PENDING":
                break
            assert time.monotonic() < deadline and first.get("JobState") in ("RUNNING", "COMPLETING", "REQUEUED"), (
                f"job {job_id} was not requeued within {STOP_BOUND_S} s of SIGTERM: {first}\n"
                + output.read_text()[-6000:]
            )
            time.sleep(0.5)
        seconds_to_requeue = time.monotonic() - signalled_at
        tracker = next((output_root / "checkpoints" / PROJECT).glob("*/latest_checkpointed_iteration.txt"))
        checkpoint_after_stop = int(tracker.read_text().strip())
        left_after = _job_processes(job_id)
        print(
            f"slurm: SIGTERM after step {signalled_after}; requeued {seconds_to_requeue:.0f} s later",
            file=sys.stderr,
        )
        slurm.release(job_id)
        released_at = time.monotonic()
        final = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), FINISH_TIMEOUT_S)
        print(
            f"slurm: the requeued job resumed and finished in {time.monotonic() - released_at:.0f} s",
            file=sys.stderr,
        )
        yield RequeuedRun(
            job_id,
            root,
            output.read_text(),
            first,
            final,
            signalled_after,
            seconds_to_requeue,
            checkpoint_after_stop,
            file_log_steps(log_dir),
            _records(records, job_id),
            left_after + _job_processes(job_id),
            env["DFPO_RAY_PORT"],
            RAY_ADDRESS_FILE.read_text().strip() if RAY_ADDRESS_FILE.exists() else None,
        )
    finally:
        if not slurm.stopped and slurm.job(job_id).get("JobState") not in (None, "COMPLETED", "FAILED", "CANCELLED"):
            slurm.cancel(job_id)
        shutil.rmtree(root, ignore_errors=True)


def test_the_template_trains_through_a_requeue_and_exits_0(requeued):
    assert requeued.final["JobState"] == "COMPLETED" and requeued.final["ExitCode"] == "0:0", (
        f"{requeued.final}\n{requeued.output[-6000:]}"
    )
    assert requeued.final["Restarts"] == "1"
    assert "the run stopped with exit 75 and its step saved: requeueing job" in requeued.output
    # both attempts in one output file (--open-mode=append), the second saying which attempt it is
    assert "attempt 1" in requeued.output and "attempt 2" in requeued.output


def test_sigterm_checkpoints_the_step_in_flight_and_the_job_is_requeued_in_bounded_time(requeued):
    assert requeued.seconds_to_requeue < STOP_BOUND_S
    first_attempt = [steps for steps in requeued.logs.values() if min(steps) == 1]
    assert len(first_attempt) == 1
    last_trained = max(step for step, metrics in first_attempt[0].items() if "actor/grad_norm" in metrics)
    # the step in flight at SIGTERM finished and was saved (SAVE_FREQ=100 saves no other)
    assert requeued.checkpoint_after_stop == last_trained >= requeued.signalled_after
    assert last_trained < STEPS, "the run finished before SIGTERM reached it: nothing was resumed"
    assert requeued.left_after == [], f"the stopped attempt left processes running: {requeued.left_after}"


def test_every_step_is_logged_exactly_once_over_both_attempts(requeued):
    assert len(requeued.logs) == 2, f"one file log per attempt expected: {sorted(requeued.logs)}"
    trained = sorted(
        step for steps in requeued.logs.values() for step, metrics in steps.items() if "actor/grad_norm" in metrics
    )
    assert trained == list(range(1, STEPS + 1))
    second = next(steps for steps in requeued.logs.values() if min(steps) != 1)
    assert min(second) == requeued.checkpoint_after_stop + 1
    # the experiment's launches read as one series through the name no launch writes
    experiment = requeued.experiment_dir.name
    series = read_training_log(requeued.root / "runs" / "logs" / PROJECT / f"{experiment}.jsonl")
    assert series["actor/grad_norm"].steps.tolist() == list(range(1, STEPS + 1))


def test_both_attempts_log_to_the_one_wandb_run_of_the_experiment(requeued):
    runs = sorted((requeued.root / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, f"one offline W&B run per attempt expected: {runs}"
    ids = {re.sub(r"^offline-run-\d{8}_\d{6}-", "", run.name) for run in runs}
    expected = tracker_run_id(PROJECT, requeued.experiment_dir.name, str(requeued.experiment_dir))
    assert ids == {expected}


def test_every_process_of_every_step_runs_on_the_jobs_cpus_and_sees_its_gpus(requeued):
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2
    records = requeued.records
    # the batch shell's driver and the srun steps (hostname is not Python; the head's `ray start`
    # and every Ray process it started are), in both attempts
    steps = {(record["slurm_restart_count"], record["slurm_step_id"] or "batch") for record in records}
    assert {restart for restart, _ in steps} == {"0", "1"}
    assert sum(1 for _, step in steps if step != "batch") >= 2, steps
    assert _steps_off_their_allocation(records, cpus) == []
    visible = ",".join(str(index) for index in range(GPUS))
    assert {record["cuda_visible_devices"] for record in records} == {visible}
    # SLURM sets ROCR_VISIBLE_DEVICES beside it, which verl's workers refuse: Ray's node starts without it
    ray = [record for record in records if any("ray" in arg for arg in record["argv"][:3])]
    assert ray and all(record["rocr_visible_devices"] is None for record in ray)


def test_both_ranks_checkpoints(requeued):
    step = requeued.experiment_dir / f"global_step_{STEPS}" / "actor"
    shards = sorted(path.name for path in step.glob("model_world_size_2_rank_*.pt"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert requeued.left_after == [], f"processes of the job left running: {requeued.left_after}"


def test_the_jobs_ray_leaves_no_address_for_a_later_ray_init_to_join(requeued):
    """`ray start` writes /tmp/ray/ray_current_cluster and only `ray stop` removes it: a plain
    ray.init() on the node afterwards (the next job's driver, the next test) would join the stopped
    cluster. The launcher forgets it when its node stops."""
    assert requeued.address_after is None or not requeued.address_after.endswith(f":{requeued.ray_port}"), (
        requeued.address_after
    )


PROBE_RECIPE = """#!/usr/bin/env bash
# stands in for a recipe: one Python process in the batch step, then done
"$PYTHON" -c 'pass'
"""


def test_the_old_templates_steps_get_one_cpu_under_this_slurm(slurm, tmp_path):
    """The mutant: the template without its `srun -c` (as it was), the same SLURM and environment."""
    old = TEMPLATE.read_text().replace(' -c "$cpus"', "")
    assert old != TEMPLATE.read_text()
    mutant = tmp_path / "slurm_dfpo_without_cpus.sbatch"
    mutant.write_text(old)
    recipe = tmp_path / "probe_recipe.sh"
    recipe.write_text(PROBE_RECIPE)
    root = Path(tempfile.mkdtemp(prefix="dfpo-slm-", dir="/tmp"))
    records = root / "probe"
    records.mkdir()
    try:
        job_id = slurm.sbatch(
            ["--nodes=1", f"--gpus-per-node={GPUS}", f"--output={root / 'job.out'}", str(mutant), str(recipe)],
            _job_env(root, records),
            REPO_ROOT,
        )
        final = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert final["JobState"] == "COMPLETED", f"{final}\n{(root / 'job.out').read_text()[-4000:]}"
        off = _steps_off_their_allocation(_records(records, job_id), sorted(os.sched_getaffinity(0)))
        assert any("ray" in line for line in off), off  # the head step's `ray start` on one CPU
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_slurm_stops_leaving_no_daemon_job_or_process(slurm, requeued):
    daemons = dict(slurm.pids)
    left = slurm.stop()
    assert left == []
    for name, pid in daemons.items():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, name
    assert slurm.step_daemons() == []
    assert _job_processes(requeued.job_id) == []
