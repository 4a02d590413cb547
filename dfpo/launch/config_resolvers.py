"""The values dfpo's config files compute instead of re-typing: OmegaConf resolvers.

A model file says what it means, and the number follows from the keys it depends on, whatever the
command line changed::

    ppo_max_token_len_per_gpu: ${dfpo_tokens_per_gpu:2}   # 2 full-length sequences per micro-batch

``python -m dfpo.main`` resolves the whole composed config in the driver, before its checks and
before Ray (verl's TaskRunner would resolve it again on the head node, where these resolvers are
not registered); :func:`dfpo.launch.compose.compose_trainer_config` registers them too. Registering is
idempotent: :func:`register` may run in every process that composes a config.

Arithmetic of the config (every recipe):

    dfpo_sequence_tokens:k      k x (data.max_prompt_length + data.max_response_length)
    dfpo_tokens_per_gpu:k       ceil(k x that / actor's Ulysses degree): a dynamic-batching budget
                                holding k whole sequences per micro-batch, whose tokens the Ulysses
                                group of SP ranks shares
    dfpo_floor_div:a,b          a // b
    dfpo_str:x                  x as a string (Ray's environment variables must be strings)
    dfpo_module_file:m          the file of module m (reward.score: verl loads the reward by path)
    dfpo_launch_time:           this launch's UTC time stamp (one per process: each launch of a
                                resumed run gets its own file log, verl's FileLogger truncates)

What only the machine that launches knows (the CPU platform, ``platform/cpu.yaml``):

    dfpo_cpu_dtype:actor,auto   ``auto``: bf16 where this CPU computes it natively, else fp32
                                (:mod:`cpu_backend.precision`; :func:`announce_cpu_dtypes` says
                                the choice once per launch on stderr);
                                ``rollout`` gives vLLM's spelling (float32/bfloat16)
    dfpo_cpu_logical_gpus:      the Ray GPUs a CPU run needs: the trainer's ranks on this node,
                                plus separate_async's rollout ranks
    dfpo_cpu_threads_per_rank:auto   the cores this process may use / the ranks (at least 1)
    dfpo_cpu_attention:         the packed-sequence attention kernel (use_remove_padding) or eager
    dfpo_vllm_omp_threads_bind:auto  vLLM's thread binding: ``auto`` (vLLM's own) for one
                                tensor-parallel worker, the cores shared out among several
                                (:func:`cpu_backend.vllm_cpu.omp_threads_bind`)
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from functools import cache, lru_cache

from omegaconf import OmegaConf


def _sequence_length(root) -> int:
    return int(root.data.max_prompt_length) + int(root.data.max_response_length)


def sequence_tokens(k, *, _root_) -> int:
    """``k`` full-length sequences, in tokens."""
    return int(k) * _sequence_length(_root_)


def tokens_per_gpu(k, *, _root_) -> int:
    """A per-GPU token budget holding ``k`` whole sequences per micro-batch of the Ulysses group."""
    sp = int(_root_.actor_rollout_ref.actor.ulysses_sequence_parallel_size)
    return math.ceil(int(k) * _sequence_length(_root_) / sp)


def floor_div(a, b) -> int:
    return int(a) // int(b)


def as_string(value) -> str:
    """``value`` as a string (Ray takes only strings as environment variables)."""
    return str(value)


def module_file(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"dfpo_module_file: module {module!r} is not installed (pip install -e <the repository>)")
    return spec.origin


@lru_cache(maxsize=1)
def launch_time() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


# ---- the CPU platform --------------------------------------------------------------------------
_CPU_KNOBS = {"actor": "ACTOR_DTYPE", "rollout": "ROLLOUT_DTYPE"}


@cache
def _cpu_choice(role: str, requested: str):
    from cpu_backend import precision as cpu_precision

    return cpu_precision.choose(_CPU_KNOBS[role], str(requested))


def announce_cpu_dtypes(config) -> None:
    """Say, once per launch, how a CPU config's requested dtypes were resolved (not from inside the
    resolver: OmegaConf also evaluates an interpolation that a later file overwrites)."""
    from cpu_backend import precision as cpu_precision

    requests = OmegaConf.select(config, "dfpo.cpu")
    if str(OmegaConf.select(config, "trainer.device")) != "cpu" or requests is None:
        return
    for role, requested in (("actor", requests.get("actor_dtype")), ("rollout", requests.get("rollout_dtype"))):
        if requested is not None and str(requested) not in ("fp32", "float32"):
            cpu_precision.announce(_cpu_choice(role, str(requested)))


def cpu_dtype(role: str, requested) -> str:
    """The dtype of the actor (verl's spelling, fp32/bf16) or the rollout (float32/bfloat16)."""
    if role not in _CPU_KNOBS:
        raise ValueError(f"dfpo_cpu_dtype: role must be actor or rollout, got {role!r}")
    from cpu_backend import precision as cpu_precision

    dtype = _cpu_choice(role, str(requested)).dtype
    return cpu_precision.VERL_NAMES[dtype] if role == "actor" else dtype


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def cpu_logical_gpus(*, _root_) -> int:
    """Every trainer rank, and separate_async's rollout ranks, is a logical Ray GPU of this node."""
    ranks = int(_root_.trainer.n_gpus_per_node)
    if str(_root_.trainer.v1.trainer_mode) == "dfpo_separate_async":
        ranks += int(_root_.actor_rollout_ref.rollout.n_gpus_per_node)
    return ranks


def cpu_threads_per_rank(requested, *, _root_) -> str:
    """torch threads of every Ray process: the cores this launcher may use shared among the ranks
    (Ray gives an actor that asks for no CPUs one thread). Not ``nproc``: it answers OMP_NUM_THREADS."""
    if str(requested) != "auto":
        value = str(requested)
        if not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"dfpo.cpu.threads_per_rank (CPU_THREADS_PER_RANK) must be auto or a positive integer, got {value!r}"
            )
        return value
    return str(max(_cores() // cpu_logical_gpus(_root_=_root_), 1))


def cpu_attention(*, _root_) -> str:
    """Packed micro-batches (use_remove_padding): the flash-attention path with dfpo's torch kernel
    (cpu_backend/varlen_attention.py); padded batches: eager."""
    return "dfpo_cpu_varlen" if bool(_root_.actor_rollout_ref.model.use_remove_padding) else "eager"


def vllm_omp_threads_bind(requested, *, _root_) -> str:
    if str(requested) != "auto":
        return str(requested)
    workers = int(_root_.actor_rollout_ref.rollout.tensor_model_parallel_size)
    if workers <= 1:
        return "auto"
    from cpu_backend.vllm_cpu import omp_threads_bind

    return omp_threads_bind(workers, sorted(os.sched_getaffinity(0)))


RESOLVERS = {
    "dfpo_sequence_tokens": sequence_tokens,
    "dfpo_tokens_per_gpu": tokens_per_gpu,
    "dfpo_floor_div": floor_div,
    "dfpo_str": as_string,
    "dfpo_module_file": module_file,
    "dfpo_launch_time": launch_time,
    "dfpo_cpu_dtype": cpu_dtype,
    "dfpo_cpu_logical_gpus": cpu_logical_gpus,
    "dfpo_cpu_threads_per_rank": cpu_threads_per_rank,
    "dfpo_cpu_attention": cpu_attention,
    "dfpo_vllm_omp_threads_bind": vllm_omp_threads_bind,
}


def register() -> None:
    """Register every resolver above with OmegaConf (once per process)."""
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
