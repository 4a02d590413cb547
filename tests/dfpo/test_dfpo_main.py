"""`python -m dfpo.main` composes DFPO's config, and its trainer puts DFPO's worker in the actor role."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_entry_point_composes_the_recipe_config():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dfpo.main",
            "--cfg",
            "job",
            "actor_rollout_ref.actor.policy_loss.dfpo_transform=orth_proj",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "trainer_mode: dfpo_sync" in out.stdout
    assert "loss_mode: dfpo" in out.stdout and "dfpo_transform: orth_proj" in out.stdout
    assert "adv_estimator: dfpo" in out.stdout


@pytest.mark.parametrize("use_ref", [False, True])
def test_trainer_maps_the_actor_role_to_dfpo_worker(use_ref):
    from verl.trainer.ppo.utils import Role
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from dfpo.launch.compose import compose_trainer_config
    from dfpo.verl.trainer import DFPOSyncTrainer
    from dfpo.verl.workers import DFPOActorRolloutRefWorker

    overrides = ["actor_rollout_ref.actor.use_kl_loss=true"] if use_ref else []
    cfg = compose_trainer_config(overrides, "dfpo_trainer")
    assert get_trainer_cls(cfg.trainer.v1.trainer_mode) is DFPOSyncTrainer
    trainer = DFPOSyncTrainer.__new__(DFPOSyncTrainer)
    trainer.config = cfg
    trainer._init_resource_pool_mgr()
    actor_roles = [r for r in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef) if r in trainer.role_worker_mapping]
    assert actor_roles
    for role in actor_roles:
        assert trainer.role_worker_mapping[role].__ray_metadata__.class_name == DFPOActorRolloutRefWorker.__name__


def test_entry_point_refuses_other_trainer_modes():
    from omegaconf import OmegaConf

    from dfpo.main import check_trainer_mode

    with pytest.raises(ValueError, match="dfpo_sync"):
        check_trainer_mode(OmegaConf.create({"trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"}}}))
    with pytest.raises(ValueError, match="V1 trainer"):
        check_trainer_mode(OmegaConf.create({"trainer": {"use_v1": False, "v1": {"trainer_mode": "dfpo_sync"}}}))
