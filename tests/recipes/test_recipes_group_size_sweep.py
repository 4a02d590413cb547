"""recipes/sweep_group_size_qwen3_32b.sh: the paper's G in {2, 4, 8, 16}, compute matched across G."""

from __future__ import annotations

import pytest

from dfpo.launch.compose import compose_trainer_config
from tests.recipes.recipe_commands import default_command, dry_run, recipe_env, run_recipe
from tests.recipes.recipe_expectations import METHODS, PAPER_GROUP_SIZES, SWEEP_SCRIPT


@pytest.fixture(scope="module")
def sweep_commands():
    return dry_run(SWEEP_SCRIPT)


def test_sweep_runs_dfpo_and_gspo_at_every_paper_group_size(sweep_commands):
    runs = [(int(c.value("actor_rollout_ref.rollout.n")), c.value("method")) for c in sweep_commands]
    assert runs == [(g, method) for g in PAPER_GROUP_SIZES for method in ("dfpo_min_replace", "gspo")]
    names = [c.value("trainer.experiment_name") for c in sweep_commands]
    assert len(set(names)) == len(names)


def test_sweep_keeps_responses_per_step_and_per_update_fixed(sweep_commands):
    for command in sweep_commands:
        g = int(command.value("actor_rollout_ref.rollout.n"))
        assert int(command.value("data.train_batch_size")) * g == 1024
        assert int(command.value("actor_rollout_ref.actor.ppo_mini_batch_size")) * g == 256


@pytest.mark.parametrize("index", [0, 7])  # G=2 with DFPO and G=16 with GSPO: the two extremes
def test_sweep_commands_compose_to_the_intended_run(sweep_commands, index):
    command = sweep_commands[index]
    cfg = compose_trainer_config(command.overrides, config_name="dfpo_trainer")
    g = PAPER_GROUP_SIZES[index // 2]
    method = ("dfpo_min_replace", "gspo")[index % 2]
    assert cfg.actor_rollout_ref.rollout.n == g
    assert cfg.data.train_batch_size == 1024 // g
    assert cfg.algorithm.adv_estimator == METHODS[method].adv_estimator
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == METHODS[method].loss_mode
    assert cfg.trainer.experiment_name == f"{method}-qwen3_32b-g{g}-seed1"


def test_sweep_at_g8_is_the_main_recipe(sweep_commands):
    """G=8 with the default budgets is exactly the main run, so the two share checkpoints."""
    from omegaconf import OmegaConf

    mains = ("run_dfpo_min_replace_qwen3_32b.sh", "run_gspo_qwen3_32b.sh")
    for command, script in zip(sweep_commands[4:6], mains, strict=True):
        sweep, main = (OmegaConf.to_container(c.config) for c in (command, default_command(script)))
        for config in (sweep, main):  # the file log's name holds the launch time
            config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"].pop("VERL_FILE_LOGGER_PATH")
        assert sweep == main


def test_sweep_knobs_narrow_the_grid_and_pass_overrides():
    commands = dry_run(
        SWEEP_SCRIPT, "trainer.total_training_steps=50", SWEEP_GROUP_SIZES="16", SWEEP_METHODS="dfpo_orth_proj"
    )
    assert len(commands) == 1
    assert commands[0].value("method") == "dfpo_orth_proj"
    assert commands[0].value("trainer.total_training_steps") == "50"


def test_sweep_refuses_a_group_size_that_does_not_divide_the_budget():
    result = run_recipe(SWEEP_SCRIPT, env=recipe_env(SWEEP_GROUP_SIZES="2 3"))
    assert result.returncode != 0 and result.stdout == ""
    assert "G=3 does not divide RESPONSES_PER_STEP=1024" in result.stderr
