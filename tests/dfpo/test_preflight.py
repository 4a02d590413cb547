"""dfpo.launch.preflight: the checks ``python -m dfpo.main`` makes before Ray starts.

Configs are composed by Hydra from dfpo's config (as ``dfpo.main`` composes them); checkpoints are
written in verl's FSDP layout with ``torch.save`` (as verl's FSDP checkpoint manager writes them).
The run through ``python -m dfpo.main`` itself is tests/dfpo/test_preflight_main.py.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from omegaconf import OmegaConf

from dfpo.launch.compose import compose_trainer_config
from dfpo.launch.preflight import (
    TRACKER_FILE,
    PreflightError,
    check_checkpoint_storage,
    check_group_size,
    check_resume_checkpoint,
    checkpoint_problem,
)


@functools.cache
def _composed(*overrides: str):
    return compose_trainer_config(list(overrides), config_name="dfpo_trainer")


def config(*overrides: str):
    return copy.deepcopy(_composed(*overrides))


# ---- the group size -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            ("algorithm.adv_estimator=dfpo", "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo"),
            "algorithm.adv_estimator=dfpo and actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
        ),
        (
            ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo"),
            "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
        ),
        (
            ("algorithm.adv_estimator=dfpo", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"),
            "algorithm.adv_estimator=dfpo",
        ),
    ],
)
def test_a_group_of_one_with_dfpo_is_refused_naming_rollout_n(overrides, named):
    with pytest.raises(PreflightError, match=rf"^actor_rollout_ref\.rollout\.n=1: {named} compare"):
        check_group_size(config(*overrides, "actor_rollout_ref.rollout.n=1"))


def test_groups_of_two_and_verl_baselines_with_one_pass():
    check_group_size(
        config(
            "algorithm.adv_estimator=dfpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
            "actor_rollout_ref.rollout.n=2",
        )
    )
    # verl's grpo gives a singleton its reward as advantage (REINFORCE without a baseline): it learns
    check_group_size(
        config(
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            "actor_rollout_ref.rollout.n=1",
        )
    )


# ---- checkpoint storage on several nodes --------------------------------------------------------


def test_several_nodes_need_shared_checkpoint_storage(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    mounts = f"/dev/sda1 / ext4 rw,relatime 0 0\nserver:/export {shared} nfs4 rw,relatime 0 0\n"
    local = config("trainer.nnodes=2", "trainer.default_local_dir=/runs/ckpt")
    with pytest.raises(
        PreflightError,
        match=r"trainer.default_local_dir=/runs/ckpt is on ext4, not shared storage, with trainer.nnodes=2",
    ):
        check_checkpoint_storage(local, environ={}, mounts_text=mounts)
    check_checkpoint_storage(local, environ={"ALLOW_LOCAL_CHECKPOINTS": "1"}, mounts_text=mounts)
    check_checkpoint_storage(
        config("trainer.nnodes=2", f"trainer.default_local_dir={shared}/ckpt"), environ={}, mounts_text=mounts
    )
    check_checkpoint_storage(
        config("trainer.nnodes=1", "trainer.default_local_dir=/runs/ckpt"), environ={}, mounts_text=mounts
    )


# ---- the checkpoint to resume -------------------------------------------------------------------


def write_step(folder, step: int, world_size: int = 2, kinds=("model", "optim", "extra_state"), data: bool = True):
    """verl's FSDP checkpoint of ``step``: one torch archive per rank and kind, and data.pt."""
    actor = folder / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for kind in kinds:
        for rank in range(world_size):
            torch.save(
                {"weight": torch.full((64, 64), float(step + rank))},
                actor / f"{kind}_world_size_{world_size}_rank_{rank}.pt",
            )
    (actor / "huggingface").mkdir()
    if data:
        torch.save({"dataloader": {"step": step}}, folder / f"global_step_{step}" / "data.pt")
    (folder / TRACKER_FILE).write_text(str(step))
    return folder / f"global_step_{step}"


def truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def resume_config(folder, *overrides: str):
    return config(f"trainer.default_local_dir={folder}", "trainer.resume_mode=auto", *overrides)


def test_an_intact_latest_checkpoint_is_left_to_verl(tmp_path):
    write_step(tmp_path, 2)
    write_step(tmp_path, 4)
    cfg, said = resume_config(tmp_path), []
    check_resume_checkpoint(cfg, say=said.append)
    assert (cfg.trainer.resume_mode, said) == ("auto", [])
    assert checkpoint_problem(tmp_path / "global_step_4") is None


