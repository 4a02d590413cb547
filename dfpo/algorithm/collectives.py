"""Small collectives over verl's data-parallel group (gloo or NCCL), a no-op without one."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


def dp_world(group) -> tuple[int, int]:
    """(rank, world size) in ``group``; (0, 1) when torch.distributed is not initialised."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def all_gather_objects(obj: Any, group) -> list[Any]:
    """``obj`` of every rank of ``group``, in rank order (``[obj]`` without distribution)."""
    rank, world = dp_world(group)
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj, group=group)
    return out
