"""The local checkpoint engine (``checkpoint_engine.backend=local``): what actor rank 0 sends is
what every rollout worker receives, bit for bit, through verl's own topology/bucket protocol."""

from __future__ import annotations

import asyncio

import pytest
import torch

from tests.integration import cpu_verl_harness as h

# 3 processes: actor ranks 0 (the master) and 1 (walks the weights, sends nothing), 1 rollout worker
ACTOR_RANKS, ROLLOUT_RANKS = 2, 1
BUCKET_BYTES = 256  # small: the 40x40 fp32 weight (6400 bytes) crosses many buckets


def _weights() -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        ("embed.weight", torch.randn(40, 40, generator=generator)),
        ("norm.weight", torch.randn(3, generator=generator).to(torch.bfloat16)),  # 6 bytes: alignment
        ("layer.bias", torch.randn(7, generator=generator)),
        ("positions", torch.arange(5, dtype=torch.int64)),
        ("head.weight", torch.randn(4, 6, generator=generator).t()),  # not contiguous
    ]


def _engine_rounds(rank, world_size):
    import torch.distributed as dist

    from cpu_backend.checkpoint_engine import LocalCheckpointEngine

    is_actor = rank < ACTOR_RANKS
    engine = LocalCheckpointEngine(bucket_size=BUCKET_BYTES, is_master=rank == 0)
    metadata = [None] * world_size
    dist.all_gather_object(metadata, engine.prepare())  # what CheckpointEngineManager collects
    actor_kwargs, rollout_kwargs = LocalCheckpointEngine.build_topology(ACTOR_RANKS, ROLLOUT_RANKS, metadata)
    kwargs = actor_kwargs if is_actor else rollout_kwargs
    index = rank if is_actor else rank - ACTOR_RANKS
    engine.init_process_group(**{key: values[index] for key, values in kwargs.items()})

    async def run():
        if is_actor:
            walked = []

            def weights():
                for name, tensor in _weights():
                    walked.append(name)
                    yield name, tensor

            await engine.send_weights(weights(), global_steps=3)
            return walked
        return [(name, tensor.clone()) async for name, tensor in engine.receive_weights(global_steps=3)]

    result = asyncio.run(run())
    engine.finalize()
    return result


@pytest.mark.slow
def test_rollout_workers_receive_exactly_what_actor_rank_0_sends():
    results = h.run_ranks(_engine_rounds, ACTOR_RANKS + ROLLOUT_RANKS)
    names = [name for name, _ in _weights()]
    assert results[0] == names and results[1] == names  # every actor rank walked every weight
    received = results[ACTOR_RANKS]
    assert [name for name, _ in received] == names
    for (name, sent), (_, got) in zip(_weights(), received, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape, name
        assert torch.equal(got, sent), name


def test_topology_puts_actor_rank_0_and_the_rollout_workers_in_one_group():
    from cpu_backend.checkpoint_engine import LocalCheckpointEngine, StoreAddress

    master = StoreAddress("10.0.0.1", 1234)
    actor, rollout = LocalCheckpointEngine.build_topology(3, 2, [master, None, None, None, None])
    assert actor == {"rank": [0, -1, -1], "world_size": [3] * 3, "master": [master] * 3}
    assert rollout == {"rank": [1, 2], "world_size": [3] * 2, "master": [master] * 2}
    with pytest.raises(RuntimeError, match="master"):
        LocalCheckpointEngine.build_topology(1, 1, [None, None])
