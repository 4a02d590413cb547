"""verl's Ulysses all-to-all on gloo (cpu_backend/gloo_all_to_all.py), on 2 and 3 gloo ranks: the
result is the exchange verl's list-form all_to_all defines (computed here from an all_gather of
every rank's input), synchronous and async, and verl's SeqAllToAll differentiates through it (its
backward is the inverse exchange: the gradient of Σ w·out is w sent back)."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _expected(inputs: list[torch.Tensor], rank: int, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    world = len(inputs)
    return torch.cat([torch.tensor_split(x, world, scatter_dim)[rank] for x in inputs], dim=gather_dim)


def _ranks(rank: int, world: int, init_file: str, failures) -> None:
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        from verl.utils import ulysses

        from cpu_backend.gloo_all_to_all import all_to_all_tensor, install

        with pytest.raises(RuntimeError, match="does not support alltoall"):  # why the replacement exists
            ulysses.all_to_all_tensor(torch.zeros(world, 2), 0, 1, group=dist.group.WORLD)
        install()
        assert ulysses.all_to_all_tensor is all_to_all_tensor
        generator = torch.Generator().manual_seed(rank)
        # (batch, seq/world, heads, dim) as in verl's gather_seq_scatter_heads: scatter heads, gather seq
        local = torch.randn(1, 2 * world, 2 * world, 4, generator=generator)  # both dims divisible, as verl pads them
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        for scatter_dim, gather_dim in ((2, 1), (1, 2)):
            want = _expected(gathered, rank, scatter_dim, gather_dim)
            torch.testing.assert_close(
                all_to_all_tensor(local, scatter_dim, gather_dim, dist.group.WORLD), want, rtol=0, atol=0
            )
            wait = all_to_all_tensor(local, scatter_dim, gather_dim, dist.group.WORLD, async_op=True)
            torch.testing.assert_close(wait(), want, rtol=0, atol=0)
        # through verl's autograd function: d(Σ w·out)/d local = the inverse exchange of w
        leaf = local.clone().requires_grad_(True)
        out = ulysses.SeqAllToAll.apply(dist.group.WORLD, leaf, 2, 1)
        weights = torch.randn(out.shape, generator=generator)
        (out * weights).sum().backward()
        all_weights = [torch.empty_like(weights) for _ in range(world)]
        dist.all_gather(all_weights, weights)
        torch.testing.assert_close(leaf.grad, _expected(all_weights, rank, 1, 2), rtol=0, atol=0)
        dist.barrier()  # no rank tears its group down while another still runs a collective
        dist.destroy_process_group()
    except BaseException as error:  # noqa: BLE001  (reported to the parent)
        failures.put(f"rank {rank}: {error!r}")
        raise


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_all_to_all_on_gloo_is_verls_exchange(world):
    context = mp.get_context("spawn")
    failures = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as directory:
        init_file = os.path.join(directory, "init")
        processes = [context.Process(target=_ranks, args=(rank, world, init_file, failures)) for rank in range(world)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert not errors and all(p.exitcode == 0 for p in processes), (errors, [p.exitcode for p in processes])
