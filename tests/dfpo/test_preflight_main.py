"""``python -m dfpo.main`` runs dfpo.launch.preflight before Ray: a run that cannot learn or cannot resume
stops in seconds, naming the key or the file, and starts no Ray cluster.

The command is the tiny CPU recipe's (its ``DRY_RUN=1`` line), run directly: the path that skips
every check the recipes once made in bash, as a user typing ``python -m dfpo.main ...`` does.
A stale Ray address file is stopped there too, before ``ray.init`` would wait on it.
The tiny recipe's launches share one interpreter that imported ``dfpo.main`` once and forks a child
per launch that runs its entry point (tests/dfpo/warm_main.py: the import is most of such a launch);
the last two tests launch ``python -m dfpo.main`` and ``python -m dfpo.launch.recipe`` as processes
of their own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from dfpo.launch.compose import compose_trainer_config
from dfpo.launch.driver_setup import DriverSetupError, check_platform
from dfpo.launch.preflight import TRACKER_FILE
from dfpo.launch.recipe import recipe_environment
from tests.dfpo.test_preflight import assert_says_the_model_and_the_way
from tests.dfpo.warm_main import WarmMain
from tests.recipes.recipe_commands import REPO_ROOT, dry_run
from tests.slurm_cluster import free_ports

pytestmark = pytest.mark.slow

RAY_STARTED = "Started a local Ray instance"


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    """One OUTPUT_ROOT for the module's launches: the first writes the tiny example's model and data
    there (dfpo.example, several seconds of a warm-start), the others find them."""
    return tmp_path_factory.mktemp("preflight_main")


@pytest.fixture(scope="module")
def tiny_main(output_root, tmp_path_factory):
    """``python -m dfpo.main`` in the tiny recipe's driver environment, its import shared by the launches."""
    server = WarmMain(
        recipe_environment("tiny_cpu", dict(os.environ)), REPO_ROOT, tmp_path_factory.mktemp("preflight_main_launches")
    )
    yield server
    server.close()


def _main(tiny_main: WarmMain, output_root, *overrides: str) -> subprocess.CompletedProcess:
    (command,) = dry_run("run_dfpo_min_replace_tiny_cpu.sh", OUTPUT_ROOT=str(output_root), MODEL_PATH=None)
    assert list(command.argv[1:3]) == ["-m", "dfpo.main"], command.argv
    # far below Ray's start-up: importing verl is most of it (10-20 s on 2 cores, once per module);
    # the driver writes the tiny example's model and data first (dfpo.example)
    return tiny_main.run([*command.argv[3:], *overrides], timeout_s=180)


def test_dfpo_with_a_group_of_one_stops_before_ray_naming_rollout_n(tiny_main, output_root):
    done = _main(tiny_main, output_root, "actor_rollout_ref.rollout.n=1")
    assert done.returncode != 0
    assert "dfpo preflight: actor_rollout_ref.rollout.n=1:" in done.stderr, done.stderr[-2000:]
    assert RAY_STARTED not in done.stdout + done.stderr


def test_a_damaged_latest_checkpoint_without_an_intact_one_stops_before_ray_naming_the_file(
    tiny_main, output_root, tmp_path
):
    checkpoints = tmp_path / "ckpt"
    actor = checkpoints / "global_step_3" / "actor"
    actor.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(2):
            torch.save({"w": torch.ones(32, 32)}, actor / f"{kind}_world_size_2_rank_{rank}.pt")
    shard = actor / "model_world_size_2_rank_1.pt"
    shard.write_bytes(shard.read_bytes()[:100])  # a writer killed mid-file
    (checkpoints / TRACKER_FILE).write_text("3")
    done = _main(tiny_main, output_root, f"trainer.default_local_dir={checkpoints}", "trainer.resume_mode=auto")
    assert done.returncode != 0
    assert f"{shard}: not a readable torch archive" in done.stderr, done.stderr[-2000:]
    assert RAY_STARTED not in done.stdout + done.stderr


