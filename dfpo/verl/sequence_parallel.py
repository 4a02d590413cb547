"""DFPO under verl's Ulysses sequence parallelism (``SP_SIZE>1``): the pre-pass's log-probs on every rank.

verl's ``infer_batch`` returns the log-probs on the first rank of each sequence-parallel group only
(``is_mp_src_rank_with_outputs``); DFPO's group statistics need them on every rank.
:func:`log_probs_on_every_rank` broadcasts them over the engine's ``ulysses_parallel_group``, and
:func:`require_sequence_parallel_group` checks at start-up that the engine has one.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.utils.device import get_device_name


def require_sequence_parallel_group(engine: Any, sequence_parallel_size: int) -> None:
    """At start-up, with Ulysses sequence parallelism (``SP_SIZE>1``): verl's engine must expose its
    sequence-parallel process group as ``ulysses_parallel_group`` (verl 0.9.1's FSDP engine sets it
    in ``_init_device_mesh``), through which DFPO's pre-pass shares the log-probs that
    ``infer_batch`` returns on each group's first rank only. Without it, the other ranks would
    fail at the first step; this says so before any rollout."""
    if int(sequence_parallel_size or 1) > 1 and getattr(engine, "ulysses_parallel_group", None) is None:
        raise RuntimeError(
            f"dfpo: ulysses_sequence_parallel_size={sequence_parallel_size}, but verl's engine "
            f"({type(engine).__name__}) has no ulysses_parallel_group, which DFPO's pre-pass broadcasts the "
            "log-probs over (verl 0.9.1's FSDP engine sets it). Use verl==0.9.1's FSDP engine, or SP_SIZE=1."
        )


def log_probs_on_every_rank(engine: Any, log_probs: torch.Tensor | None, shape: tuple[int, int]) -> torch.Tensor:
    """The (CPU) log-probs ``infer_batch`` returned, on every rank. With Ulysses sequence parallelism
    the first rank of each sequence-parallel group broadcasts them to its group (``log_probs`` is
    None on the others; ``shape`` sizes their buffer)."""
    group = getattr(engine, "ulysses_parallel_group", None)
    if group is None:
        if log_probs is None:
            raise RuntimeError(
                "dfpo pre-pass: this rank got no log-probs back from infer_batch "
                "(a model-parallel rank of an engine dfpo does not know)"
            )
        return log_probs.cpu()
    device = get_device_name()
    buffer = log_probs.to(device) if log_probs is not None else torch.empty(shape, dtype=torch.float32, device=device)
    torch.distributed.broadcast(buffer, src=torch.distributed.get_global_rank(group, 0), group=group)
    return buffer.cpu()
