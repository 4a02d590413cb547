"""verl's platform for CPU-only processes (``VERL_PLATFORM=cpu``).

verl 0.9.1 resolves its platform once per process from ``verl.plugin.platform.PlatformRegistry``
(``VERL_PLATFORM`` first, then probing; "nvidia" when nothing answers) and asks it for the device
name, the collective backend, the Ray resource and a ``torch.cuda``-like device module. It ships
platforms for NVIDIA, AMD and Ascend only; :class:`PlatformCPU` is the CPU one, registered as
``cpu`` whenever dfpo's verl plugin loads (registration alone changes nothing: a process uses it
only when ``VERL_PLATFORM=cpu``).
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from cpu_backend.selection import CPU_PLATFORM_NAME


class CPUDeviceModule:
    """Stands in for ``torch.cuda`` where verl asks ``get_torch_device()`` (= the platform's
    ``device_module``) for device services.

    Anything ``torch.cpu`` already provides (``current_device`` -> ``"cpu"``, ``synchronize``,
    ``is_available``, ``device_count``, ``set_device``, streams) is forwarded to it; the members
    below are the ones verl calls on the actor path that ``torch.cpu`` lacks.
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(torch.cpu, name)
        except AttributeError:
            raise AttributeError(
                f"verl called get_torch_device().{name}, which neither torch.cpu nor dfpo's CPU "
                f"platform ({__file__}: CPUDeviceModule) provides; add it there with a note on the call site"
            ) from None

    # ``empty_cache`` - engine_workers.init_model -> memory_utils.aggressive_empty_cache and the
    # FSDP engine's offload paths: nothing is cached on CPU.
    @staticmethod
    def empty_cache() -> None:
        return None

    # ``max_memory_allocated`` / ``max_memory_reserved`` - TrainingWorker._postprocess_output
    # logs them into every update_actor / compute_log_prob metric dict; ``memory_allocated`` /
    # ``memory_reserved`` - profiler.log_gpu_memory_usage. There is no device pool on CPU: 0.
    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    # ``mem_get_info`` - memory_utils / profiler report free and total device memory: on CPU
    # that is host memory.
    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    # ``get_device_name`` - flops_counter.get_device_flops (the MFU metric of every update)
    # names the device unless the module *is* torch.cpu, in which case it uses "CPU": same here.
    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"

    # ``get_rng_state`` / ``set_rng_state`` / ``manual_seed`` - verl saves and restores the device
    # RNG around checkpointed regions; on CPU the device RNG is torch's default generator.
    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)


class PlatformCPU(PlatformBase):
    """verl platform for CPU-only processes: device ``cpu``, collectives over ``gloo``."""

    _device_module = CPUDeviceModule()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self._device_module  # type: ignore[return-value]

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: verl probes every registered platform when VERL_PLATFORM is unset,
        # and a CPU-only Ray actor of a GPU run (the TaskRunner, reward workers) must keep verl's
        # fallback ("nvidia"), not become a CPU process. Only VERL_PLATFORM=cpu selects this one.
        return False

    def current_device(self):
        # verl moves every micro-batch with ``micro_batch.to(get_device_id())``; an integer
        # would mean ``cuda:<i>``, the string keeps tensors on the CPU.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        # verl toggles CUDA's expandable segments around weight syncs; no allocator to tune.
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Worker.env_keys() lists this variable; nothing reads it on CPU.
        return "VERL_CPU_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # verl's ResourcePoolManager places one rank per bundle of this resource and its resource
        # check counts Ray's "GPU" resource whatever the platform says, so each CPU rank is a
        # *logical* GPU: start Ray with ``ray_kwargs.ray_init.num_gpus=<ranks>``. The CPU build of
        # torch ignores the CUDA_VISIBLE_DEVICES that Ray then sets.
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


def register_cpu_platform() -> None:
    """Add :class:`PlatformCPU` to verl's registry as ``cpu`` (idempotent; inert until selected)."""
    if PlatformRegistry.get(CPU_PLATFORM_NAME) is None:
        PlatformRegistry.register(platform=CPU_PLATFORM_NAME)(PlatformCPU)


register_cpu_platform()
