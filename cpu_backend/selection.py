"""Whether this process runs verl on CPU: ``VERL_PLATFORM=cpu`` in its environment.

Standard library only: read by dfpo's verl plugin in every process that imports verl, and by its
vLLM plugin (:mod:`cpu_backend.vllm_cpu`) in vLLM's engine processes, which need not import verl.
"""

from __future__ import annotations

import os

CPU_PLATFORM_NAME = "cpu"  # verl's platform name of the CPU backend, and the VERL_PLATFORM value selecting it


def local_backend_selected() -> bool:
    """Whether this process was started to run verl on CPU (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM_NAME


# actor_rollout_ref.rollout.name selecting the backend's own rollout (cpu_backend.local_rollout)
LOCAL_ROLLOUT_NAME = "local"
