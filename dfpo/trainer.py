"""verl's synchronous V1 PPO trainer with DFPO's actor worker (``trainer.v1.trainer_mode=dfpo_sync``).

The only change to ``PPOTrainerSync`` is the class of the actor worker, swapped in exactly as
verl's own ``separate_async`` trainer swaps in its ``DetachActorWorker``: the reference-policy
worker (a separate role when the actor does not hold it) keeps verl's class.
"""

from __future__ import annotations

import ray
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from dfpo.workers import DFPOActorRolloutRefWorker

DFPO_TRAINER_MODE = "dfpo_sync"


class DFPOSyncTrainer(PPOTrainerSync):
    """PPOTrainerSync whose actor (and hybrid actor-rollout-ref) worker is :class:`DFPOActorRolloutRefWorker`."""

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        for role in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(DFPOActorRolloutRefWorker)


if TRAINER_REGISTRY.get(DFPO_TRAINER_MODE) is not DFPOSyncTrainer:
    register_trainer(DFPO_TRAINER_MODE)(DFPOSyncTrainer)
