"""``TRAINER_MODE``: every recipe composes a config that verl 0.9.1's own trainer of that mode accepts."""

from __future__ import annotations

import pytest

from dfpo.launch.compose import compose_trainer_config
from dfpo.launch.preflight import PreflightError
from tests.recipes.recipe_commands import dry_run, preflight_says, recipe_env, run_recipe

GPU_SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"
CPU_SCRIPT = "run_dfpo_min_replace_tiny_cpu.sh"
MODES = {"sync": "dfpo_sync", "colocate_async": "dfpo_colocate_async", "separate_async": "dfpo_separate_async"}


def _trainer(script: str, **variables: str):
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    import dfpo.verl.trainer  # noqa: F401  (registers the modes)

    (command,) = dry_run(script, **variables)
    cfg = compose_trainer_config(command.overrides, config_name="dfpo_trainer")
    # verl's constructor checks its mode's requirements (separate_async: batch = sync steps x
    # mini-batch, rollout resources, a checkpoint engine that reaches them)
    return command, get_trainer_cls(cfg.trainer.v1.trainer_mode)(cfg)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_gpu_recipe_runs_verls_trainer_of_the_mode(mode):
    variables = {"TRAINER_MODE": mode, "ROLLOUT_GPUS_PER_NODE": "8"}
    command, trainer = _trainer(GPU_SCRIPT, **variables)
    assert trainer.trainer_mode == mode and type(trainer).dfpo_mode == MODES[mode]
    experiment = command.config.trainer.experiment_name
    assert experiment.endswith("-seed1") if mode == "sync" else experiment.endswith(f"-seed1-{mode}")
    if mode == "separate_async":
        cfg = trainer.config
        assert (
            trainer.parameter_sync_step
            == cfg.data.train_batch_size // cfg.actor_rollout_ref.actor.ppo_mini_batch_size
            == 4
        )
        rollout = cfg.actor_rollout_ref.rollout
        assert (rollout.nnodes, rollout.n_gpus_per_node, rollout.checkpoint_engine.backend) == (1, 8, "nccl")
    else:
        (sync_command,) = dry_run(GPU_SCRIPT, ROLLOUT_GPUS_PER_NODE="8")
        assert (
            command.config.actor_rollout_ref.rollout.checkpoint_engine
            == sync_command.config.actor_rollout_ref.rollout.checkpoint_engine
        )
        assert set(command.overrides) - set(sync_command.overrides) == (
            {f"trainer_mode={mode}"} if mode != "sync" else set()
        )


def test_cpu_recipe_gives_separate_async_its_rollout_rank_and_the_local_checkpoint_engine(tmp_path):
    command, trainer = _trainer(CPU_SCRIPT, TRAINER_MODE="separate_async", OUTPUT_ROOT=str(tmp_path))
    cfg = trainer.config
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "local"
    assert (
        cfg.ray_kwargs.ray_init.num_gpus == cfg.trainer.n_gpus_per_node + cfg.actor_rollout_ref.rollout.n_gpus_per_node
    )
    (sync_command,) = dry_run(CPU_SCRIPT, OUTPUT_ROOT=str(tmp_path))
    assert sync_command.value("ray_kwargs.ray_init.num_gpus") == sync_command.value("trainer.n_gpus_per_node")
    assert sync_command.value("actor_rollout_ref.rollout.checkpoint_engine.backend") == "naive"


def test_an_unknown_mode_is_refused_with_what_to_do():
    result = run_recipe(GPU_SCRIPT, env=recipe_env(TRAINER_MODE="async"))
    assert result.returncode != 0 and "expected sync, colocate_async or separate_async" in result.stderr, result.stderr


def test_separate_async_without_its_rollout_gpus_stops_before_ray():
    with pytest.raises(PreflightError, match=r"rollout.n_gpus_per_node.*ROLLOUT_GPUS_PER_NODE"):
        preflight_says(GPU_SCRIPT, TRAINER_MODE="separate_async")
    preflight_says(GPU_SCRIPT, TRAINER_MODE="separate_async", ROLLOUT_GPUS_PER_NODE="8")


def test_separate_async_with_the_naive_engine_stops_before_ray():
    variables = {"TRAINER_MODE": "separate_async", "ROLLOUT_GPUS_PER_NODE": "4"}
    with pytest.raises(
        PreflightError, match=r"checkpoint_engine.backend=naive cannot reach separate_async.*CHECKPOINT_ENGINE"
    ):
        preflight_says(GPU_SCRIPT, CHECKPOINT_ENGINE="naive", **variables)
    preflight_says(GPU_SCRIPT, CHECKPOINT_ENGINE="nccl", **variables)
