"""The resource meter's phases (:mod:`dfpo.operations.resource_meter`) around verl's worker methods.

:func:`metered_phases` decorates DFPO's actor worker class: with ``DFPO_RESOURCE_LOG_DIR`` set in the
worker's environment, each method of :data:`WORKER_PHASES` runs inside its phase (verl 0.9.1's
``ActorRolloutRefWorker`` in ``verl/workers/engine_workers.py``, the worker ``python -m dfpo.main``
runs: :class:`dfpo.verl.workers.DFPOActorRolloutRefWorker`), and after ``init_model`` the actor's
and the reference's root modules count their forward passes. Unset, the class is returned as it is
and nothing is patched. DFPO's pre-pass is metered where it runs (``DFPOTrainingWorker.train_batch``,
``prepass``, inside ``update``).

Each wrapper keeps verl's ``@register`` attributes (``functools.wraps`` copies them), so the worker
group dispatches the method as before, and calls the next class's method in the MRO (the separate-async
``DetachActorWorker``'s own, where it has one), or the class's own where it defines the method.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from dfpo.operations import resource_meter

# verl 0.9.1's ActorRolloutRefWorker method -> phase
WORKER_PHASES = {
    "init_model": "model_init",
    "compute_log_prob": "log_prob",
    "compute_ref_log_prob": "ref_log_prob",
    "update_actor": "update",
    "update_weights": "weight_sync",  # naive (colocated) or checkpoint-engine send_weights
}


def _role(worker: Any) -> str:
    return str(getattr(worker, "role", None) or type(worker).__name__)


def _count_forwards_of_engines(worker: Any, meter: resource_meter.ResourceMeter) -> None:
    """Forward-pass hooks on the actor's and the reference's root modules (verl's engine ``.module``)."""
    for part in ("actor", "ref"):
        module = getattr(getattr(getattr(worker, part, None), "engine", None), "module", None)
        if module is not None and hasattr(module, "register_forward_pre_hook"):
            meter.count_forwards(module)


def _metered_method(cls: type, name: str, phase: str):
    own = cls.__dict__.get(name)
    template = own if own is not None else getattr(cls, name)

    def call_through(worker, args, kwargs):
        method = own.__get__(worker, cls) if own is not None else getattr(super(cls, worker), name)
        return method(*args, **kwargs)

    def after(worker, meter):
        if name == "init_model":
            _count_forwards_of_engines(worker, meter)

    if inspect.iscoroutinefunction(template):

        @functools.wraps(template)
        async def metered_async(self, *args, **kwargs):
            meter = resource_meter.process_meter(_role(self))
            if meter is None:  # the variable was unset after the class was decorated
                return await call_through(self, args, kwargs)
            with meter.phase(phase):
                result = await call_through(self, args, kwargs)
                after(self, meter)
            return result

        return metered_async

    @functools.wraps(template)
    def metered(self, *args, **kwargs):
        meter = resource_meter.process_meter(_role(self))
        if meter is None:  # the variable was unset after the class was decorated
            return call_through(self, args, kwargs)
        with meter.phase(phase):
            result = call_through(self, args, kwargs)
            after(self, meter)
        return result

    return metered


def metered_phases(cls: type) -> type:
    """``cls`` with :data:`WORKER_PHASES` metered when ``DFPO_RESOURCE_LOG_DIR`` is set; else ``cls`` untouched."""
    if resource_meter.log_dir_from_environment() is None:
        return cls
    for name, phase in WORKER_PHASES.items():
        if hasattr(cls, name):
            setattr(cls, name, _metered_method(cls, name, phase))
    return cls
