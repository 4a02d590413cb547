"""Every verl 0.9.1 internal the local CPU backend touches, named in one place and checked.

The local backend (:mod:`cpu_backend`) plugs into verl through registries and one patched name.
None of these is a documented, stable API, so each is listed here with what we rely on and
checked against the installed verl: in every process of a CPU run right after verl's module that
holds it is imported (before the backend registers or patches anything there, :data:`CHECKS`),
and all at once in the driver before Ray starts (:func:`check_verl_internals`, through
:func:`cpu_backend.activate.activate`): a verl that moved one of them fails at start-up with the
name, not mid-run.

=====================================================================  ==========================================
internal                                                               what the backend relies on
=====================================================================  ==========================================
``verl.plugin.platform.PlatformRegistry``                              ``register(platform=)`` / ``get``; verl
                                                                       resolves ``VERL_PLATFORM`` lazily
``verl.workers.engine.EngineRegistry``                                 ``register(model_type=, backend=, device=)``
                                                                       and the ``_engines`` mapping it fills
``verl.workers.engine.FSDPEngineWithLMHead``                           verl's FSDP2 engine, reused for ``cpu``
``verl.workers.engine_workers.initialize_global_process_group_ray``    the name ``TrainingWorker.__init__`` calls;
                                                                       its default backend string is
                                                                       ``"cpu:gloo,{device}:{backend}"``
``verl.workers.rollout.replica.RolloutReplicaRegistry``                ``register(name, loader)``
``verl.workers.rollout.replica.RolloutReplica``                        ``launch_servers``, ``workers``,
                                                                       ``_server_handle``, ``_server_address``
``verl.workers.rollout.replica.TokenOutput``                           ``token_ids``, ``log_probs``,
                                                                       ``stop_reason``, ``extra_fields``
``verl.workers.rollout.base._ROLLOUT_REGISTRY``                        ``(name, "async") -> "module.Class"``
``verl.workers.rollout.base.BaseRollout``                              ``resume``, ``update_weights``, ``release``
``verl.checkpoint_engine.base.CheckpointEngineRegistry``               ``register(backend)``; ``CheckpointEngine``'s
                                                                       abstract methods; ``split_weight_chunks`` /
                                                                       ``merge_weight_chunks``
``verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu``                    imported at call time by the separate-async
                                                                       ``DetachActorWorker``; returns
                                                                       ``({name: (tensor, spec)}, spec)``
``verl.models.transformers.monkey_patch._flash_attention_forward``     the kernel ``_ulysses_flash_attention_forward``
                                                                       calls by that module-global name
``verl.utils.ulysses.all_to_all_tensor``                               ``SeqAllToAll`` calls it by that
                                                                       module-global name, list-form all-to-all
=====================================================================  ==========================================
"""

from __future__ import annotations

import importlib
import inspect

# The backend string verl builds when no backend is given; on CPU it reads "cpu:gloo,cpu:gloo",
# which torch rejects (a device type twice). The process-group fix depends on this exact form.
VERL_DEFAULT_BACKEND_PATTERN = 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"'