def test_a_batch_that_splits_into_unequal_mini_batches_stops_before_ray(tiny_main, output_root):
    done = _main(tiny_main, output_root, "data.train_batch_size=6")  # the tiny recipe's mini-batch is 4 prompts
    assert done.returncode != 0
    assert (
        "dfpo preflight: data.train_batch_size=6 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=4"
        in done.stderr
    ), done.stderr[-2000:]
    assert RAY_STARTED not in done.stdout + done.stderr


def test_a_dry_run_checks_prints_the_config_and_starts_nothing(tiny_main, output_root):
    done = _main(tiny_main, output_root, "dfpo.dry_run=true", "trainer.total_training_steps=3")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dfpo dry run (dfpo.dry_run=true): every check passed" in done.stdout
    assert "total_training_steps: 3" in done.stdout and "method: dfpo_min_replace" in done.stdout
    assert RAY_STARTED not in done.stdout + done.stderr


def test_a_stale_ray_address_file_stops_the_driver_before_ray_naming_the_file(tiny_main, output_root, tmp_path):
    """Ray's address file of a head that ended without ``ray stop`` (tests/dfpo/test_ray_address_file.py):
    ``ray.init()`` would wait minutes for it; the driver stops in seconds and says what to do."""
    assert "RAY_ADDRESS" not in os.environ, "this launch must find the cluster as a plain ray.init() does"
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"  # nothing listens there once the probe is closed
    (tmp_path / "ray_current_cluster").write_text(address)
    done = _main(tiny_main, output_root, f"+ray_kwargs.ray_init._temp_dir={tmp_path}")
    assert done.returncode != 0
    assert f"dfpo: Ray's address file {tmp_path / 'ray_current_cluster'} names the cluster at '{address}'" in (
        done.stderr
    ), done.stderr[-2000:]
    assert RAY_STARTED not in done.stdout + done.stderr


def _preflight_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0 and RAY_STARTED not in done.stdout + done.stderr, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("dfpo preflight: ")]
    return line.removeprefix("dfpo preflight: ").split("; data.")[0]  # the model's problem (no data here either)


def test_dfpo_main_without_a_checkpoint_names_the_model_and_the_key_to_pass():
    """``python -m dfpo.main base_model=gpt_oss_120b`` without a path: verl's default path (another
    model) stays; preflight names the model the file trains and the key, not the recipes' MODEL_PATH,
    which this path does not read."""
    env = {k: v for k, v in os.environ.items() if k != "MODEL_PATH"}
    argv = [
        sys.executable,
        "-m",
        "dfpo.main",
        "method=dfpo_min_replace",
        "base_model=gpt_oss_120b",
        "dfpo.dry_run=true",
    ]
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180)
    message = _preflight_line(done)
    assert_says_the_model_and_the_way(message, "openai/gpt-oss-120b", launcher=False)
    assert message.startswith("actor_rollout_ref.model.path is not set"), message


def test_the_recipe_launcher_with_a_missing_checkpoint_names_the_model_and_model_path(tmp_path):
    """``python -m dfpo.launch.recipe`` (what recipes/*.sh run) sets the key from MODEL_PATH and execs the
    driver with its environment: preflight names MODEL_PATH, the knob this path reads."""
    missing = str(tmp_path / "gpt-oss-120b-bf16")
    env = {**os.environ, "MODEL_PATH": missing}
    argv = [sys.executable, "-m", "dfpo.launch.recipe", "dfpo_min_replace", "gpt_oss_120b", "dfpo.dry_run=true"]
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180)
    message = _preflight_line(done)
    assert_says_the_model_and_the_way(message, "openai/gpt-oss-120b", launcher=True)
    assert message.startswith(f"MODEL_PATH {missing} does not exist"), message


def test_a_cpu_config_needs_verl_platform_in_the_drivers_environment():
    cfg = compose_trainer_config(["base_model=tiny_cpu"], config_name="dfpo_trainer")
    with pytest.raises(DriverSetupError, match="VERL_PLATFORM=cpu"):
        check_platform(cfg, environ={})
    check_platform(cfg, environ={"VERL_PLATFORM": "cpu"})
