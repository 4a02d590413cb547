"""The rank-split common-prefix protocol equals the plain-loop reference (gloo, 3 ranks; one process)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from tests.dfpo.batches import random_batch
from tests.dfpo.reference import reference_prefix_lengths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, seed, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        b = random_batch(seed)
        shards = torch.arange(b.responses.shape[0]).tensor_split(world)
        idx = shards[rank]
        out = shared_prefix_lengths(b.group_index[idx], b.responses[idx], b.response_mask[idx], None)
        dist.barrier()  # no rank tears its group down while another still runs a collective
        queue.put((rank, idx.tolist(), out.tolist()))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # nine spawned gloo rank processes (about 20 s on 2 cores)
def test_matches_single_process_over_three_gloo_ranks():
    ctx = mp.get_context("spawn")
    for seed in (0, 3, 8):
        queue = ctx.Queue()
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(r, 3, port, seed, queue)) for r in range(3)]
        for p in procs:
            p.start()
        results = [queue.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        b = random_batch(seed)
        expected = _expected(b)
        got = torch.zeros_like(expected)
        for _, idx, out in results:
            got[idx] = torch.tensor(out)
        assert got.tolist() == expected.tolist()


def _expected(b) -> torch.Tensor:
    """The reference P_g of each row's group (0 for padding rows)."""
    ref = reference_prefix_lengths(b.responses, b.response_mask, b.group_index)
    return torch.tensor(
        [ref[int(g)] if bool(m.any()) else 0 for g, m in zip(b.group_index, b.response_mask, strict=True)]
    )


def test_this_batch_only():
    """``across_ranks=False`` (compute_dfpo_loss's batch of whole groups) runs no collective."""
    for seed in range(8):
        b = random_batch(seed)
        got = shared_prefix_lengths(b.group_index, b.responses, b.response_mask, across_ranks=False)
        assert got.tolist() == _expected(b).tolist()
