"""dfpo.launch.preflight: the checks ``python -m dfpo.main`` makes before Ray starts.

Configs are composed by Hydra from dfpo's config (as ``dfpo.main`` composes them); checkpoints are
written in verl's FSDP layout with ``torch.save`` (as verl's FSDP checkpoint manager writes them).
The run through ``python -m dfpo.main`` itself is tests/dfpo/test_preflight_main.py.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import re

import pytest
import torch
from omegaconf import OmegaConf

from dfpo.launch import preflight
from dfpo.launch.compose import compose_trainer_config
from dfpo.launch.preflight import (
    TRACKER_FILE,
    VERL_DEFAULT_MODEL_PATH,
    PreflightError,
    check_checkpoint_storage,
    check_group_size,
    check_input_files,
    check_resume_checkpoint,
    checkpoint_problem,
    missing_model_message,
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


# ---- the model a base model file trains ---------------------------------------------------------

CONFIG_DIR = pathlib.Path(preflight.__file__).resolve().parents[1] / "config"
# the GPU model files: those that do not build their own checkpoint (the CPU examples do)
GPU_MODELS = sorted(
    p.stem
    for p in (CONFIG_DIR / "base_model").glob("*.yaml")
    if "path" not in OmegaConf.to_container(OmegaConf.load(p)).get("actor_rollout_ref", {}).get("model", {})
)


def assert_says_the_model_and_the_way(message: str, model_id: str, launcher: bool) -> None:
    """A missing checkpoint's message names the model (its Hugging Face id) and how to give its path on
    the path in use: MODEL_PATH for the recipes' launcher, the key itself for ``python -m dfpo.main``
    (which reads no MODEL_PATH); never verl's default path, which is another model's."""
    assert f"trains {model_id}" in message, message
    assert VERL_DEFAULT_MODEL_PATH not in message and "deepseek" not in message, message
    if launcher:
        assert "set MODEL_PATH=" in message and "actor_rollout_ref.model.path=" not in message, message
    else:
        assert "pass actor_rollout_ref.model.path=" in message and "MODEL_PATH" not in message, message


def test_every_gpu_model_file_names_its_model():
    assert GPU_MODELS == ["gpt_oss_120b", "qwen3_0p6b", "qwen3_1p7b", "qwen3_32b", "qwen3_next_80b_a3b_thinking"]
    for name in GPU_MODELS:
        model_id = OmegaConf.load(CONFIG_DIR / "base_model" / f"{name}.yaml").dfpo.model_id
        assert re.fullmatch(r"(Qwen|openai)/[\w.-]+", model_id), (name, model_id)
    assert config("base_model=gpt_oss_120b").dfpo.model_id == "openai/gpt-oss-120b"
    assert config().dfpo.model_id is None  # no base model: no model to name


@pytest.mark.parametrize("name", GPU_MODELS)
def test_a_missing_checkpoint_names_the_model_and_how_to_pass_it_on_each_path(name, tmp_path):
    model_id = config(f"base_model={name}").dfpo.model_id
    # python -m dfpo.main base_model=<name> without a path: verl's default (another model) is left
    with pytest.raises(PreflightError) as direct:
        check_input_files(config(f"base_model={name}"), environ={})
    assert_says_the_model_and_the_way(str(direct.value), model_id, launcher=False)
    assert str(direct.value).startswith("actor_rollout_ref.model.path is not set")
    # the recipes' launcher: its MODEL_PATH knob set the key, and the driver has its environment
    missing = str(tmp_path / "no-such-checkpoint")
    recipe = config(f"base_model={name}", f"actor_rollout_ref.model.path={missing}")
    with pytest.raises(PreflightError) as launched:
        check_input_files(recipe, environ={"MODEL_PATH": missing})
    assert_says_the_model_and_the_way(str(launched.value), model_id, launcher=True)
    assert str(launched.value).startswith(f"MODEL_PATH {missing} does not exist")
    # a path given to python -m dfpo.main (or after a recipe's knobs), MODEL_PATH elsewhere: the key
    with pytest.raises(PreflightError) as given:
        check_input_files(recipe, environ={"MODEL_PATH": "/elsewhere"})
    assert f"actor_rollout_ref.model.path {missing} does not exist" in str(given.value)
    assert f"pass actor_rollout_ref.model.path=/path/to/{model_id.split('/')[1]}" in str(given.value)
    assert "MODEL_PATH is set here (/elsewhere) but did not set this path" in str(given.value)


def test_the_checks_catch_a_message_reporting_verls_default_or_the_wrong_knob(monkeypatch):
    """Mutants: the message before this check (verl's default path reported, the recipes' knob named to
    ``python -m dfpo.main``), the launcher's message on the direct path and the other way round, and
    the code reporting verl's default as a missing path: each fails the assertion above."""
    model_id = "openai/gpt-oss-120b"
    before = (
        "actor_rollout_ref.model.path ~/models/deepseek-llm-7b-chat does not exist (MODEL_PATH): download the "
        "checkpoint first (docs/recipes.md)"
    )
    direct = missing_model_message(config("base_model=gpt_oss_120b"), environ={})
    cfg = config("base_model=gpt_oss_120b", "actor_rollout_ref.model.path=/no/such")
    launched = missing_model_message(cfg, environ={"MODEL_PATH": "/no/such"})
    assert_says_the_model_and_the_way(direct, model_id, launcher=False)
    assert_says_the_model_and_the_way(launched, model_id, launcher=True)
    for message, launcher in ((before, False), (before, True), (launched, False), (direct, True)):
        with pytest.raises(AssertionError):
            assert_says_the_model_and_the_way(message, model_id, launcher)
    monkeypatch.setattr(preflight, "VERL_DEFAULT_MODEL_PATH", "/not/verls/default")
    with pytest.raises(AssertionError):
        assert_says_the_model_and_the_way(
            missing_model_message(config("base_model=gpt_oss_120b"), environ={}), model_id, launcher=False
        )


def test_verls_default_model_path_is_the_one_preflight_knows():
    assert config().actor_rollout_ref.model.path == VERL_DEFAULT_MODEL_PATH


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
        match=r"latest checkpoint \(step 5.*global_step_5/actor/model_world_size_2_rank_1\.pt: "
        r"not a readable torch archive.*no earlier intact step",
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
