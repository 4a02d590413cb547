"""The rank-split common-prefix protocol equals the single-process computation (gloo, 3 ranks)."""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dfpo.group_statistics import shared_prefix_lengths
from dfpo.shared_prefix import shared_prefix_lengths_across_ranks
from tests.dfpo.batches import random_batch


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
        out = shared_prefix_lengths_across_ranks(b.group_index[idx], b.responses[idx], b.response_mask[idx], None)
        queue.put((rank, idx.tolist(), out.tolist()))
    finally:
        dist.destroy_process_group()


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
        expected = shared_prefix_lengths(b.responses, b.response_mask, b.group_index)
        got = torch.zeros_like(expected)
        for _, idx, out in results:
            got[idx] = torch.tensor(out)
        assert got.tolist() == expected.tolist()


def test_single_process_fallback():
    b = random_batch(5)
    got = shared_prefix_lengths_across_ranks(b.group_index, b.responses, b.response_mask)
    assert got.tolist() == shared_prefix_lengths(b.responses, b.response_mask, b.group_index).tolist()
