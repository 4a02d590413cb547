"""A CPU checkpoint engine: ``actor_rollout_ref.rollout.checkpoint_engine.backend=local``.

verl 0.9.1 moves weights from the trainer to *standalone* rollout replicas (the separate-async
trainer's own rollout resources) through a checkpoint engine other than ``naive``; the ones it
ships (nccl, nixl, hccl, mooncake, kimi, delta) all need a GPU stack (cupy, vLLM, RDMA). This one
does what verl's NCCL engine does, over gloo on CPU:

* ``prepare`` — actor rank 0 (the master) opens a ``TCPStore`` on a free port and returns its
  address; the other workers return nothing;
* ``build_topology`` — one group of actor rank 0 (rank 0) and every rollout worker (ranks 1..);
  the other actor ranks sit it out (rank -1) but still walk the weight generator, because
  gathering each FSDP2 tensor is a collective over the actor group;
* ``send_weights`` / ``receive_weights`` — buckets of ``update_weights_bucket_megabytes``, cut and
  reassembled by verl's own ``split_weight_chunks`` / ``merge_weight_chunks``; per bucket a
  gloo broadcast of its pickled metadata and then of its bytes;
* ``finalize`` — the group and the store are dropped (a fresh group per weight sync).

The receiving side is verl's ``CheckpointEngineWorker`` next to each standalone replica, which
hands the received ``(name, tensor)`` pairs to :class:`cpu_backend.local_rollout.LocalServerAdapter`.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    TensorMeta,
    merge_weight_chunks,
    split_weight_chunks,
)

LOCAL_CHECKPOINT_ENGINE = "local"
GROUP_TIMEOUT = datetime.timedelta(minutes=10)
# Tensors start at multiples of this in a bucket: the receiver views each one's bytes as its dtype.
ALIGNMENT = 16


@dataclass(frozen=True)
class StoreAddress:
    """Where the master's ``TCPStore`` listens (returned by the master's ``prepare``)."""

    host: str
    port: int


def _store_host() -> str:
    import ray

    return ray.util.get_node_ip_address().strip("[]") if ray.is_initialized() else "127.0.0.1"


@CheckpointEngineRegistry.register(LOCAL_CHECKPOINT_ENGINE)
class LocalCheckpointEngine(CheckpointEngine):
    """Broadcast the actor's full parameters from actor rank 0 to the rollout workers over gloo."""

    def __init__(self, bucket_size: int, is_master: bool = False, **kwargs) -> None:
        if kwargs:
            raise TypeError(f"the local checkpoint engine takes no engine_kwargs, got {sorted(kwargs)}")
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.rank: int | None = None
        self._store: dist.TCPStore | None = None
        self._group = None

    # ---- topology ------------------------------------------------------------------------------
    def prepare(self) -> StoreAddress | None:
        if not self.is_master:
            return None
        host = _store_host()
        self._store = dist.TCPStore(host, 0, is_master=True, timeout=GROUP_TIMEOUT, wait_for_workers=False)
        return StoreAddress(host=host, port=self._store.port)

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list):
        master = metadata[0]
        if not isinstance(master, StoreAddress):
            raise RuntimeError("the local checkpoint engine needs actor rank 0 as its master (is_master=True there)")
        world_size = 1 + rollout_world_size
        actor_kwargs = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout_kwargs = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor_kwargs, rollout_kwargs

    def init_process_group(self, rank: int, world_size: int, master: StoreAddress) -> None:
        self.rank = rank
        if rank < 0:
            return
        if self._store is None:
            self._store = dist.TCPStore(master.host, master.port, is_master=False, timeout=GROUP_TIMEOUT)
        self._group = dist.ProcessGroupGloo(self._store, rank, world_size, GROUP_TIMEOUT)

    def finalize(self) -> None:
        self._group = None
        self._store = None
        self.rank = None

    # ---- transfer ------------------------------------------------------------------------------
    async def _broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        work = self._group.broadcast(tensor, 0)
        await asyncio.to_thread(work.wait)
        return tensor

    async def _broadcast_bucket(self, metadata: dict | None, payload: torch.Tensor | None) -> tuple[dict, torch.Tensor]:
        """Rank 0 sends (metadata, payload); every other rank receives them."""
        if self.rank == 0:
            header = torch.frombuffer(bytearray(pickle.dumps(metadata)), dtype=torch.uint8)
            size = torch.tensor([header.numel(), payload.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(2, dtype=torch.int64)
        await self._broadcast(size)
        if self.rank != 0:
            header = torch.empty(int(size[0]), dtype=torch.uint8)
            payload = torch.empty(int(size[1]), dtype=torch.uint8)
        await self._broadcast(header)
        await self._broadcast(payload)
        return pickle.loads(header.numpy().tobytes()), payload

    @torch.no_grad()
    async def send_weights(
        self, weights: Generator[tuple[str, torch.Tensor], None, None], global_steps: int | None = None
    ):
        if self.rank is None:
            raise RuntimeError("send_weights before init_process_group")
        if self.rank < 0:
            for _name, _tensor in weights:  # gathering each tensor is a collective of the actor group
                pass
            return None
        bucket_meta: dict[str, TensorMeta] = {}
        parts: list[torch.Tensor] = []
        offset = 0
        async for tensor_meta, chunk in split_weight_chunks(_contiguous_cpu(weights), self.bucket_size):
            if offset and offset + tensor_meta.chunk_size > self.bucket_size:
                await self._broadcast_bucket({"bucket_meta": bucket_meta, "is_last": False}, torch.cat(parts))
                bucket_meta, parts, offset = {}, [], 0
            tensor_meta.offset = offset
            bucket_meta[tensor_meta.name] = tensor_meta
            padding = -tensor_meta.chunk_size % ALIGNMENT
            parts += [chunk.clone(), torch.zeros(padding, dtype=torch.uint8)]
            offset += tensor_meta.chunk_size + padding
        last = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
        await self._broadcast_bucket({"bucket_meta": bucket_meta, "is_last": True}, last)
        return None

    @torch.no_grad()
    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        if self.rank is None or self.rank < 1:
            raise RuntimeError("receive_weights runs on the rollout workers (ranks 1..) after init_process_group")
        async for name, weight in merge_weight_chunks(self._receive_chunks(), self.bucket_size):
            yield name, weight

    async def _receive_chunks(self) -> AsyncGenerator[tuple[TensorMeta, torch.Tensor], None]:
        while True:
            metadata, payload = await self._broadcast_bucket(None, None)
            for tensor_meta in metadata["bucket_meta"].values():
                yield tensor_meta, payload[tensor_meta.offset : tensor_meta.offset + tensor_meta.chunk_size]
            if metadata["is_last"]:
                return


def _contiguous_cpu(weights):
    """Each tensor as a contiguous CPU tensor (verl's chunking views it as raw bytes)."""
    for name, tensor in weights:
        yield name, tensor.detach().to("cpu").contiguous()
