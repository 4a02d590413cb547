"""A real one-node SLURM cluster on this machine, for the tests: munged, slurmctld and slurmd.

Debian's ``slurm-wlm`` (22.05; ``scripts/install_system_deps.sh`` installs it with ``munge``) run
from a private directory: their own ``slurm.conf``, munge key and socket, state, spool, logs and
ports (free ones, found at start), so nothing of a system SLURM on the machine is read or touched.
The daemons run as root (slurmd must, to start jobs); every one is stopped by the process id it
wrote, after every job is cancelled and every ``slurmstepd`` it started has ended.

The configuration is what the sbatch template must survive on a real cluster:

* ``TaskPlugin=task/affinity`` with ``CR_Core``: each step is bound to the CPUs SLURM gives it,
  and a test exports ``SLURM_EXACT=1`` (``srun --exact``, the step semantics of newer releases and
  of cgroup-constrained clusters) so that a step that asks for no CPUs gets one;
* GRES ``gpu`` with two device files (character devices made here; slurmd refuses a GPU without
  one, ``Removing file-less GPU``), so SLURM sets ``CUDA_VISIBLE_DEVICES`` in every step as it
  does on a GPU node; nothing opens them;
* ``JobRequeue=1`` (batch jobs may be requeued); a requeued job is held by SLURM for about two
  minutes (its ``EligibleTime``) before it may start again: :meth:`SlurmCluster.release` makes it
  eligible at once, as an operator may (``scontrol update jobid=N StartTime=now``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
GPUS = 2
STOP_TIMEOUT_S = 30


def missing_binaries() -> list[str]:
    return [path for path in (*DAEMONS, "/usr/bin/sbatch", "/usr/bin/scontrol") if not os.access(path, os.X_OK)]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
            ports.append(probe.getsockname()[1])
    finally:
        for probe in sockets:
            probe.close()
    return ports


@dataclass
class SlurmCluster:
    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    pids: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0
    stopped: bool = False

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a SLURM client (sbatch, scontrol, squeue) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def cpus(self) -> int:
        return len(os.sched_getaffinity(0))

    def _write_config(self) -> None:
        for folder in ("state", "spool", "log", "munge", "dev"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        for index in range(GPUS):  # character devices (1, 3) = /dev/null's numbers: never opened
            device = self.root / "dev" / f"nvidia{index}"
            if not device.exists():
                os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        controller_port, node_port = free_ports(2)
        root = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=dfpotest",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={controller_port}",
                    f"SlurmdPort={node_port}",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={root}/munge/munge.socket",
                    f"StateSaveLocation={root}/state",
                    f"SlurmdSpoolDir={root}/spool",
                    f"SlurmctldPidFile={root}/slurmctld.pid",
                    f"SlurmdPidFile={root}/slurmd.pid",
                    f"SlurmctldLogFile={root}/log/slurmctld.log",
                    f"SlurmdLogFile={root}/log/slurmd.log",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/affinity",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "GresTypes=gpu",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "JobRequeue=1",
                    # SIGTERM to SIGKILL when SLURM ends a job (scancel, scontrol requeue): SLURM's default
                    "KillWait=30",
                    "MinJobAge=600",
                    "SchedulerParameters=sched_interval=2",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus()} Gres=gpu:{GPUS} State=UNKNOWN",
                    f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        (self.root / "gres.conf").write_text(f"Name=gpu File={root}/dev/nvidia[0-{GPUS - 1}]\n")

    def _run(self, *command: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        done = subprocess.run(
            list(command),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    def _pid_file(self, path: Path, name: str, timeout_s: float = 20) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().strip().isdigit():
                return int(path.read_text().strip())
            time.sleep(0.1)
        raise RuntimeError(f"{name} wrote no pid file {path} within {timeout_s} s:\n{self.logs()}")

    def start(self) -> SlurmCluster:
        if os.geteuid() != 0:
            raise RuntimeError("a SLURM cluster for the tests runs slurmd as root: run the tests as root")
        missing = missing_binaries()
        if missing:
            raise RuntimeError(
                f"{missing} not installed: bash scripts/install_system_deps.sh installs slurm-wlm and munge"
            )
        self.started_at = time.time()
        self._write_config()
        root = self.root
        self._run(
            "/usr/sbin/munged",
            "--force",  # as root: the key and socket are this directory's, nobody else's
            f"--socket={root}/munge/munge.socket",
            f"--key-file={root}/munge/munge.key",
            f"--log-file={root}/log/munged.log",
            f"--pid-file={root}/munge/munged.pid",
            f"--seed-file={root}/munge/munged.seed",
        )
        self.pids["munged"] = self._pid_file(root / "munge" / "munged.pid", "munged")
        self._run("/usr/sbin/slurmctld", "-f", str(self.conf))
        self.pids["slurmctld"] = self._pid_file(root / "slurmctld.pid", "slurmctld")
        self._run("/usr/sbin/slurmd", "-f", str(self.conf))
        self.pids["slurmd"] = self._pid_file(root / "slurmd.pid", "slurmd")
        deadline = time.monotonic() + 60
        while True:
            state = self._run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.strip()
            if state in ("idle", "idle~"):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"the SLURM node never became idle (state {state!r}):\n{self.logs()}")
            time.sleep(0.5)

    def logs(self) -> str:
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-25:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ---- jobs ---------------------------------------------------------------------------------
    def sbatch(self, args: list[str], env: dict[str, str], cwd: Path) -> int:
        done = subprocess.run(
            ["sbatch", "--parsable", *args],
            env={**env, **self.env},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, ExitCode, Restarts, ...); {} once it is forgotten."""
        done = self._run("scontrol", "show", "job", "-o", str(job_id), check=False)
        if done.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", done.stdout))

    def wait_for(self, job_id: int, states: tuple[str, ...], timeout_s: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not in {states} within {timeout_s} s: {info}\n{self.logs()}")
            time.sleep(0.5)

    def release(self, job_id: int) -> None:
        """A requeued job may start now, not after SLURM's two-minute hold."""
        self._run("scontrol", "update", f"jobid={job_id}", "StartTime=now")

    def signal_batch(self, job_id: int, signal_name: str = "TERM") -> None:
        """What ``--signal=B:TERM@T`` sends before the time limit: the signal to the batch shell only."""
        self._run("scancel", "--batch", f"--signal={signal_name}", str(job_id))

    def cancel(self, job_id: int, timeout_s: float = 60) -> None:
        """``scancel`` the job and wait until SLURM has ended it."""
        self._run("scancel", str(job_id), check=False)
        deadline = time.monotonic() + timeout_s
        while self.job(job_id).get("JobState") in ("RUNNING", "COMPLETING", "PENDING", "REQUEUED"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still not ended {timeout_s} s after scancel: {self.job(job_id)}")
            time.sleep(0.5)

    # ---- stop ---------------------------------------------------------------------------------
    def step_daemons(self) -> list[psutil.Process]:
        """The ``slurmstepd`` processes started since this cluster started (one per job step)."""
        found = []
        for process in psutil.process_iter(["name", "create_time"]):
            try:
                if process.info["name"] == "slurmstepd" and process.info["create_time"] >= self.started_at - 1:
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def stop(self) -> list[str]:
        """Cancel every job, wait for their step daemons, stop the daemons by pid; what was left alive.
        Once stopped, nothing more (a SLURM client would wait for the controller it cannot reach)."""
        if self.stopped:
            return []
        self.stopped = True
        if "slurmctld" in self.pids:
            self._run("scancel", "--full", "--user=root", check=False)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.step_daemons() and time.monotonic() < deadline:
                time.sleep(0.5)
        stepds = self.step_daemons()
        for process in stepds:
            try:
                process.kill()
            except psutil.Error:
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.get(name)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        left = []
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.get(name)
            if pid is None:
                continue
            try:
                process = psutil.Process(pid)
                process.wait(timeout=STOP_TIMEOUT_S)
            except psutil.NoSuchProcess:
                continue
            except psutil.TimeoutExpired:
                process.kill()
                left.append(f"{name} (pid {pid}) needed SIGKILL")
        left += [f"slurmstepd pid {p.pid} still running at stop" for p in stepds]
        return left

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