@pytest.mark.parametrize(
    ("damage", "named", "why"),
    [
        (
            lambda step: truncate(step / "actor" / "model_world_size_2_rank_1.pt"),
            "actor/model_world_size_2_rank_1.pt",
            "not a readable torch archive",
        ),
        (
            lambda step: (step / "actor" / "optim_world_size_2_rank_0.pt").unlink(),
            "actor/optim_world_size_2_rank_0.pt",
            "missing",
        ),
        (lambda step: truncate(step / "data.pt", 0.9), "data.pt", "not a readable torch archive"),
        (
            lambda step: (step / "actor" / "extra_state_world_size_2_rank_1.pt").write_bytes(b""),
            "actor/extra_state_world_size_2_rank_1.pt",
            "0 bytes",
        ),
    ],
    ids=["truncated model shard", "missing optimizer shard", "truncated dataloader state", "empty extra state"],
)
def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one_saying_so(tmp_path, damage, named, why):
    write_step(tmp_path, 2)
    write_step(tmp_path, 3)
    damage(write_step(tmp_path, 4))
    cfg, said = resume_config(tmp_path), []
    check_resume_checkpoint(cfg, say=said.append)
    assert cfg.trainer.resume_mode == "resume_path"
    assert cfg.trainer.resume_from_path == str(tmp_path / "global_step_3")
    (message,) = said
    assert (
        "the latest checkpoint (step 4" in message
        and str(tmp_path / "global_step_4" / named) in message
        and why in message
    )
    assert "Resuming from step 3" in message


def test_a_damaged_latest_checkpoint_without_an_intact_one_stops_naming_the_file(tmp_path):
    truncate(write_step(tmp_path, 2) / "actor" / "model_world_size_2_rank_0.pt")
    write_step(tmp_path, 5)
    truncate(tmp_path / "global_step_5" / "actor" / "model_world_size_2_rank_1.pt")
    with pytest.raises(
        PreflightError,
        match=r"latest checkpoint \(step 5.*global_step_5/actor/model_world_size_2_rank_1\.pt: not a readable torch archive.*no earlier intact step",
    ):
        check_resume_checkpoint(resume_config(tmp_path))


def test_a_tracker_naming_a_missing_folder_is_not_a_silent_fresh_start(tmp_path):
    """verl would log a warning and train from scratch; preflight resumes the newest intact step."""
    write_step(tmp_path, 1)
    (tmp_path / TRACKER_FILE).write_text("2")
    cfg, said = resume_config(tmp_path), []
    check_resume_checkpoint(cfg, say=said.append)
    assert cfg.trainer.resume_from_path == str(tmp_path / "global_step_1")
    assert "global_step_2: the folder does not exist" in said[0]


def test_a_later_step_than_the_tracker_is_not_taken(tmp_path):
    """A folder newer than the tracker is a save that never completed (verl writes the tracker last)."""
    write_step(tmp_path, 1)
    truncate(write_step(tmp_path, 2) / "actor" / "model_world_size_2_rank_0.pt")
    write_step(tmp_path, 3, data=False)
    (tmp_path / TRACKER_FILE).write_text("2")
    cfg = resume_config(tmp_path)
    check_resume_checkpoint(cfg, say=lambda _: None)
    assert cfg.trainer.resume_from_path == str(tmp_path / "global_step_1")


def test_resume_path_to_a_damaged_checkpoint_stops(tmp_path):
    step = write_step(tmp_path, 2)
    truncate(step / "actor" / "optim_world_size_2_rank_1.pt")
    cfg = config("trainer.resume_mode=resume_path", f"trainer.resume_from_path={step}")
    with pytest.raises(
        PreflightError,
        match=r"trainer.resume_from_path=.*global_step_2 cannot be resumed: .*optim_world_size_2_rank_1\.pt",
    ):
        check_resume_checkpoint(cfg)


def test_shards_that_were_not_saved_are_not_required(tmp_path):
    """checkpoint.save_contents=[model]: no optimizer or extra state, no dataloader state."""
    step = write_step(tmp_path, 1, kinds=("model",), data=False)
    assert checkpoint_problem(step) is None


def test_nothing_to_check(tmp_path):
    for cfg in (
        resume_config(tmp_path),
        config("trainer.resume_mode=disable", f"trainer.default_local_dir={tmp_path}"),
    ):
        before = OmegaConf.to_container(cfg.trainer)
        check_resume_checkpoint(cfg)
        assert OmegaConf.to_container(cfg.trainer) == before


def test_a_tracker_without_a_step_number_stops(tmp_path):
    (tmp_path / TRACKER_FILE).write_text("latest\n")
    with pytest.raises(PreflightError, match=r"holds 'latest', not a step number"):
        check_resume_checkpoint(resume_config(tmp_path))
