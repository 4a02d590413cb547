"""What a process really moves and holds, phase by phase: collective bytes, forward passes, peak RSS.

The plans (:mod:`dfpo.launch.communication_plan`, :mod:`dfpo.launch.memory_plan`) predict, per rank
and step, the bytes each collective moves and the memory each phase holds; this meter measures the
same quantities in a running verl worker, so a run checks the plans. Off unless
``DFPO_RESOURCE_LOG_DIR`` is set (:data:`LOG_DIR_ENV`; ``dfpo.resource_log_dir`` sets it in every Ray
worker); when off nothing is patched and :func:`phase` is a no-op. ``python -m
dfpo.operations.resource_meter DIR`` prints each process's last whole step.

What is counted, while a phase is open (:meth:`ResourceMeter.phase`; phases nest, and calls,
bytes and forward passes go to the innermost open phase, RSS to every open one; a phase opened
inside itself is that phase):

* **Collectives.** The functions of ``torch.distributed`` (also reached as
  ``torch.distributed.distributed_c10d``) and of ``torch.distributed._functional_collectives``
  (DTensor's redistributions: ``full_tensor()``, a sharded norm) are wrapped where their callers
  look them up at call time: FSDP2 calls ``dist.all_gather_into_tensor`` and
  ``dist.reduce_scatter_tensor(output=..., input=...)``
  (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``), verl ``torch.distributed.*``,
  DTensor ``funcol.*``. A collective implemented by another one in Python (``_reduce_scatter_base``
  calls ``reduce_scatter_tensor``, ``all_gather_object`` calls ``all_gather`` twice) counts once,
  as the call made: a thread-local flag marks the outer call. Gloo implements
  ``reduce_scatter_tensor`` natively in torch 2.11 (no fallback through ``all_reduce``), and the
  CPU backend replaces only verl's Ulysses all-to-all, with ``all_to_all_single``.
* **Bytes** per call, per rank, are the size of the full (unsharded) tensor of the call
  (:data:`BYTES_RULE`): ``all_gather_into_tensor`` / ``all_gather`` the output, ``reduce_scatter_tensor``
  / ``reduce_scatter`` the input, ``all_reduce`` / ``broadcast`` the tensor, ``all_to_all_single``
  the input. An object collective (``all_gather_object``, ``broadcast_object_list``) counts the
  bytes of the tensor collectives it runs. Functional collectives count under the name of the
  ``torch.distributed`` collective they are (``all_gather_tensor`` as ``all_gather_into_tensor``).
* **Forward passes**: a forward pre-hook on a root module (:meth:`ResourceMeter.count_forwards`):
  one per micro-batch forward (a gradient-checkpointed layer's recompute is not a root forward).
* **RSS**: ``/proc/self/statm``'s resident pages at the phase's start, then every
  :data:`SAMPLE_INTERVAL_S` by a sampler thread that runs only while a phase is open, and at its end.
* **GPU memory** (a process that sees CUDA): ``torch.cuda.memory_allocated()`` at the phase's start
  and the exact peak of allocated memory over the phase (``max_memory_allocated``, whose peak the meter
  resets when a phase opens, after folding it into the phases already open). With the meter on, verl's
  ``perf/max_memory_allocated_gb`` is therefore the peak since the last phase opened.

The record, one JSON file per process rewritten after every phase (:meth:`ResourceMeter.write`),
is ``<DFPO_RESOURCE_LOG_DIR>/<role>-rank<rank>-pid<pid>.json``:
``{"rank", "world", "host", "pid", "phases": {phase: {"calls": {op: n}, "bytes": {op: b},
"forward_passes": n, "rss_start_bytes", "rss_peak_bytes"}}, "steps": [{"step": k, "phases":
{...}}]}``, plus ``device_start_bytes`` and ``device_peak_bytes`` per phase where CUDA is seen
(an addition to the contract). ``phases`` sums every occurrence (its ``rss_start_bytes`` is the
first one's, its peak the highest); a step holds the phases closed after the previous ``update`` closed, up to and
including its own ``update`` (so the weight sync after step k's update, which step k+1's rollout
uses, is in step k+1); ``model_init`` is in ``phases`` only.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_DIR_ENV = "DFPO_RESOURCE_LOG_DIR"
# [ours] 10 ms: a phase of the tiny CPU runs lasts seconds; a 200 MB tensor held 50 ms is seen
SAMPLE_INTERVAL_S = 0.01
# the phases the plan and the meter name alike; ref_log_prob is the reference model's log_prob pass
PHASES = ("model_init", "log_prob", "ref_log_prob", "prepass", "update", "weight_sync")
STEP_END_PHASE = "update"
STEPLESS_PHASES = ("model_init",)


def _tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def _list_bytes(tensors: Any) -> int:
    return sum(_tensor_bytes(tensor) for tensor in tensors)


def _argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs[name]


def _from_argument(index: int, name: str, size: Callable[[Any], int] = _tensor_bytes) -> Callable:
    def bytes_of(args: tuple, kwargs: dict, result: Any) -> int:
        return size(_argument(args, kwargs, index, name))

    return bytes_of


def _from_result(args: tuple, kwargs: dict, result: Any) -> int:
    return _tensor_bytes(result)


# torch.distributed's collectives: (name, bytes of one call from (args, kwargs, result)); None: the
# bytes of the tensor collectives the call runs (object collectives)
C10D_COLLECTIVES: dict[str, Callable | None] = {
    "all_gather_into_tensor": _from_argument(0, "output_tensor"),
    "_all_gather_base": _from_argument(0, "output_tensor"),
    "all_gather": _from_argument(0, "tensor_list", _list_bytes),
    "reduce_scatter_tensor": _from_argument(1, "input"),
    "_reduce_scatter_base": _from_argument(1, "input"),
    "reduce_scatter": _from_argument(1, "input_list", _list_bytes),
    "all_reduce": _from_argument(0, "tensor"),
    "all_reduce_coalesced": _from_argument(0, "tensors", _list_bytes),
    "broadcast": _from_argument(0, "tensor"),
    "reduce": _from_argument(0, "tensor"),
    "all_to_all_single": _from_argument(1, "input"),
    "all_to_all": _from_argument(1, "input_tensor_list", _list_bytes),
    "all_gather_object": None,
    "broadcast_object_list": None,
    "gather_object": None,
    "scatter_object_list": None,
    "barrier": None,
}
# torch.distributed._functional_collectives: name -> (the c10d name it is counted as, bytes)
FUNCTIONAL_COLLECTIVES: dict[str, tuple[str, Callable]] = {
    "all_gather_tensor": ("all_gather_into_tensor", _from_result),
    "all_gather_tensor_autograd": ("all_gather_into_tensor", _from_result),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", _from_argument(0, "self")),
    "reduce_scatter_tensor_autograd": ("reduce_scatter_tensor", _from_argument(0, "self")),
    "all_reduce": ("all_reduce", _from_argument(0, "self")),
    "all_to_all_single": ("all_to_all_single", _from_argument(0, "self")),
    "all_to_all_single_autograd": ("all_to_all_single", _from_argument(0, "self")),
    "broadcast": ("broadcast", _from_argument(0, "self")),
}
# the contract's bytes per op, for the documentation and the tests
BYTES_RULE = {
    "all_gather_into_tensor": "output",
    "all_gather": "output",
    "reduce_scatter_tensor": "input",
    "reduce_scatter": "input",
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "all_to_all_single": "input",
}


def resident_bytes() -> int:
    """This process's resident set size now (``/proc/self/statm``; ``psutil`` where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


