"""verl's Ulysses all-to-all on gloo.

Ulysses sequence parallelism (``SP_SIZE>1``) exchanges each attention layer's q/k/v between the
ranks of a sequence-parallel group: every rank sends chunk j of its tensor (split along the
``scatter_dim``) to rank j and concatenates what it receives along the ``gather_dim``.
verl's ``verl.utils.ulysses.all_to_all_tensor`` does it with the list form ``dist.all_to_all``,
which gloo does not implement ("Backend gloo does not support alltoall"); gloo has
``dist.all_to_all_single``, the same exchange on one tensor whose first dimension is the
destination rank. :func:`all_to_all_tensor` is verl's function on that collective: the same chunks
(``torch.tensor_split``), the same order, the same result and ``async_op`` contract, and
:func:`install` puts it in verl's module, where ``SeqAllToAll``'s forward and backward look it up
at call time. Installed only by the local CPU backend (:mod:`cpu_backend.activate`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_to_all_tensor(
    local_input: torch.Tensor,
    scatter_dim: int,
    gather_dim: int,
    group: dist.ProcessGroup | None = None,
    async_op: bool = False,
):
    """Rank r returns cat_j(chunk r of rank j's ``local_input`` split along ``scatter_dim``) along
    ``gather_dim``; with ``async_op`` a function that waits and returns it (verl's contract)."""
    from verl.utils.ulysses import get_ulysses_sequence_parallel_group

    group = get_ulysses_sequence_parallel_group() if group is None else group
    world = dist.get_world_size(group)
    chunks = torch.stack([t.contiguous() for t in torch.tensor_split(local_input, world, scatter_dim)])
    received = torch.empty_like(chunks)
    work = dist.all_to_all_single(received, chunks, group=group, async_op=async_op)

    def result() -> torch.Tensor:
        return torch.cat(received.unbind(0), dim=gather_dim).contiguous()

    if async_op:

        def wait() -> torch.Tensor:
            work.wait()
            return result()

        return wait
    return result()


def install() -> None:
    """Replace ``verl.utils.ulysses.all_to_all_tensor`` (idempotent)."""
    from verl.utils import ulysses

    ulysses.all_to_all_tensor = all_to_all_tensor
