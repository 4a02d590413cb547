"""Activating the local CPU backend in a process (called by dfpo's verl plugin).

:func:`activate` runs in every process that imports verl with ``VERL_PLATFORM=cpu``: the driver,
the TaskRunner, the trainer's worker actors, the agent-loop and reward workers. It is idempotent.
"""

from __future__ import annotations

import functools

from cpu_backend import gloo_all_to_all, varlen_attention
from cpu_backend.platform import register_cpu_platform

_ACTIVATED = False


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

    from cpu_backend.local_rollout import LOCAL_ROLLOUT_NAME

    def load_replica():
        from cpu_backend.local_rollout import LocalRolloutReplica

        return LocalRolloutReplica

    RolloutReplicaRegistry.register(LOCAL_ROLLOUT_NAME, load_replica)
    rollout_base._ROLLOUT_REGISTRY[(LOCAL_ROLLOUT_NAME, "async")] = "cpu_backend.local_rollout.LocalServerAdapter"


def register_local_checkpoint_engine() -> None:
    """``rollout.checkpoint_engine.backend=local`` in verl's checkpoint-engine registry (the
    separate-async trainer's weight sync to its standalone rollout replicas)."""
    import cpu_backend.checkpoint_engine  # noqa: F401  (registers on import)


def copying_sharded_save(save):
    """Wrap verl's ``fsdp2_sharded_save_to_cpu`` so that it returns copies.

    It keeps ``param._local_tensor.detach().cpu()`` per parameter, a copy on GPU but the live
    parameter itself on CPU (``.cpu()`` of a CPU tensor returns it). The separate-async trainer's
    ``save_model_to_cpu(0)`` would then follow every later optimizer step, and
    ``restore_model_from_cpu(0)`` would restore the current weights instead of pi_old.
    """

    @functools.wraps(save)
    def save_copies(model):
        state, spec = save(model)
        return {name: (tensor.clone(), tensor_spec) for name, (tensor, tensor_spec) in state.items()}, spec

    save_copies.__dfpo_copies__ = True
    return save_copies


def activate() -> None:
    """Make verl in this process run on CPU: check the internals (and that verl can see vLLM's CPU
    build, :mod:`cpu_backend.vllm_cpu`), register platform, engine,
    rollout and checkpoint engine, the packed attention (:mod:`cpu_backend.varlen_attention`) and
    Ulysses all-to-all (:mod:`cpu_backend.gloo_all_to_all`) of the GPU path, fix the process-group
    backend at the name verl's workers call and make verl's sharded save to CPU copy."""
    global _ACTIVATED
    if _ACTIVATED:
        return
    from cpu_backend.verl_internals import check_verl_internals
    from cpu_backend.vllm_cpu import check_vllm_distribution_name

    check_verl_internals()
    check_vllm_distribution_name()
    register_cpu_platform()
    register_cpu_engine()
    register_local_rollout()
    register_local_checkpoint_engine()
    varlen_attention.install()
    gloo_all_to_all.install()
    from verl.utils import fsdp_utils
    from verl.workers import engine_workers

    if not getattr(fsdp_utils.fsdp2_sharded_save_to_cpu, "__dfpo_copies__", False):
        fsdp_utils.fsdp2_sharded_save_to_cpu = copying_sharded_save(fsdp_utils.fsdp2_sharded_save_to_cpu)

    if not getattr(engine_workers.initialize_global_process_group_ray, "__dfpo_gloo__", False):
        engine_workers.initialize_global_process_group_ray = gloo_process_group(
            engine_workers.initialize_global_process_group_ray
        )
    _ACTIVATED = True
