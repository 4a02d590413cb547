"""Every verl 0.9.1 internal the local CPU backend touches, named in one place and checked.

The local backend (:mod:`cpu_backend`) plugs into verl through registries and one patched name.
None of these is a documented, stable API, so each is listed here with what we rely on, and
:func:`check_verl_internals` verifies all of them against the installed verl when the backend
is activated: a verl that moved one of them fails at start-up with the name, not mid-run.

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


def check_verl_internals() -> None:
    """Raise :class:`VerlInternalsChanged` naming the first internal that is missing or changed."""
    from verl.checkpoint_engine import base as checkpoint_engine_base
    from verl.experimental.separation import engine_workers as separation_workers
    from verl.plugin.platform import PlatformRegistry
    from verl.utils import distributed, fsdp_utils
    from verl.workers import engine_workers
    from verl.workers.engine import EngineRegistry, FSDPEngineWithLMHead
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout import replica

    _require(callable(getattr(PlatformRegistry, "register", None)), "verl.plugin.platform.PlatformRegistry.register")
    _require(
        isinstance(getattr(EngineRegistry, "_engines", None), dict) and "language_model" in EngineRegistry._engines,
        "verl.workers.engine.EngineRegistry._engines['language_model']",
    )
    _require(inspect.isclass(FSDPEngineWithLMHead), "verl.workers.engine.FSDPEngineWithLMHead")
    _require(
        getattr(engine_workers, "initialize_global_process_group_ray", None) is not None,
        "verl.workers.engine_workers.initialize_global_process_group_ray",
    )
    source = inspect.getsource(distributed.initialize_global_process_group_ray)
    _require(
        VERL_DEFAULT_BACKEND_PATTERN in source and "backend=None" in source,
        f"initialize_global_process_group_ray(backend=None) defaulting to {VERL_DEFAULT_BACKEND_PATTERN}",
    )
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
    _require(
        isinstance(getattr(rollout_base, "_ROLLOUT_REGISTRY", None), dict),
        "verl.workers.rollout.base._ROLLOUT_REGISTRY",
    )
    _require(
        {"resume", "update_weights", "release"} <= set(getattr(rollout_base.BaseRollout, "__abstractmethods__", ())),
        "BaseRollout's abstract resume / update_weights / release",
    )
    _require(
        callable(getattr(checkpoint_engine_base.CheckpointEngineRegistry, "register", None))
        and {"prepare", "build_topology", "init_process_group", "finalize", "send_weights", "receive_weights"}
        <= set(getattr(checkpoint_engine_base.CheckpointEngine, "__abstractmethods__", ()))
        and callable(getattr(checkpoint_engine_base, "split_weight_chunks", None))
        and callable(getattr(checkpoint_engine_base, "merge_weight_chunks", None)),
        "verl.checkpoint_engine.base: CheckpointEngineRegistry.register, CheckpointEngine's abstract methods, "
        "split_weight_chunks / merge_weight_chunks",
    )
    from verl.models.transformers import monkey_patch
    from verl.utils import ulysses

    _require(
        callable(getattr(monkey_patch, "_flash_attention_forward", None))
        and "attn_output = _flash_attention_forward("
        in inspect.getsource(monkey_patch._ulysses_flash_attention_forward),
        "verl.models.transformers.monkey_patch._ulysses_flash_attention_forward calling the module-global "
        "_flash_attention_forward",
    )
    _require(
        callable(getattr(ulysses, "all_to_all_tensor", None))
        and "return all_to_all_tensor(" in inspect.getsource(ulysses.SeqAllToAll.forward)
        and "all_to_all_tensor(input_t" in inspect.getsource(ulysses.SeqAllToAll.backward),
        "verl.utils.ulysses.SeqAllToAll calling the module-global all_to_all_tensor",
    )
    _require(
        callable(getattr(fsdp_utils, "fsdp2_sharded_save_to_cpu", None))
        and "from verl.utils.fsdp_utils import"
        in inspect.getsource(separation_workers.DetachActorWorker._get_strategy_handlers),
        "verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu, imported at call time by "
        "DetachActorWorker._get_strategy_handlers",
    )
