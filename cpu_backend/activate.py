"""Activating the local CPU backend in a process (called by dfpo's verl plugin and by the driver).

:func:`activate_on_import` runs in every process that imports verl with ``VERL_PLATFORM=cpu``: the
driver, the TaskRunner, the trainer's worker actors, the agent-loop and reward workers, the
rollout servers. It registers the platform and checks vLLM's distribution name at once (both
cheap) and everything else lazily: each registration or patch (:data:`ON_IMPORT`) runs right after
verl's module it touches is imported in that process, after that module's check
(:data:`cpu_backend.verl_internals.CHECKS`), through a one-shot import hook
(:func:`cpu_backend.import_hooks.after_import`); at once where the module is imported already. A
process that never imports verl's checkpoint engines or engine workers (most of a run's
processes) no longer pays for importing them: about 2 s each on 2 cores, vLLM's distributed
package included.

:func:`activate` is all of it at once, checked: it imports every module of :data:`ON_IMPORT` (so
each hook runs) after checking all of verl's internals. The driver calls it
(:func:`dfpo.launch.driver_setup.check_platform`), where a failure must raise: verl logs a
plugin's error at debug level only. Both are idempotent.
"""

from __future__ import annotations

import functools
import importlib

from cpu_backend import gloo_all_to_all, varlen_attention
from cpu_backend.import_hooks import after_import
from cpu_backend.platform import register_cpu_platform
from cpu_backend.selection import LOCAL_ROLLOUT_NAME
from cpu_backend.verl_internals import CHECKS, check_verl_internals
from cpu_backend.vllm_cpu import check_vllm_distribution_name

_ACTIVATED = False  # the backend is active in this process (its hooks are in place)
_CHECKED = False  # and everything is in place and checked (activate)


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


def register_cpu_engine(engine=None) -> None:
    """verl's own FSDP2 engine for device ``cpu`` (verl registers it for cuda/npu only). FSDP1
    cannot run on CPU (verl wraps with ``sync_module_states=True``, GPU tensors only), so
    ``strategy=fsdp`` then fails with verl's own "no engine registered" message."""
    if engine is None:
        engine = importlib.import_module("verl.workers.engine")
    registry = engine.EngineRegistry
    if "cpu" not in registry._engines["language_model"].get("fsdp2", {}):
        registry.register(model_type="language_model", backend="fsdp2", device="cpu")(engine.FSDPEngineWithLMHead)


def _load_replica():
    from cpu_backend.local_rollout import LocalRolloutReplica

    return LocalRolloutReplica


def register_local_replica(replica) -> None:
    """``rollout.name=local`` in verl's replica registry (trainer side)."""
    replica.RolloutReplicaRegistry.register(LOCAL_ROLLOUT_NAME, _load_replica)


def register_local_adapter(rollout_base) -> None:
    """``rollout.name=local`` in verl's adapter registry (worker side)."""
    rollout_base._ROLLOUT_REGISTRY[(LOCAL_ROLLOUT_NAME, "async")] = "cpu_backend.local_rollout.LocalServerAdapter"


def register_local_rollout() -> None:
    """``rollout.name=local`` in verl's replica registry (trainer side) and adapter registry (worker side)."""
    register_local_replica(importlib.import_module("verl.workers.rollout.replica"))
    register_local_adapter(importlib.import_module("verl.workers.rollout.base"))


def register_local_checkpoint_engine(checkpoint_engine_base=None) -> None:
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


def copy_sharded_saves(fsdp_utils) -> None:
    """Make ``verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu`` return copies (idempotent). No verl
    module copies the name at import time: the separate-async ``DetachActorWorker`` imports it at
    call time (checked, :func:`cpu_backend.verl_internals.check_sharded_save_caller`)."""
    if not getattr(fsdp_utils.fsdp2_sharded_save_to_cpu, "__dfpo_copies__", False):
        fsdp_utils.fsdp2_sharded_save_to_cpu = copying_sharded_save(fsdp_utils.fsdp2_sharded_save_to_cpu)


def use_gloo_process_group(engine_workers) -> None:
    """Wrap the name verl's ``TrainingWorker.__init__`` calls, a module global of
    ``verl.workers.engine_workers`` that no other verl module copies (idempotent)."""
    if not getattr(engine_workers.initialize_global_process_group_ray, "__dfpo_gloo__", False):
        engine_workers.initialize_global_process_group_ray = gloo_process_group(
            engine_workers.initialize_global_process_group_ray
        )


def _install_attention(monkey_patch) -> None:
    varlen_attention.install()


def _install_all_to_all(ulysses) -> None:
    gloo_all_to_all.install()


def _checked_only(module) -> None:
    """Nothing to register there: the module is only checked."""


ON_IMPORT = {
    "verl.workers.engine": register_cpu_engine,
    "verl.workers.engine_workers": use_gloo_process_group,
    "verl.workers.rollout.replica": register_local_replica,
    "verl.workers.rollout.base": register_local_adapter,
    "verl.checkpoint_engine.base": register_local_checkpoint_engine,
    "verl.models.transformers.monkey_patch": _install_attention,
    "verl.utils.ulysses": _install_all_to_all,
    "verl.utils.fsdp_utils": copy_sharded_saves,
    "verl.experimental.separation.engine_workers": _checked_only,
}
"""Each verl module the backend touches -> what it does there once the module is imported (after
the module's check, :data:`cpu_backend.verl_internals.CHECKS`)."""


def _checking_then(name: str, action):
    check = CHECKS[name]

    @functools.wraps(action)
    def check_then_act(module) -> None:
        check(module)
        action(module)

    return check_then_act


_HOOKS = {name: _checking_then(name, action) for name, action in ON_IMPORT.items()}


def activate_on_import() -> None:
    """dfpo's verl plugin, in every process with ``VERL_PLATFORM=cpu``: check vLLM's distribution
    name (a metadata look-up only) and verl's platform registry, register the platform, and hook
    each registration and patch of :data:`ON_IMPORT` to the import of its verl module: the engine,
    the rollout and checkpoint engine, the packed attention (:mod:`cpu_backend.varlen_attention`)
    and Ulysses all-to-all (:mod:`cpu_backend.gloo_all_to_all`) of the GPU path, the process-group
    backend at the name verl's workers call, and verl's sharded save to CPU made to copy."""
    global _ACTIVATED
    if _ACTIVATED:
        return
    from verl.plugin import platform

    check_vllm_distribution_name()
    CHECKS["verl.plugin.platform"](platform)
    register_cpu_platform()
    for name, hook in _HOOKS.items():
        after_import(name, hook)
    _ACTIVATED = True


def activate() -> None:
    """Make verl in this process run on CPU now, every internal checked (raises where one changed):
    :func:`activate_on_import`, then every verl module the backend touches imported, so that each
    registration and patch is in place when this returns."""
    global _CHECKED
    activate_on_import()
    if _CHECKED:
        return
    check_verl_internals()
    for name in ON_IMPORT:
        importlib.import_module(name)
    _CHECKED = True
