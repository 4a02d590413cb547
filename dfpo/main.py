"""``python -m dfpo.main`` — verl's PPO entry point with DFPO's trainer, config and worker.

    python -m dfpo.main method=dfpo_orth_proj data.train_files=... actor_rollout_ref.model.path=...

Before Ray starts, :func:`dfpo.launch.preflight.preflight` checks what would otherwise fail after minutes
of start-up or learn nothing (the group size, batch sizes and token budgets, multi-node checkpoint
storage, the checkpoint to resume and whether its run had this config) and prints a GPU run's memory plan;
a GPU run that scores code stops there unless the code-reward sandbox is strong (or ``REWARD_SANDBOX_ALLOW_WEAK=1``),
on this node and then, from the TaskRunner, on every Ray node (:func:`check_sandbox_on_every_node`);
``dfpo.dry_run=true`` stops there, printing the composed config, without starting Ray. While it
runs, :mod:`dfpo.operations.node_watch` ends it within seconds of a lost Ray node, and SIGTERM
ends it after the step in flight, checkpointed (:mod:`dfpo.operations.preemption`). It is
verl's ``main_ppo`` with three differences, all through verl's extension points: the config
is ``dfpo/config/dfpo_trainer.yaml`` (verl's ``ppo_trainer`` plus DFPO's defaults), the Ray
TaskRunner imports :mod:`dfpo.verl.trainer` so that ``trainer.v1.trainer_mode=dfpo_sync`` (or
``dfpo_colocate_async``, ``dfpo_separate_async``) resolves,
and the baselines (GSPO, GRPO, GRPO-fix) run through the same trainer, with the ``dfpo/``
learning-tax diagnostics: ``method=<name>`` picks one of ``dfpo/config/method/*.yaml``
(:mod:`dfpo.launch.methods`).
"""

from __future__ import annotations

import signal

import hydra
import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device

from dfpo.launch import config_resolvers, driver_setup
from dfpo.launch.preflight import PreflightError, check_sandbox_isolation, preflight
from dfpo.launch.resume import record_run_config
from dfpo.operations.node_watch import NodeWatch, run_watched
from dfpo.operations.preemption import InstallOnCreate, Preemption, grace_from_environment, run_preemptible

_TaskRunnerV1 = TaskRunnerV1.__ray_actor_class__
config_resolvers.register()  # also for Hydra's --cfg job --resolve, which prints before main runs


class DFPOTaskRunner(_TaskRunnerV1):
    """verl's V1 TaskRunner, with DFPO's trainer registered in the TaskRunner process."""

    def run(self, config):
        import dfpo.verl.trainer  # noqa: F401  (registers trainer_mode=dfpo_sync / dfpo_colocate_async / dfpo_separate_async)

        check_sandbox_on_every_node()  # before any worker: verl's reward workers go to every node
        return super().run(config)


