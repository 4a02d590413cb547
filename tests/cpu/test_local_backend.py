"""dfpo's local CPU backend: selected only by VERL_PLATFORM=cpu, and pin-checked against verl."""

from __future__ import annotations

import pytest

from cpu_backend import activate as local_activate
from cpu_backend import verl_internals
from tests.cpu.subprocess_probe import run_probe

PROBE = r"""
import json, verl
from verl.plugin.platform import get_platform
from verl.utils import distributed
from verl.workers import engine_workers
from verl.workers.engine import EngineRegistry
from verl.workers.rollout import base
from verl.workers.rollout.replica import RolloutReplicaRegistry
print(json.dumps({
    "device": get_platform().device_name,
    "local_replica": "local" in RolloutReplicaRegistry._registry,
    "local_adapter": ("local", "async") in base._ROLLOUT_REGISTRY,
    "cpu_engine": "cpu" in EngineRegistry._engines["language_model"].get("fsdp2", {}),
    "process_group_patched": (
        engine_workers.initialize_global_process_group_ray is not distributed.initialize_global_process_group_ray
    ),
    "local_checkpoint_engine": (
        "local" in __import__("verl.checkpoint_engine", fromlist=["x"]).CheckpointEngineRegistry._registry
    ),
    "sharded_save_copies": hasattr(
        __import__("verl.utils.fsdp_utils", fromlist=["x"]).fsdp2_sharded_save_to_cpu, "__dfpo_copies__"
    ),
}))
"""


def _probe(env_update: dict[str, str], drop: tuple[str, ...] = ()) -> dict:
    return run_probe(PROBE, env_update, drop)


@pytest.mark.slow
def test_without_verl_platform_cpu_nothing_changes_in_verl():
    """What a GPU run's processes see: verl exactly as shipped (dfpo's plugin still loads)."""
    state = _probe({"VERL_USE_EXTERNAL_PLUGINS": "auto"}, drop=("VERL_PLATFORM",))
    assert state == {
        "device": "cuda",  # verl's fallback when no accelerator answers: unchanged
        "local_replica": False,
        "local_adapter": False,
        "cpu_engine": False,
        "process_group_patched": False,
        "local_checkpoint_engine": False,
        "sharded_save_copies": False,
    }


@pytest.mark.slow
def test_with_verl_platform_cpu_every_piece_is_in_place_in_a_fresh_process():
    """What every Ray process of a CPU run sees (the plugin activates the backend on import verl)."""
    state = _probe({"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_PLUGINS": "auto"})
    assert state == {
        "device": "cpu",
        "local_replica": True,
        "local_adapter": True,
        "cpu_engine": True,
        "process_group_patched": True,
        "local_checkpoint_engine": True,
        "sharded_save_copies": True,
    }


def test_gloo_wrapper_asks_for_plain_gloo_and_passes_explicit_backends_through():
    calls = []

    def initialize(timeout_second=None, backend=None):
        calls.append((timeout_second, backend))

    wrapped = local_activate.gloo_process_group(initialize)
    wrapped(timeout_second=None)
    wrapped(timeout_second=5, backend="cpu:gloo")
    assert calls == [(None, "gloo"), (5, "cpu:gloo")]


def test_installed_verl_has_every_internal_the_backend_uses():
    verl_internals.check_verl_internals()


def test_a_changed_process_group_default_is_refused_by_name(monkeypatch):
    from verl.utils import distributed

    def initialize_global_process_group_ray(timeout_second=None, backend=None):  # a verl that changed its default
        return backend or "nccl"

    monkeypatch.setattr(distributed, "initialize_global_process_group_ray", initialize_global_process_group_ray)
    with pytest.raises(verl_internals.VerlInternalsChanged, match="initialize_global_process_group_ray"):
        verl_internals.check_verl_internals()


def test_a_missing_rollout_registry_is_refused_by_name(monkeypatch):
    from verl.workers.rollout import base

    monkeypatch.delattr(base, "_ROLLOUT_REGISTRY")
    with pytest.raises(verl_internals.VerlInternalsChanged, match="_ROLLOUT_REGISTRY"):
        verl_internals.check_verl_internals()
