"""dfpo.launch.resume: a relaunch that would resume a checkpoint must have the config its run recorded.

Configs are the recipe's as ``python -m dfpo.main`` composes them (a GPU recipe's DRY_RUN line);
the run folder is a temporary directory with verl's tracker file, as verl leaves it after a save.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from omegaconf import OmegaConf

from dfpo.launch.compose import compose_trainer_config
from dfpo.launch.preflight import TRACKER_FILE, PreflightError, preflight, resume_folder
from dfpo.launch.resume import RECORD_FILE, check_resume_config, differences, record_run_config
from tests.recipes.recipe_commands import dry_run


@functools.cache
def _recipe_overrides() -> tuple[str, ...]:
    (command,) = dry_run("run_dfpo_min_replace_qwen3_32b.sh")
    return tuple(command.overrides)


def recipe_config(tmp_path, *extra: str):
    overrides = [
        *_recipe_overrides(),
        f"trainer.default_local_dir={tmp_path / 'run'}",
        "trainer.resume_mode=auto",
        *extra,
    ]
    return copy.deepcopy(compose_trainer_config(overrides, config_name="dfpo_trainer"))


def _saved_run(tmp_path, *extra: str):
    """A run launched with ``extra`` whose checkpoint verl's tracker names (the record as dfpo.main wrote it)."""
    config = recipe_config(tmp_path, *extra)
    path = record_run_config(config)
    assert path == tmp_path / "run" / RECORD_FILE
    actor = tmp_path / "run" / "global_step_20" / "actor"
    actor.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        torch.save({"w": torch.ones(2)}, actor / f"{kind}_world_size_1_rank_0.pt")
    (tmp_path / "run" / TRACKER_FILE).write_text("20")
    return config


def test_the_same_config_resumes_and_the_record_round_trips(tmp_path):
    config = _saved_run(tmp_path)
    assert differences(OmegaConf.load(tmp_path / "run" / RECORD_FILE), config) == {}
    said = []
    check_resume_config(recipe_config(tmp_path), resume_folder(config), say=said.append)
    assert said == []


def test_dfpos_own_keys_may_change_their_effects_are_compared(tmp_path):
    """Another log folder (LOG_DIR: dfpo.log_dir, the console log) resumes; dfpo's record of the
    method is not compared itself, the method's verl keys are (the next test)."""
    config = _saved_run(tmp_path)
    check_resume_config(
        recipe_config(tmp_path, "dfpo.log_dir=/elsewhere/logs", "dfpo.console_log=/elsewhere/run.log"),
        resume_folder(config),
        say=print,
    )


@pytest.mark.parametrize(
    ("change", "key", "values"),
    [
        ("actor_rollout_ref.actor.optim.lr=2e-6", "actor_rollout_ref.actor.optim.lr", (1e-6, 2e-6)),
        ("method=gspo", "actor_rollout_ref.actor.policy_loss.loss_mode", ("dfpo", "gspo")),
        ("actor_rollout_ref.rollout.n=16", "actor_rollout_ref.rollout.n", (8, 16)),
    ],
)
def test_a_changed_setting_is_refused_before_ray_naming_the_key(tmp_path, change, key, values):
    _saved_run(tmp_path)
    relaunch = recipe_config(tmp_path, change)
    with pytest.raises(PreflightError) as refused:
        preflight(relaunch, say=lambda text: None, environ={"ALLOW_LOCAL_CHECKPOINTS": "1"}, files=False)
    message = str(refused.value)
    assert f"  {key}: {values[0]!r} -> {values[1]!r}" in message
    assert str(tmp_path / "run" / RECORD_FILE) in message and "EXPERIMENT_NAME" in message


def test_what_only_manages_the_run_may_change(tmp_path):
    _saved_run(tmp_path)
    relaunch = recipe_config(
        tmp_path,
        "trainer.total_training_steps=400",
        "trainer.save_freq=5",
        "trainer.logger=[console]",
        "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='/elsewhere/x.jsonl'",
    )
    check_resume_config(relaunch, resume_folder(relaunch), say=pytest.fail)


def test_allow_config_change_resumes_saying_the_differences(tmp_path):
    _saved_run(tmp_path)
    said = []
    relaunch = recipe_config(tmp_path, "actor_rollout_ref.actor.optim.lr=2e-6", "dfpo.allow_config_change=true")
    check_resume_config(relaunch, resume_folder(relaunch), say=said.append)
    assert len(said) == 1 and "actor_rollout_ref.actor.optim.lr: 1e-06 -> 2e-06" in said[0]


def test_nothing_is_compared_without_a_checkpoint_or_when_starting_from_scratch(tmp_path):
    record_run_config(recipe_config(tmp_path))  # launched, but nothing saved yet: no tracker
    changed = recipe_config(tmp_path, "actor_rollout_ref.actor.optim.lr=2e-6")
    assert resume_folder(changed) is None
    (tmp_path / "run" / TRACKER_FILE).write_text("20")
    assert resume_folder(recipe_config(tmp_path, "trainer.resume_mode=disable")) is None
    assert resume_folder(changed) == tmp_path / "run"


def test_a_checkpoint_without_a_record_is_resumed_with_a_note(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / TRACKER_FILE).write_text("20")
    said = []
    config = recipe_config(tmp_path)
    check_resume_config(config, resume_folder(config), say=said.append)
    assert len(said) == 1 and f"has no {RECORD_FILE}" in said[0]
