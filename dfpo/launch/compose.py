"""Compose verl's trainer config with Hydra outside ``main_ppo`` (benchmarks, tests, tools).

``dfpo/config/`` holds dfpo's recipe configs, which extend verl 0.9.1's ``ppo_trainer``; both
directories are on the search path, so ``compose_trainer_config(config_name="dfpo_trainer")`` and
``compose_trainer_config(config_name="ppo_trainer")`` give exactly what ``python -m dfpo.main`` and
verl's ``main_ppo`` would see for the same overrides.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import verl
from hydra import compose, initialize_config_dir

from dfpo.launch import CONFIG_DIR

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
DFPO_CONFIG_DIR = str(CONFIG_DIR)


def compose_trainer_config(overrides: Sequence[str] = (), config_name: str = "ppo_trainer"):
    """The composed DictConfig of ``config_name`` (from dfpo's or verl's config dir) with ``overrides``;
    dfpo's resolvers (:mod:`dfpo.launch.config_resolvers`) are registered, so its values resolve on access."""
    from dfpo.launch import config_resolvers

    config_resolvers.register()
    config_dir = (
        DFPO_CONFIG_DIR if os.path.exists(os.path.join(DFPO_CONFIG_DIR, f"{config_name}.yaml")) else VERL_CONFIG_DIR
    )
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name, overrides=list(overrides))


def actor_config_from(overrides: Sequence[str] = (), config_name: str = "ppo_trainer"):
    """verl's ActorConfig dataclass (as the actor worker builds it) for the composed config."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose_trainer_config(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", *overrides], config_name)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
