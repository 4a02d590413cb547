"""Test-side names for composing verl 0.9.1's own ``ppo_trainer`` config (see dfpo.launch.compose)."""

from __future__ import annotations

from dfpo.launch.compose import actor_config_from, compose_trainer_config

DFPO_OVERRIDES = [
    "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
    "algorithm.adv_estimator=dfpo",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
]


def compose_ppo_trainer(overrides: list[str]):
    return compose_trainer_config(overrides, "ppo_trainer")


def actor_config(overrides: list[str] = ()):
    """A real verl ActorConfig (FSDPActorConfig) built from the composed ppo_trainer config."""
    return actor_config_from(overrides, "ppo_trainer")
