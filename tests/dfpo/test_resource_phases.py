"""The resource meter's wiring: phases around verl's worker methods (dfpo/verl/resource_phases.py), the
pre-pass's phase, and ``dfpo.resource_log_dir`` forwarded to the Ray workers (dfpo/launch/driver_setup.py).

* :func:`metered_phases` on a class built like verl's (``@register`` methods, an async one, a subclass
  overriding ``init_model``, a separate-async subclass with its own ``update_weights`` later in the
  MRO): every method runs its own code inside its phase, keeps verl's dispatch attributes and stays
  async; the root modules count forwards after ``init_model``; off, the class is untouched.
* The real worker (``dfpo.verl.workers``) imported without and with ``DFPO_RESOURCE_LOG_DIR``.
* The driver sets ``DFPO_RESOURCE_LOG_DIR`` (absolute) in the launch's runtime environment, and only
  when the key is set; the composed config has the key, null.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from omegaconf import OmegaConf
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register

from dfpo.launch import driver_setup
from dfpo.operations import resource_meter
from dfpo.verl.resource_phases import WORKER_PHASES, metered_phases
from tests.cpu.subprocess_probe import run_probe


class _Engine:
    def __init__(self):
        self.module = torch.nn.Linear(2, 2)


class _Part:
    def __init__(self):
        self.engine = _Engine()


class VerlLikeWorker:
    role = "actor_rollout"

    def __init__(self):
        self.calls: list[tuple[str, str | None]] = []
        self.actor = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        self.actor = _Part()
        self.calls.append("verl.init_model")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data):
        self.actor.engine.module(torch.zeros(1, 2))
        self.calls.append(("verl.compute_log_prob", data))
        return data + 1

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data):
        self.calls.append("verl.update_actor")
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps=None):
        self.calls.append("verl.update_weights")
        return global_steps


class Separate(VerlLikeWorker):
    async def update_weights(self, global_steps=None):  # like a subclass of verl's with its own
        self.calls.append("separate.update_weights")
        return global_steps


def _dfpo_like(base):
    class DFPOLike(base):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def init_model(self):
            super().init_model()
            self.calls.append("dfpo.init_model")

    return DFPOLike


@pytest.fixture
def meter_on(tmp_path, monkeypatch):
    monkeypatch.setattr(resource_meter, "_PROCESS_METER", None)
    monkeypatch.setenv(resource_meter.LOG_DIR_ENV, str(tmp_path))
    yield tmp_path
    if resource_meter._PROCESS_METER is not None:
        resource_meter._PROCESS_METER.uninstall()


def test_each_method_runs_its_own_code_inside_its_phase(meter_on):
    dfpo_like = _dfpo_like(VerlLikeWorker)
    worker_cls = metered_phases(dfpo_like)
    assert worker_cls is dfpo_like
    worker = worker_cls()
    worker.init_model()
    assert worker.compute_log_prob(1) == 2
    assert worker.update_actor(5) == 5
    assert asyncio.run(worker.update_weights(global_steps=3)) == 3
    expected = ["verl.init_model", "dfpo.init_model", ("verl.compute_log_prob", 1), "verl.update_actor"]
    assert worker.calls == [*expected, "verl.update_weights"]
    record = json.loads(next(meter_on.glob("actor_rollout-rank*-pid*.json")).read_text())
    assert set(record["phases"]) == {"model_init", "log_prob", "update", "weight_sync"}
    assert record["phases"]["log_prob"]["forward_passes"] == 1  # the actor's root module, hooked after init_model
    for name, phase in WORKER_PHASES.items():
        if hasattr(VerlLikeWorker, name):
            method = getattr(worker_cls, name)
            assert getattr(method, MAGIC_ATTR) == getattr(getattr(VerlLikeWorker, name), MAGIC_ATTR), name
            assert phase in record["phases"]
    assert asyncio.iscoroutinefunction(worker_cls.update_weights)


def test_a_later_class_in_the_mro_keeps_its_own_method(meter_on):
    dfpo_like = metered_phases(_dfpo_like(VerlLikeWorker))

    class SeparateDFPO(dfpo_like, Separate):  # as DFPODetachActorWorker(DFPOActorRolloutRefWorker, DetachActorWorker)
        pass

    worker = SeparateDFPO()
    assert asyncio.run(worker.update_weights(global_steps=7)) == 7
    assert worker.calls == ["separate.update_weights"]
    assert "weight_sync" in resource_meter._PROCESS_METER.totals


def test_a_decorated_class_runs_unmetered_once_the_variable_is_gone(meter_on, monkeypatch):
    worker_cls = metered_phases(_dfpo_like(VerlLikeWorker))
    monkeypatch.delenv(resource_meter.LOG_DIR_ENV)
    worker = worker_cls()
    worker.init_model()
    assert asyncio.run(worker.update_weights(global_steps=2)) == 2
    assert worker.calls == ["verl.init_model", "dfpo.init_model", "verl.update_weights"]
    assert resource_meter._PROCESS_METER is None and not list(meter_on.iterdir())


def test_off_the_class_is_untouched(monkeypatch):
    monkeypatch.delenv(resource_meter.LOG_DIR_ENV, raising=False)
    dfpo_like = _dfpo_like(VerlLikeWorker)
    own = dict(dfpo_like.__dict__)
    assert metered_phases(dfpo_like) is dfpo_like
    assert dict(dfpo_like.__dict__) == own


PROBE = """
import importlib, inspect, json, os
import torch.distributed as dist
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.workers.engine_workers import ActorRolloutRefWorker
import dfpo.verl.workers as workers