class VerlInternalsChanged(ImportError):
    """The installed verl no longer has an internal the local CPU backend plugs into."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise VerlInternalsChanged(
            f"dfpo's local CPU backend needs {what}, which the installed verl does not have. It is written "
            "for verl==0.9.1 exactly: reinstall it (`pip install -r requirements-cpu.txt`)."
        )


def check_platform_registry(platform) -> None:
    """``verl.plugin.platform``."""
    _require(
        callable(getattr(platform.PlatformRegistry, "register", None)), "verl.plugin.platform.PlatformRegistry.register"
    )


def check_engine_registry(engine) -> None:
    """``verl.workers.engine``."""
    registry = getattr(engine, "EngineRegistry", None)
    _require(
        isinstance(getattr(registry, "_engines", None), dict) and "language_model" in registry._engines,
        "verl.workers.engine.EngineRegistry._engines['language_model']",
    )
    _require(inspect.isclass(getattr(engine, "FSDPEngineWithLMHead", None)), "verl.workers.engine.FSDPEngineWithLMHead")


def check_process_group(engine_workers) -> None:
    """``verl.workers.engine_workers`` (and the default it inherits from ``verl.utils.distributed``)."""
    from verl.utils import distributed

    _require(
        getattr(engine_workers, "initialize_global_process_group_ray", None) is not None,
        "verl.workers.engine_workers.initialize_global_process_group_ray",
    )
    source = inspect.getsource(distributed.initialize_global_process_group_ray)
    _require(
        VERL_DEFAULT_BACKEND_PATTERN in source and "backend=None" in source,
        f"initialize_global_process_group_ray(backend=None) defaulting to {VERL_DEFAULT_BACKEND_PATTERN}",
    )


def check_replica_registry(replica) -> None:
    """``verl.workers.rollout.replica``."""
    _require(callable(getattr(replica.RolloutReplicaRegistry, "register", None)), "RolloutReplicaRegistry.register")
    _require(
        "launch_servers" in getattr(replica.RolloutReplica, "__abstractmethods__", ()),
        "RolloutReplica.launch_servers (abstract)",
    )
    fields = set(getattr(replica.TokenOutput, "model_fields", {}))
    _require(
        {"token_ids", "log_probs", "stop_reason", "extra_fields"} <= fields,
        "TokenOutput fields token_ids, log_probs, stop_reason, extra_fields",
    )


def check_rollout_registry(rollout_base) -> None:
    """``verl.workers.rollout.base``."""
    _require(
        isinstance(getattr(rollout_base, "_ROLLOUT_REGISTRY", None), dict),
        "verl.workers.rollout.base._ROLLOUT_REGISTRY",
    )
    _require(
        {"resume", "update_weights", "release"} <= set(getattr(rollout_base.BaseRollout, "__abstractmethods__", ())),
        "BaseRollout's abstract resume / update_weights / release",
    )


def check_checkpoint_engine_registry(checkpoint_engine_base) -> None:
    """``verl.checkpoint_engine.base``."""
    _require(
        callable(getattr(checkpoint_engine_base.CheckpointEngineRegistry, "register", None))
        and {"prepare", "build_topology", "init_process_group", "finalize", "send_weights", "receive_weights"}
        <= set(getattr(checkpoint_engine_base.CheckpointEngine, "__abstractmethods__", ()))
        and callable(getattr(checkpoint_engine_base, "split_weight_chunks", None))
        and callable(getattr(checkpoint_engine_base, "merge_weight_chunks", None)),
        "verl.checkpoint_engine.base: CheckpointEngineRegistry.register, CheckpointEngine's abstract methods, "
        "split_weight_chunks / merge_weight_chunks",
    )


def check_attention_kernel(monkey_patch) -> None:
    """``verl.models.transformers.monkey_patch``."""
    _require(
        callable(getattr(monkey_patch, "_flash_attention_forward", None))
        and "attn_output = _flash_attention_forward("
        in inspect.getsource(monkey_patch._ulysses_flash_attention_forward),
        "verl.models.transformers.monkey_patch._ulysses_flash_attention_forward calling the module-global "
        "_flash_attention_forward",
    )


def check_all_to_all(ulysses) -> None:
    """``verl.utils.ulysses``."""
    _require(
        callable(getattr(ulysses, "all_to_all_tensor", None))
        and "return all_to_all_tensor(" in inspect.getsource(ulysses.SeqAllToAll.forward)
        and "all_to_all_tensor(input_t" in inspect.getsource(ulysses.SeqAllToAll.backward),
        "verl.utils.ulysses.SeqAllToAll calling the module-global all_to_all_tensor",
    )


def check_sharded_save(fsdp_utils) -> None:
    """``verl.utils.fsdp_utils``."""
    _require(
        callable(getattr(fsdp_utils, "fsdp2_sharded_save_to_cpu", None)),
        "verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu",
    )


def check_sharded_save_caller(separation_workers) -> None:
    """``verl.experimental.separation.engine_workers``: it takes the sharded save at call time, the patched one."""
    _require(
        "from verl.utils.fsdp_utils import"
        in inspect.getsource(separation_workers.DetachActorWorker._get_strategy_handlers),
        "verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu, imported at call time by "
        "DetachActorWorker._get_strategy_handlers",
    )


CHECKS = {
    "verl.plugin.platform": check_platform_registry,
    "verl.workers.engine": check_engine_registry,
    "verl.workers.engine_workers": check_process_group,
    "verl.workers.rollout.replica": check_replica_registry,
    "verl.workers.rollout.base": check_rollout_registry,
    "verl.checkpoint_engine.base": check_checkpoint_engine_registry,
    "verl.models.transformers.monkey_patch": check_attention_kernel,
    "verl.utils.ulysses": check_all_to_all,
    "verl.utils.fsdp_utils": check_sharded_save,
    "verl.experimental.separation.engine_workers": check_sharded_save_caller,
}
"""Each verl module the backend touches -> the check of what it relies on there. The backend runs
each right after that module's import (:mod:`cpu_backend.activate`); :func:`check_verl_internals`
runs them all."""


def check_verl_internals() -> None:
    """Raise :class:`VerlInternalsChanged` naming the first internal that is missing or changed
    (imports every module of :data:`CHECKS`)."""
    for name, check in CHECKS.items():
        check(importlib.import_module(name))
