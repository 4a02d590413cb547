"""The local rollout backend in verl's rollout registries: ``actor_rollout_ref.rollout.name=local``.

verl 0.9.1 looks a rollout name up twice:

* in the trainer process, ``RolloutReplicaRegistry`` (``verl/workers/rollout/replica.py``) gives
  the replica class whose ``launch_servers`` starts the server actors the agent loop sends
  requests to: :class:`LocalRolloutReplica` starts one :class:`cpu_backend.server.LocalRolloutServer`
  per replica (one replica per trainer rank: tensor parallelism 1), on the node of its rank;
* in every actor-rollout worker, ``_ROLLOUT_REGISTRY[(name, "async")]``
  (``verl/workers/rollout/base.py``) gives the adapter the worker drives around each weight sync:
  :class:`LocalServerAdapter`. With verl's ``naive`` checkpoint engine (the one the synchronous
  trainer uses) the worker hands the adapter a generator of the actor's full parameters; under
  FSDP2 each tensor is gathered with a collective (``full_tensor()``), so every rank walks the
  whole generator and the first rank of each replica sends the state dict to its server. A
  standalone replica (verl's separate-async trainer) is fed by verl's ``CheckpointEngineWorker``
  instead, with the weights a checkpoint engine received
  (:mod:`cpu_backend.checkpoint_engine`, ``checkpoint_engine.backend=local``).
"""

from __future__ import annotations

import os
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica
from verl.workers.rollout.utils import ensure_async_iterator

from cpu_backend.selection import LOCAL_ROLLOUT_NAME
from cpu_backend.server import LocalRolloutServer


def server_actor_name(replica_rank: int, node_rank: int = 0) -> str:
    """The Ray actor name of a replica's server (unique per Ray job namespace)."""
    return f"{LOCAL_ROLLOUT_NAME}_server_{replica_rank}_{node_rank}"


def _model_path(model_config: Any) -> str:
    """The local checkpoint directory of verl's model config (HFModelConfig or its DictConfig)."""
    return str(getattr(model_config, "local_path", None) or model_config.path)


class LocalRolloutReplica(RolloutReplica):
    """A replica served by one :class:`LocalRolloutServer` actor (tensor parallel size 1)."""

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                "the local rollout serves one replica per rank: set "
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
                f"(and data/pipeline parallel 1); got a replica world size of {self.world_size}"
            )
        node_id = None
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
        options: dict[str, Any] = {
            "name": server_actor_name(self.replica_rank),
            "num_cpus": 0,
            "max_concurrency": self.max_concurrency,
            # The server runs where the workers run and must resolve the same platform.
            "runtime_env": {"env_vars": {"VERL_PLATFORM": os.environ["VERL_PLATFORM"]}}
            if "VERL_PLATFORM" in os.environ
            else {},
        }
        if node_id is not None:
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            )
        server = (
            ray.remote(LocalRolloutServer)
            .options(**options)
            .remote(
                config=self.config,
                model_path=_model_path(self.model_config),
                replica_rank=self.replica_rank,
                seed=self.config.seed,
            )
        )
        await server.__ray_ready__.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{LOCAL_ROLLOUT_NAME}-replica-{self.replica_rank}"


class LocalServerAdapter(BaseRollout):
    """The worker-side client of a local replica's server (weight sync, sleep/wake)."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        replica_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // replica_world_size if replica_rank == -1 else replica_rank
        self.is_server_rank = rank % replica_world_size == 0
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self, weights, global_steps: int | None = None, wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(
                f"the local rollout takes full tensors (wire_format='named_tensors'), got {wire_format!r}: use "
                "actor_rollout_ref.rollout.checkpoint_engine.backend=naive (or local for separate_async)"
            )
        state_dict: dict[str, torch.Tensor] = {}
        # every rank walks the weights: under the naive engine gathering a tensor is a collective;
        # a standalone replica's CheckpointEngineWorker hands over the engine's async generator
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_server_rank:
                state_dict[name] = tensor.detach().to("cpu", torch.float32, copy=True)
        if not self.is_server_rank:
            return None
        server = self._server_handle()
        await server.load_weights.remote(state_dict)
        if global_steps is not None:
            await server.set_global_steps.remote(global_steps)
        return None