@dataclass(eq=False)  # compared by identity: two open phases may hold equal numbers
class PhaseUse:
    """What one phase used: calls and bytes per collective, forward passes, RSS at start and peak."""

    calls: Counter = field(default_factory=Counter)
    bytes: Counter = field(default_factory=Counter)
    forward_passes: int = 0
    rss_start_bytes: int | None = None
    rss_peak_bytes: int = 0
    device_start_bytes: int | None = None
    device_peak_bytes: int | None = None

    def add(self, other: PhaseUse) -> None:
        self.calls.update(other.calls)
        self.bytes.update(other.bytes)
        self.forward_passes += other.forward_passes
        if self.rss_start_bytes is None:
            self.rss_start_bytes = other.rss_start_bytes
        self.rss_peak_bytes = max(self.rss_peak_bytes, other.rss_peak_bytes)
        if other.device_peak_bytes is not None:
            if self.device_start_bytes is None:
                self.device_start_bytes = other.device_start_bytes
            self.device_peak_bytes = max(self.device_peak_bytes or 0, other.device_peak_bytes)

    def as_record(self) -> dict[str, Any]:
        record = {
            "calls": dict(sorted(self.calls.items())),
            "bytes": {op: int(self.bytes[op]) for op in sorted(self.calls)},
            "forward_passes": self.forward_passes,
            "rss_start_bytes": self.rss_start_bytes,
            "rss_peak_bytes": self.rss_peak_bytes,
        }
        if self.device_peak_bytes is not None:
            record.update(device_start_bytes=self.device_start_bytes, device_peak_bytes=self.device_peak_bytes)
        return record


