"""Compose verl 0.9.1's own ``ppo_trainer`` config with Hydra, as verl's main_ppo does."""

from __future__ import annotations

import os

import verl
from hydra import compose, initialize_config_dir

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")

DFPO_OVERRIDES = [
    "actor_rollout_ref.actor.policy_loss._target_=dfpo.loss_config.DFPOPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
    "algorithm.adv_estimator=dfpo",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
]


def compose_ppo_trainer(overrides: list[str]):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def actor_config(overrides: list[str] = ()):
    """A real verl ActorConfig (FSDPActorConfig) built from the composed config."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose_ppo_trainer(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", *overrides])
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