def check_sandbox_on_every_node(timeout_s: float = 300.0, say=lambda text: print(text, flush=True)) -> list[dict]:
    """In a GPU run that scores code (``REWARD_SANDBOX_REQUIRE_STRONG=1``, set by the driver:
    :func:`dfpo.launch.driver_setup.require_strong_sandbox`), the code-reward sandbox of every alive Ray node with
    CPUs (verl 0.9.1 places its reward-loop workers round-robin over exactly those), one task per
    node (:func:`reward.sandbox.detect.node_check`); stops the run naming every node where it is weak
    or missing and the launch did not opt in. Returns the nodes' results ([] when not required)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from reward.sandbox.detect import node_check, refuse_weak_nodes, strong_required

    if not strong_required():
        return []
    nodes = [node for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
    probe = ray.remote(num_cpus=0)(node_check)
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)).remote()
        for node in nodes
    ]
    results = ray.get(refs, timeout=timeout_s)
    say(
        "dfpo: code-reward sandbox per node: "
        + ", ".join(f"{r['host']} {r['level']}{'' if r['strong'] else ' (weak)'}" for r in results)
    )
    refuse_weak_nodes(results)
    return results


def check_trainer_mode(config) -> None:
    """DFPO needs verl's V1 trainer in one of dfpo's modes; say how to fix anything else."""
    from dfpo.verl.trainer import DFPO_TRAINER_MODES

    if not config.trainer.use_v1:
        raise ValueError("dfpo.main runs verl's V1 trainer only: remove trainer.use_v1=false")
    mode = config.trainer.v1.trainer_mode
    if mode not in DFPO_TRAINER_MODES:
        hint = f" (did you mean 'dfpo_{mode}'?)" if f"dfpo_{mode}" in DFPO_TRAINER_MODES else ""
        raise ValueError(
            f"trainer.v1.trainer_mode={mode!r}{hint}: dfpo.main needs one of {sorted(DFPO_TRAINER_MODES)} "
            "(verl's sync / colocate_async / separate_async trainer with DFPO's actor worker)"
        )


@hydra.main(config_path="config", config_name="dfpo_trainer", version_base=None)
def main(config) -> None:
    # Ctrl-C, and the node watch's interrupt, as KeyboardInterrupt even where the driver was started
    # in the background of a non-interactive shell (which starts it with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        driver_setup.resolve(config)  # every interpolation and dfpo resolver, once, here (dfpo.launch.driver_setup)
        driver_setup.check_platform(config)
        driver_setup.drop_node_resources_on_a_cluster(config)
        driver_setup.forward_resource_log_dir(config)  # dfpo.resource_log_dir to every Ray worker (resource meter)
        driver_setup.continue_tracker_run(config)  # with W&B: the experiment's one run, resumed by every launch
        if not config.dfpo.dry_run:
            driver_setup.tee_console(config.dfpo.console_log)  # the recipes' console log of the run
            driver_setup.prepare_example(config)  # an example's model and task, written once
    except driver_setup.DriverSetupError as error:
        raise SystemExit(f"dfpo: {error}") from None
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    check_trainer_mode(config)
    try:
        # an example's files are written at launch: a dry run, which writes nothing, cannot check them
        preflight(
            config, files=not (config.dfpo.dry_run and config.dfpo.example)
        )  # before Ray: groups, batches, checkpoint storage, the checkpoint to resume, memory
        # a GPU run that scores code: the strong sandbox here (or REWARD_SANDBOX_ALLOW_WEAK=1, said), and in every
        # Ray worker
        if check_sandbox_isolation(config):
            driver_setup.require_strong_sandbox(config)
    except PreflightError as error:
        raise SystemExit(f"dfpo preflight: {error}") from None
    if config.dfpo.dry_run:
        print(OmegaConf.to_yaml(config))
        print(
            "dfpo dry run (dfpo.dry_run=true): every check passed; the config above was not run and Ray was not started"
        )
        return
    print(
        f"dfpo: {config.trainer.experiment_name}: checkpoints in {config.trainer.default_local_dir}"
        + (f", console log {config.dfpo.console_log}" if config.dfpo.console_log else ""),
        flush=True,
    )
    record_run_config(config)  # what a relaunch that resumes this run is compared with (dfpo.launch.resume)
    try:
        watch = NodeWatch.from_environment()
        preemption = Preemption(grace_s=grace_from_environment())
    except ValueError as error:
        raise SystemExit(f"dfpo: {error}") from None
    # SIGTERM is taken over when verl creates the TaskRunner, just after its ray.init
    task_runner = InstallOnCreate(ray.remote(num_cpus=1)(DFPOTaskRunner), preemption.install)
    # a lost Ray node ends the run in seconds (exit status 75), not after the collectives' timeout;
    # SIGTERM after the step in flight and its checkpoint (75 too)
    run_preemptible(
        lambda: run_watched(lambda: run_ppo(config, task_runner_class=task_runner), watch, shutdown=ray.shutdown),
        preemption,
    )


if __name__ == "__main__":
    main()