@dataclass
class _Call:
    """A collective in flight on this thread (the bytes of the collectives it runs, for object collectives)."""

    inner_bytes: int = 0


class ResourceMeter:
    """Counts this process's collectives and forward passes and samples its RSS, per phase.

    ``log_dir``: where :meth:`write` puts the record; ``role``: the record's name (verl's worker role);
    ``device``: the accelerator module whose allocated memory is metered (``torch.cuda``'s
    ``memory_allocated`` / ``max_memory_allocated`` / ``reset_peak_memory_stats``; by default
    ``torch.cuda`` where it is available, else none). :meth:`install` wraps the collectives
    (idempotent), :meth:`uninstall` puts the originals back.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        role: str,
        sample_interval_s: float = SAMPLE_INTERVAL_S,
        device: Any = "auto",
    ):
        self.log_dir = Path(log_dir)
        self.role = role
        self.sample_interval_s = sample_interval_s
        self.device = _cuda_if_available() if device == "auto" else device
        self.totals: dict[str, PhaseUse] = {}
        self.steps: list[dict[str, PhaseUse]] = [{}]
        self._open: list[PhaseUse] = []  # innermost last
        self._open_names: list[str] = []
        self._counted_modules: set[int] = set()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._originals: list[tuple[Any, str, Any]] = []
        self._sampler: threading.Thread | None = None
        self._sampler_stop = threading.Event()

    # --- collectives -------------------------------------------------------------------------------------------
    def install(self) -> None:
        """Wrap the collectives of ``torch.distributed`` and its functional collectives in this process."""
        if self._originals:
            return
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        import torch.distributed.distributed_c10d as c10d

        wrapped: dict[int, Any] = {}  # one wrapper per function (dist.all_reduce is c10d.all_reduce)
        for module in (dist, c10d):
            for name, bytes_of in C10D_COLLECTIVES.items():
                original = getattr(module, name, None)
                if original is None:
                    continue
                if id(original) not in wrapped:
                    wrapped[id(original)] = self._wrap(original, name, bytes_of)
                self._replace(module, name, wrapped[id(original)])
        for name, (op, bytes_of) in FUNCTIONAL_COLLECTIVES.items():
            original = getattr(funcol, name, None)
            if original is not None:
                self._replace(funcol, name, self._wrap(original, op, bytes_of))

    def uninstall(self) -> None:
        """Put every wrapped function back."""
        for module, name, original in reversed(self._originals):
            setattr(module, name, original)
        self._originals.clear()

    def _replace(self, module: Any, name: str, function: Any) -> None:
        self._originals.append((module, name, getattr(module, name)))
        setattr(module, name, function)

    def _wrap(self, original: Callable, op: str, bytes_of: Callable | None) -> Callable:
        meter = self

        @functools.wraps(original)
        def counted(*args, **kwargs):
            outer = getattr(meter._local, "call", None)
            if outer is not None:  # run by another collective: its bytes are the outer call's
                result = original(*args, **kwargs)
                if bytes_of is not None:
                    outer.inner_bytes += bytes_of(args, kwargs, result)
                return result
            call = meter._local.call = _Call()
            try:
                result = original(*args, **kwargs)
            finally:
                meter._local.call = None
            meter._count(op, call.inner_bytes if bytes_of is None else bytes_of(args, kwargs, result))
            return result

        counted.__dfpo_resource_meter__ = True
        return counted

    def _count(self, op: str, nbytes: int) -> None:
        with self._lock:
            if self._open:
                use = self._open[-1]
                use.calls[op] += 1
                use.bytes[op] += int(nbytes)

    # --- forward passes ----------------------------------------------------------------------------------------
    def count_forwards(self, module: Any) -> Any:
        """Count every forward of ``module`` (a root module) in the open phase; returns the hook's handle
        (``None`` when ``module`` is counted already: a forward is counted once)."""
        if id(module) in self._counted_modules:
            return None
        self._counted_modules.add(id(module))

        def forward_pre_hook(_module, _inputs):
            with self._lock:
                if self._open:
                    self._open[-1].forward_passes += 1

        return module.register_forward_pre_hook(forward_pre_hook)

    # --- phases and RSS ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[PhaseUse]:
        """Meter the block as phase ``name`` (one of :data:`PHASES`); the record is written at its end.
        Inside an open phase of the same name (a method metered twice, by a subclass and its base) the
        block is that phase: nothing new is opened."""
        if name not in PHASES:
            raise ValueError(f"resource meter: unknown phase {name!r}; the phases are {', '.join(PHASES)}")
        if name in self._open_names:
            yield self._open[self._open_names.index(name)]
            return
        rss = resident_bytes()
        use = PhaseUse(rss_start_bytes=rss, rss_peak_bytes=rss)
        if self.device is not None:
            self._fold_device_peak()
            self.device.reset_peak_memory_stats()
            use.device_start_bytes = use.device_peak_bytes = int(self.device.memory_allocated())
        with self._lock:
            self._open.append(use)
            self._open_names.append(name)
        self._start_sampler()
        try:
            yield use
        finally:
            self._sample()
            if self.device is not None:
                self._fold_device_peak()
            with self._lock:
                del self._open_names[self._open.index(use)]
                self._open.remove(use)
                idle = not self._open
                self.totals.setdefault(name, PhaseUse()).add(use)
                if name not in STEPLESS_PHASES:
                    self.steps[-1].setdefault(name, PhaseUse()).add(use)
                    if name == STEP_END_PHASE:
                        self.steps.append({})
            if idle:
                self._stop_sampler()
            self.write()

    def _fold_device_peak(self) -> None:
        """The device's peak since the last reset into every open phase (before a reset, at a phase's end)."""
        peak = int(self.device.max_memory_allocated())
        with self._lock:
            for use in self._open:
                use.device_peak_bytes = max(use.device_peak_bytes or 0, peak)

    def _sample(self) -> None:
        rss = resident_bytes()
        with self._lock:
            for use in self._open:
                use.rss_peak_bytes = max(use.rss_peak_bytes, rss)

    def _start_sampler(self) -> None:
        if self._sampler is not None:
            return
        self._sampler_stop.clear()

        def sample_until_stopped() -> None:
            while not self._sampler_stop.wait(self.sample_interval_s):
                self._sample()

        self._sampler = threading.Thread(target=sample_until_stopped, name="dfpo-resource-meter", daemon=True)
        self._sampler.start()

    def _stop_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            self._sampler_stop.set()
            sampler.join()

    # --- the record --------------------------------------------------------------------------------------------
    def rank_and_world(self) -> tuple[int, int]:
        """torch.distributed's rank and world size, else ``RANK`` / ``WORLD_SIZE`` (verl's workers set them)."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    def record(self) -> dict[str, Any]:
        """The record (the contract's schema: module docstring)."""
        rank, world = self.rank_and_world()
        with self._lock:
            steps = [
                {"step": index + 1, "phases": {name: use.as_record() for name, use in phases.items()}}
                for index, phases in enumerate(self.steps)
                if phases
            ]
            return {
                "rank": rank,
                "world": world,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "phases": {name: use.as_record() for name, use in self.totals.items()},
                "steps": steps,
            }

    def path(self) -> Path:
        rank, _ = self.rank_and_world()
        return self.log_dir / f"{self.role}-rank{rank}-pid{os.getpid()}.json"

    def write(self) -> Path:
        """Write the record (atomically: a reader never sees half a file); returns its path."""
        record = self.record()
        path = self.log_dir / f"{self.role}-rank{record['rank']}-pid{record['pid']}.json"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{time.monotonic_ns()}.tmp")
        partial.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(partial, path)
        return path


