"""Activating the local CPU backend in a process (called by dfpo's verl plugin).

:func:`activate` runs in every process that imports verl with ``VERL_PLATFORM=cpu``: the driver,
the TaskRunner, the trainer's worker actors, the agent-loop and reward workers. It is idempotent.
"""

from __future__ import annotations

import functools
import os

from dfpo.local.platform import CPU_PLATFORM_NAME, register_cpu_platform

_ACTIVATED = False


def local_backend_selected() -> bool:
    """Whether this process was started to run verl on CPU (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM_NAME


def gloo_process_group(initialize):
    """Wrap verl's ``initialize_global_process_group_ray`` so that it asks for plain ``gloo``.

    Without a backend verl builds ``f"cpu:gloo,{device}:{backend}"`` = ``"cpu:gloo,cpu:gloo"`` on
    CPU, which torch refuses (a device type listed twice). An explicit backend is passed through.
    """

    @functools.wraps(initialize)
    def initialize_with_gloo(timeout_second=None, backend=None):
        return initialize(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_with_gloo.__dfpo_gloo__ = True
    return initialize_with_gloo


def register_cpu_engine() -> None:
    """verl's own FSDP2 engine for device ``cpu`` (verl registers it for cuda/npu only). FSDP1
    cannot run on CPU (verl wraps with ``sync_module_states=True``, GPU tensors only), so
    ``strategy=fsdp`` then fails with verl's own "no engine registered" message."""
    from verl.workers.engine import EngineRegistry, FSDPEngineWithLMHead

    if "cpu" not in EngineRegistry._engines["language_model"].get("fsdp2", {}):
        EngineRegistry.register(model_type="language_model", backend="fsdp2", device="cpu")(FSDPEngineWithLMHead)


def register_local_rollout() -> None:
    """``rollout.name=local`` in verl's replica registry (trainer side) and adapter registry (worker side)."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from dfpo.local.rollout import LOCAL_ROLLOUT_NAME

    def load_replica():
        from dfpo.local.rollout import LocalRolloutReplica

        return LocalRolloutReplica

    RolloutReplicaRegistry.register(LOCAL_ROLLOUT_NAME, load_replica)
    rollout_base._ROLLOUT_REGISTRY[(LOCAL_ROLLOUT_NAME, "async")] = "dfpo.local.rollout.LocalServerAdapter"


def activate() -> None:
    """Make verl in this process run on CPU: check the internals, register platform, engine and
    rollout, and fix the process-group backend at the name verl's workers call."""
    global _ACTIVATED
    if _ACTIVATED:
        return
    from dfpo.local.verl_internals import check_verl_internals

    check_verl_internals()
    register_cpu_platform()
    register_cpu_engine()
    register_local_rollout()
    from verl.workers import engine_workers

    if not getattr(engine_workers.initialize_global_process_group_ray, "__dfpo_gloo__", False):
        engine_workers.initialize_global_process_group_ray = gloo_process_group(engine_workers.initialize_global_process_group_ray)
    _ACTIVATED = True
