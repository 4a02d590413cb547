"""One tracker run per experiment: the W&B run id every launch of an experiment gets, and the
experiment's per-launch file logs read as one series.

The requeue of tests/e2e/test_slurm_cpu.py checks both on a real run (two attempts, one W&B run id,
every step once); these are the rules themselves, and their mutants.
"""

from __future__ import annotations

import functools
import json
import re

import pytest

from dfpo.launch import driver_setup
from dfpo.launch.compose import compose_trainer_config
from dfpo.launch.run_identity import tracker_run_id
from dfpo.operations.training_logs import launch_file_logs, read_training_log
from tests.recipes.recipe_commands import dry_run

W_AND_B_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_the_id_is_the_experiments_and_only_its():
    one = tracker_run_id("dfpo", "dfpo_min_replace-qwen3_32b-seed1", "/shared/runs/checkpoints/dfpo/x")
    assert one == tracker_run_id("dfpo", "dfpo_min_replace-qwen3_32b-seed1", "/shared/runs/checkpoints/dfpo/x")
    assert one.startswith("dfpo_min_replace-qwen3_32b-seed1-")
    others = {
        tracker_run_id("other", "dfpo_min_replace-qwen3_32b-seed1", "/shared/runs/checkpoints/dfpo/x"),
        tracker_run_id("dfpo", "dfpo_min_replace-qwen3_32b-seed2", "/shared/runs/checkpoints/dfpo/x"),
        tracker_run_id("dfpo", "dfpo_min_replace-qwen3_32b-seed1", "/elsewhere/checkpoints/dfpo/x"),
    }
    assert one not in others and len(others) == 3


@pytest.mark.parametrize("name", ["a" * 200, "GSPO run #3 (lr=1e-6, 32 GPUs)", "数学", "--"])
def test_the_id_is_one_wandb_accepts(name):
    run_id = tracker_run_id("p", name, "/ckpt")
    assert W_AND_B_ID.fullmatch(run_id), run_id


def test_an_experiment_without_a_name_or_folder_is_refused():
    with pytest.raises(ValueError, match="trainer.experiment_name"):
        tracker_run_id("dfpo", "", "/ckpt")


@functools.cache
def _recipe_overrides() -> tuple[str, ...]:
    (command,) = dry_run("run_dfpo_min_replace_qwen3_32b.sh")
    return tuple(command.overrides)


def _driver_config(*extra: str):
    config = compose_trainer_config([*_recipe_overrides(), *extra], config_name="dfpo_trainer")
    driver_setup.resolve(config)
    return config


def test_with_wandb_every_launch_of_an_experiment_gets_its_run_id_and_resumes_it(tmp_path):
    config = _driver_config(f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.logger=[console,file,wandb]")
    said = []
    assert driver_setup.continue_tracker_run(config, environ={}, say=said.append) == {
        "WANDB_RUN_ID": tracker_run_id(
            config.trainer.project_name, config.trainer.experiment_name, str(tmp_path / "run")
        ),
        "WANDB_RESUME": "allow",
    }
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.WANDB_RUN_ID.startswith(config.trainer.experiment_name) and env.WANDB_RESUME == "allow"
    assert len(said) == 1 and env.WANDB_RUN_ID in said[0]
    # another experiment name: another run
    renamed = _driver_config("trainer.logger=[wandb]", "trainer.experiment_name=x2")
    assert driver_setup.continue_tracker_run(renamed, environ={}, say=said.append)["WANDB_RUN_ID"] != env.WANDB_RUN_ID


def test_the_launching_shells_wandb_settings_win():
    config = _driver_config("trainer.logger=[console,wandb]")
    variables = driver_setup.continue_tracker_run(
        config, environ={"WANDB_RUN_ID": "my-own-run", "WANDB_RESUME": "must"}, say=lambda _: None
    )
    assert variables == {"WANDB_RUN_ID": "my-own-run", "WANDB_RESUME": "must"}


def test_without_wandb_nothing_is_set():
    config = _driver_config()  # the recipes' loggers: console and file
    assert driver_setup.continue_tracker_run(config, environ={}, say=pytest.fail) == {}
    assert "WANDB_RUN_ID" not in config.ray_kwargs.ray_init.runtime_env.env_vars


def test_wandb_and_verl_read_what_is_set_where_the_tracker_starts():
    """The seam: verl's Tracking calls wandb.init with W&B among its backends and no run id of its own,
    and wandb's settings take WANDB_RUN_ID and WANDB_RESUME from the environment."""
    import importlib.util
    from pathlib import Path

    def source(module: str) -> str:
        return Path(importlib.util.find_spec(module).origin).read_text()

    tracking = source("verl.utils.tracking")
    assert 'if "tracking" in default_backend or "wandb" in default_backend:' in tracking
    assert (
        "wandb.init(project=project_name, name=experiment_name, entity=entity, config=config, settings=settings)"
        in (tracking)
    )
    settings = source("wandb.sdk.wandb_settings")
    for line in (
        'env_prefix: str = "WANDB_"',
        "key = setting[len(env_prefix) :].lower()",
        "run_id: str | None = None",
        'resume: Literal["allow", "must", "never", "auto"] | None = None',
    ):
        assert line in settings, line


def _file_log(path, steps: dict[int, float]) -> None:
    path.write_text("".join(json.dumps({"step": s, "data": {"actor/grad_norm": v}}) + "\n" for s, v in steps.items()))


def test_an_experiments_launches_read_as_one_series_the_later_launch_winning(tmp_path):
    # launch 1 logged steps 1-3 and ended before step 3's checkpoint; launch 2 resumed at 3
    _file_log(tmp_path / "exp.20261207T101500Z.jsonl", {1: 1.0, 2: 2.0, 3: 30.0})
    _file_log(tmp_path / "exp.20261207T120000Z.jsonl", {3: 3.0, 4: 4.0})
    # not this experiment's: another name that starts the same, and a file without a launch stamp
    _file_log(tmp_path / "exp-2.20261207T110000Z.jsonl", {1: 99.0})
    _file_log(tmp_path / "exp.backup.jsonl", {1: 99.0})
    assert [path.name for path in launch_file_logs(tmp_path / "exp.jsonl")] == [
        "exp.20261207T101500Z.jsonl",
        "exp.20261207T120000Z.jsonl",
    ]
    series = read_training_log(tmp_path / "exp.jsonl")["actor/grad_norm"]
    assert series.steps.tolist() == [1, 2, 3, 4]
    assert series.values.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_the_launch_order_is_the_stamps_not_the_files_ages(tmp_path):
    later = tmp_path / "exp.20261207T120000Z.jsonl"
    earlier = tmp_path / "exp.20261207T101500Z.jsonl"
    _file_log(later, {2: 2.0})
    _file_log(earlier, {2: 20.0})  # written last, launched first
    assert read_training_log(tmp_path / "exp.jsonl")["actor/grad_norm"].values.tolist() == [2.0]


def test_an_experiment_with_no_launch_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "exp.jsonl"))):
        read_training_log(tmp_path / "exp.jsonl")