_PROCESS_METER: ResourceMeter | None = None


def _cuda_if_available() -> Any:
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def log_dir_from_environment(environ: dict[str, str] | None = None) -> str | None:
    """``DFPO_RESOURCE_LOG_DIR``, or ``None`` when it is unset or empty (the meter is off)."""
    environ = os.environ if environ is None else environ
    return environ.get(LOG_DIR_ENV, "").strip() or None


def process_meter(role: str, environ: dict[str, str] | None = None) -> ResourceMeter | None:
    """This process's meter, installed on first use; ``None`` (and nothing patched) when the meter is off."""
    global _PROCESS_METER
    if _PROCESS_METER is None:
        log_dir = log_dir_from_environment(environ)
        if log_dir is None:
            return None
        _PROCESS_METER = ResourceMeter(log_dir, role)
        _PROCESS_METER.install()
    return _PROCESS_METER


def phase(name: str) -> contextlib.AbstractContextManager:
    """Phase ``name`` of this process's meter, if one was started (:func:`process_meter`); else nothing."""
    meter = _PROCESS_METER
    return contextlib.nullcontext() if meter is None else meter.phase(name)


def last_complete_step(record: dict[str, Any]) -> dict[str, Any] | None:
    """The record's last step that reached its ``update`` (a whole training step), or ``None``."""
    complete = [step for step in record.get("steps", []) if STEP_END_PHASE in step["phases"]]
    return complete[-1] if complete else None


