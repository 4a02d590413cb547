"""What ``python -m dfpo.main``'s driver does with the composed config before its checks and Ray.

* :func:`resolve` computes every interpolation and resolver of the config
  (:mod:`dfpo.launch.config_resolvers`) here, in the driver, once: the values the machine decides (a CPU's
  dtype and threads) and the derived ones (token budgets, paths, the experiment name) are then
  plain values for the checks, the run's record and every Ray worker.
* :func:`check_platform`: a config for the CPU backend (``trainer.device=cpu``) needs
  ``VERL_PLATFORM=cpu`` in the driver's own environment (verl picks its platform when it is
  imported); the recipes set it.
* :func:`cluster_to_join`: the Ray cluster verl's ``ray.init`` will join, found as Ray finds it:
  ``RAY_ADDRESS``, else ``ray_kwargs.ray_init.address``, else the address file the last ``ray start``
  on this machine wrote (``<Ray temp dir>/ray_current_cluster``). Ray removes that file only in
  ``ray stop``: after a head that ended otherwise (killed, out of memory, its container gone) a plain
  ``ray.init()`` waits minutes for a cluster that is gone, printing only GCS time-outs. Here such a
  file stops the launch in seconds, naming the file and what to do.
* :func:`drop_node_resources_on_a_cluster`: when the driver joins a running cluster, Ray
  refuses ``ray.init`` keys that size a node ("When connecting to an existing cluster, num_cpus
  and num_gpus must not be provided"); there, every node's resources are its ``ray start``'s, so
  those keys are dropped, saying so.
* :func:`require_strong_sandbox`: a GPU run that scores code tells its Ray workers to refuse a weak
  code-reward sandbox (``REWARD_SANDBOX_REQUIRE_STRONG=1`` in their runtime environment), with the
  launch's opt-in ``REWARD_SANDBOX_ALLOW_WEAK`` passed on.
* :func:`forward_resource_log_dir`: ``dfpo.resource_log_dir`` (the resource meter's directory,
  :mod:`dfpo.operations.resource_meter`) reaches every Ray worker as ``DFPO_RESOURCE_LOG_DIR`` in the
  launch's runtime environment, as an absolute path (a worker's working directory is not the driver's).
* :func:`continue_tracker_run`: with W&B among ``trainer.logger``, every launch of an experiment
  logs to the experiment's one W&B run (``WANDB_RUN_ID``, ``WANDB_RESUME=allow``: verl 0.9.1 passes
  no id to ``wandb.init``, so each requeued or relaunched attempt would start a new run, verl#2783).
* :func:`prepare_example`: ``dfpo.example`` names one of dfpo's examples (the tiny model, the
  pretrained SmolLM2), whose model and task are written under ``dfpo.output_root`` once
  (``python -m cpu_examples.prepare``, run only when they are missing or stale).
* :func:`tee_console`: the driver's output (Ray forwards every worker's) is also appended to
  ``dfpo.console_log``, one file per run across its launches.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from cpu_backend.selection import local_backend_selected
from dfpo.launch import config_resolvers

# Keys of ray.init that Ray refuses when the driver connects to a running cluster
RAY_INIT_NODE_KEYS = ("num_cpus", "num_gpus", "resources", "labels", "object_store_memory", "_system_config")


class DriverSetupError(ValueError):
    """The config cannot be run from this driver as it stands (the message says what to change)."""


def resolve(config) -> None:
    """Resolve ``config`` in place, registering dfpo's resolvers first; say a CPU config's dtypes."""
    config_resolvers.register()
    OmegaConf.resolve(config)
    config_resolvers.announce_cpu_dtypes(config)


def check_platform(config, environ: dict[str, str] | None = None) -> None:
    environ = os.environ if environ is None else environ
    if str(config.trainer.device) == "cpu" and environ.get("VERL_PLATFORM", "").strip().lower() != "cpu":
        raise DriverSetupError(
            "trainer.device=cpu runs verl on dfpo's CPU backend, which this driver selects only with VERL_PLATFORM=cpu "
            "in its environment: run VERL_PLATFORM=cpu python -m dfpo.main ... (the CPU recipes set it)"
        )
    if local_backend_selected() and str(config.trainer.device) != "cpu":
        raise DriverSetupError(
            "VERL_PLATFORM=cpu is set but trainer.device is not cpu: set trainer.device=cpu, or unset VERL_PLATFORM "
            "for a GPU run"
        )
    if local_backend_selected():
        # the CPU backend's own verl plugin (cpu_backend.verl_plugin) activated it on `import verl`,
        # where verl logs a failure at debug level only: here a failure is raised, in the driver
        from cpu_backend.activate import activate

        activate()


def ray_address_file(config, environ: dict[str, str] | None = None) -> Path:
    """Where ``ray start`` on this machine wrote the address a plain ``ray.init()`` joins: Ray 2.60's
    ``get_ray_address_file`` for ``ray_kwargs.ray_init._temp_dir``, else ``$RAY_TMPDIR/ray``, else
    ``$TMPDIR/ray``, else ``/tmp/ray``."""
    environ = os.environ if environ is None else environ
    temp_dir = OmegaConf.select(config, "ray_kwargs.ray_init._temp_dir")
    if not temp_dir:
        system_temp = environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp"
        temp_dir = os.path.join(system_temp, "ray")
    return Path(str(temp_dir)) / "ray_current_cluster"


def _answers(host: str, port: int, timeout_s: float = 2.0, tries: int = 3) -> bool:
    """Whether anything accepts a TCP connection at ``host:port`` (a Ray head's GCS does at once)."""
    for attempt in range(tries):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return True
        except OSError:
            if attempt + 1 < tries:
                time.sleep(0.5)
    return False


def cluster_to_join(config, environ: dict[str, str] | None = None, answers=_answers) -> str | None:
    """The address of the running Ray cluster verl's ``ray.init(**ray_kwargs.ray_init)`` will join, or
    ``None`` where it starts a Ray of the launch's own. Raises :class:`DriverSetupError` when the only
    source is Ray's address file (no ``RAY_ADDRESS``, no ``ray_init.address``) and nothing answers at
    the address it names: a stopped cluster whose ``ray stop`` never ran."""
    environ = os.environ if environ is None else environ
    named_in_config = OmegaConf.select(config, "ray_kwargs.ray_init.address")
    address = environ.get("RAY_ADDRESS", "").strip() or str(named_in_config or "")
    if address and address != "auto":
        return None if address == "local" else address
    path = ray_address_file(config, environ)
    try:
        named = path.read_text().strip()
    except FileNotFoundError:
        return address or None  # "auto" joins any Ray running here, or fails saying none is
    except OSError as error:
        raise DriverSetupError(
            f"Ray's address file {path} cannot be read ({error}); ray.init() would read it to find the cluster to "
            "join: fix its permissions, or set RAY_ADDRESS=local to start a Ray of this launch's own"
        ) from None
    if not named:
        return address or None
    host, _, port = named.rpartition(":")
    if not host or not port.isdigit() or not answers(host.strip("[]"), int(port)):
        raise DriverSetupError(
            f"Ray's address file {path} names the cluster at {named!r}, where nothing answers: its head ended without "
            "`ray stop`, which is what removes that file. ray.init() joins the cluster this file names whenever "
            "RAY_ADDRESS is unset, and would wait minutes for it. Run `ray stop` on this machine (it removes the "
            f"file), or delete {path}, or set RAY_ADDRESS=local to start a Ray of this launch's own; to join a "
            "cluster that is running, set RAY_ADDRESS to its head's address"
        )
    return named


def drop_node_resources_on_a_cluster(
    config, say=print, environ: dict[str, str] | None = None, answers=_answers
) -> list[str]:
    """Remove :data:`RAY_INIT_NODE_KEYS` from ``ray_kwargs.ray_init`` when the driver joins a running
    cluster (:func:`cluster_to_join`); returns the keys removed."""
    address = cluster_to_join(config, environ, answers)
    ray_init = OmegaConf.select(config, "ray_kwargs.ray_init")
    if address is None or ray_init is None:
        return []
    dropped = [key for key in RAY_INIT_NODE_KEYS if key in ray_init and ray_init[key] is not None]
    if dropped:
        with open_dict(config):
            for key in dropped:
                del config.ray_kwargs.ray_init[key]
        say(
            f"dfpo: joining the running Ray cluster at {address}: its nodes' resources are their ray start's, so not "
            f"passing ray_kwargs.ray_init.{{{','.join(dropped)}}}"
        )
    return dropped


def require_strong_sandbox(config, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Tell every Ray worker of a GPU run that scores code (:func:`dfpo.launch.preflight.check_sandbox_isolation`)
    to refuse a weak sandbox (``REWARD_SANDBOX_REQUIRE_STRONG=1`` in ``ray_kwargs.ray_init.runtime_env.env_vars``),
    passing the launch's opt-in ``REWARD_SANDBOX_ALLOW_WEAK`` on; returns the variables set. A
    run-management key: a resumed run compares none of it (dfpo.launch.resume)."""
    from reward.sandbox.detect import ALLOW_WEAK_ENV, REQUIRE_STRONG_ENV, weak_allowed

    environ = os.environ if environ is None else environ
    variables = {REQUIRE_STRONG_ENV: "1", **({ALLOW_WEAK_ENV: "1"} if weak_allowed(environ) else {})}
    for name, value in variables.items():
        OmegaConf.update(config, f"ray_kwargs.ray_init.runtime_env.env_vars.{name}", value, force_add=True)
    return variables


def forward_resource_log_dir(config, say=print) -> str | None:
    """Set ``DFPO_RESOURCE_LOG_DIR`` in ``ray_kwargs.ray_init.runtime_env.env_vars`` to ``dfpo.resource_log_dir``
    made absolute, so that every Ray worker meters its phases (:mod:`dfpo.operations.resource_meter`); returns
    the directory, ``None`` (nothing set) when the key is null or empty. A run-management key: a
    resumed run compares none of it (dfpo.launch.resume)."""
    from dfpo.operations.resource_meter import LOG_DIR_ENV

    directory = OmegaConf.select(config, "dfpo.resource_log_dir")
    if directory is None or not str(directory).strip():
        return None
    directory = str(Path(str(directory).strip()).expanduser().resolve())
    OmegaConf.update(config, f"ray_kwargs.ray_init.runtime_env.env_vars.{LOG_DIR_ENV}", directory, force_add=True)
    say(f"dfpo: resource meter on: every Ray worker writes its phases' bytes, forward passes and RSS to {directory}")
    return directory


def continue_tracker_run(config, environ: dict[str, str] | None = None, say=print) -> dict[str, str]:
    """With ``wandb`` in ``trainer.logger``: set ``WANDB_RUN_ID`` (the launching shell's, else the
    experiment's, :func:`dfpo.launch.run_identity.tracker_run_id`) and ``WANDB_RESUME`` (the shell's,
    else ``allow``) in ``ray_kwargs.ray_init.runtime_env.env_vars``, where verl's ``Tracking`` runs
    ``wandb.init``; returns them ({} without W&B). A run-management key: a resumed run compares none
    of it (dfpo.launch.resume)."""
    from dfpo.launch.run_identity import tracker_run_id

    logger = config.trainer.logger
    if "wandb" not in ([logger] if isinstance(logger, str) else list(logger)):
        return {}
    environ = os.environ if environ is None else environ
    trainer = config.trainer
    variables = {
        "WANDB_RUN_ID": environ.get("WANDB_RUN_ID")
        or tracker_run_id(str(trainer.project_name), str(trainer.experiment_name), str(trainer.default_local_dir)),
        "WANDB_RESUME": environ.get("WANDB_RESUME") or "allow",
    }
    for name, value in variables.items():
        OmegaConf.update(config, f"ray_kwargs.ray_init.runtime_env.env_vars.{name}", value, force_add=True)
    say(
        f"dfpo: W&B run {variables['WANDB_RUN_ID']} (resume {variables['WANDB_RESUME']}): every launch of this "
        "experiment logs to it"
    )
    return variables


def prepare_example(config) -> None:
    """Write ``dfpo.example``'s model and task under ``dfpo.output_root`` (once; a no-op when current:
    :func:`cpu_examples.prepare.is_prepared`, checked in this process)."""
    example = OmegaConf.select(config, "dfpo.example")
    if not example:
        return
    root = OmegaConf.select(config, "dfpo.output_root")
    from cpu_examples.prepare import is_prepared

    try:
        current = is_prepared(
            Path(str(root)), str(example)
        )  # checked here: the command's own imports cost a relaunch 2 s
    except (OSError, ValueError):  # an unreadable file (JSON, parquet): the command rebuilds it or says what is wrong
        current = False
    if current:
        return
    command = [sys.executable, "-m", "cpu_examples.prepare", "--model", str(example), "--output-root", str(root)]
    result = subprocess.run(command, stdout=sys.stderr)
    if result.returncode != 0:
        raise DriverSetupError(f"{' '.join(command)} failed (exit status {result.returncode}; see above)")


def _ignore_interrupt() -> None:
    # a scheduler's signal to the whole process group must not end the tee before the driver's
    # last words (dfpo.operations.preemption's exit 75); the tee ends when the driver's output closes
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)


def tee_console(path: str | None) -> None:
    """Append everything this process (and what it runs) writes to stdout and stderr to ``path``
    too, through one ``tee -a`` per stream (stdout stays stdout, stderr stderr; in the file the two
    streams' lines keep their own order, not their order against each other). The tees ignore
    Ctrl-C, SIGTERM and SIGHUP, so the driver's last words reach the file."""
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        tee = subprocess.Popen(
            ["tee", "-a", path], stdin=subprocess.PIPE, stdout=stream.fileno(), preexec_fn=_ignore_interrupt
        )
        os.dup2(tee.stdin.fileno(), stream.fileno())
        tee.stdin.close()