def state():
    cls = workers.DFPOActorRolloutRefWorker
    return {
        "own": sorted(n for n in ("compute_log_prob", "update_actor", "update_weights") if n in cls.__dict__),
        "attrs_kept": all(
            getattr(getattr(cls, n), MAGIC_ATTR) == getattr(getattr(ActorRolloutRefWorker, n), MAGIC_ATTR)
            for n in ("init_model", "compute_log_prob", "compute_ref_log_prob", "update_actor", "update_weights")
        ),
        "async": inspect.iscoroutinefunction(cls.update_weights),
        "detach_inherits": workers.DFPODetachActorWorker.update_actor is cls.update_actor,
    }

off = state()
os.environ["DFPO_RESOURCE_LOG_DIR"] = "unused"
importlib.reload(workers)
on = state()
print(json.dumps({"off": off, "on": on, "patched": hasattr(dist.all_reduce, "__dfpo_resource_meter__")}))
"""


@pytest.mark.slow
def test_the_real_worker_is_metered_only_with_the_variable():
    answer = run_probe(PROBE, {}, drop=(resource_meter.LOG_DIR_ENV,))
    assert answer["off"] == {"own": [], "attrs_kept": True, "async": True, "detach_inherits": True}
    assert answer["on"] == {
        "own": ["compute_log_prob", "update_actor", "update_weights"],
        "attrs_kept": True,
        "async": True,
        "detach_inherits": True,
    }
    assert answer["patched"] is False  # the collectives are wrapped by the first metered call, not at import


def test_the_driver_forwards_the_directory_to_every_ray_worker(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = OmegaConf.create({"dfpo": {"resource_log_dir": "meter"}, "ray_kwargs": {"ray_init": {}}})
    said = []
    assert driver_setup.forward_resource_log_dir(config, say=said.append) == str(tmp_path / "meter")
    assert config.ray_kwargs.ray_init.runtime_env.env_vars[resource_meter.LOG_DIR_ENV] == str(tmp_path / "meter")
    assert said and str(tmp_path / "meter") in said[0]
    for off in (None, "", "  "):
        config = OmegaConf.create({"dfpo": {"resource_log_dir": off}, "ray_kwargs": {"ray_init": {}}})
        assert driver_setup.forward_resource_log_dir(config, say=said.append) is None
        assert OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env") is None


def test_the_recipe_config_has_the_switch_off():
    from dfpo.launch.compose import compose_trainer_config

    config = compose_trainer_config([], "dfpo_trainer")
    assert config.dfpo.resource_log_dir is None
    config = compose_trainer_config(["dfpo.resource_log_dir=/shared/meter"], "dfpo_trainer")
    assert config.dfpo.resource_log_dir == "/shared/meter"