def summary(log_dir: str | os.PathLike) -> str:
    """Per record file in ``log_dir``: ``model_init`` and each phase of the last whole step, with its
    collectives' calls and bytes, forward passes and peak memory (what to set beside the plan's)."""
    paths = sorted(Path(log_dir).glob("*-rank*-pid*.json"))
    if not paths:
        raise FileNotFoundError(
            f"{log_dir}: no resource-meter records (<role>-rank<r>-pid<p>.json); a run writes them there when "
            f"{LOG_DIR_ENV} (dfpo.resource_log_dir) names this directory"
        )
    lines = []
    for path in paths:
        record = json.loads(path.read_text())
        step = last_complete_step(record)
        phases = {name: use for name, use in record["phases"].items() if name in STEPLESS_PHASES}
        phases.update(step["phases"] if step else {})
        where = f"step {step['step']}" if step else "no whole step yet"
        lines.append(f"{path.name} (rank {record['rank']} of {record['world']}, {record['host']}; {where}):")
        for name in PHASES:
            if name not in phases:
                continue
            use = phases[name]
            moved = ", ".join(f"{op} {n}x {use['bytes'][op] / 1e6:.3f} MB" for op, n in use["calls"].items())
            device = f", GPU peak {use['device_peak_bytes'] / 1e9:.2f} GB" if "device_peak_bytes" in use else ""
            lines.append(
                f"  {name:<12} forward passes {use['forward_passes']}, RSS peak {use['rss_peak_bytes'] / 1e9:.2f} GB"
                f"{device}; {moved or 'no collectives'}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m dfpo.operations.resource_meter",
        description="Print what each process of a metered run moved and held (its last whole step).",
    )
    parser.add_argument("log_dir", help=f"the run's {LOG_DIR_ENV} (dfpo.resource_log_dir)")
    args = parser.parse_args(argv)
    try:
        print(summary(args.log_dir))
    except FileNotFoundError as error:
        parser.exit(2, f"{error}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
