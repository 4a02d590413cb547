"""``python -m quickstart``'s options reach the training runs (no training here)."""

from __future__ import annotations

import sys

import pytest

from quickstart import pipeline as quickstart


def test_overrides_go_after_the_recipe_and_rename_the_experiment(tmp_path, monkeypatch):
    calls = []

    def fake_run_logged(command, log, env=None, on_poll=None):
        calls.append((command, env))
        progress = on_poll
        progress.seen.update(range(1, 3))  # as if the run had logged steps 1 and 2

    monkeypatch.setattr(quickstart, "run_logged", fake_run_logged)
    method = quickstart.METHODS[0]
    overrides = ("actor_rollout_ref.actor.optim.lr=1e-5",)
    trained = quickstart.train(method, tmp_path, steps=2, ranks=1, seed=3, overrides=overrides)
    ((command, env),) = calls
    # verl's validation samples are written per run (the held-out evaluation reads them)
    assert trained.validation_dir == tmp_path / "validation" / trained.experiment
    # the recipe's own command (python -m dfpo.main method=... base_model=..., one override per
    # knob), started directly, the quickstart's own (a weights-only final checkpoint) and the user's overrides after it
    from dfpo.launch.recipe import recipe_overrides

    assert command[:5] == [sys.executable, "-m", "dfpo.main", "method=dfpo_min_replace", "base_model=smollm2_135m_cpu"]
    assert command[3:] == [
        *recipe_overrides("dfpo_min_replace", "smollm2_135m_cpu", env),
        *quickstart.CHECKPOINT_OVERRIDES,
        *overrides,
        f"trainer.validation_data_dir={trained.validation_dir}",
    ]
    assert env["GPUS_PER_NODE"] == "1" and env["SEED"] == "3" and env["TOTAL_TRAINING_STEPS"] == "2"
    assert env["VERL_PLATFORM"] == "cpu"  # a CPU model's driver
    one_rank = {"GPUS_PER_NODE": "1"}
    plain = quickstart.experiment_name(method, tmp_path, 2, 3, (), one_rank)
    assert env["EXPERIMENT_NAME"] == quickstart.experiment_name(method, tmp_path, 2, 3, overrides, one_rank) != plain
    # a rerun with other overrides, or on another number of ranks, does not reuse this run's checkpoint
    other_lr = quickstart.experiment_name(method, tmp_path, 2, 3, ("actor_rollout_ref.actor.optim.lr=2e-5",), one_rank)
    assert other_lr not in (plain, env["EXPERIMENT_NAME"])
    assert (
        quickstart.experiment_name(method, tmp_path, 2, 3, overrides, {"GPUS_PER_NODE": "2"}) != env["EXPERIMENT_NAME"]
    )


def test_a_run_is_named_by_its_composed_config(tmp_path, monkeypatch):
    """The name's digest is that of the composed config (dfpo.launch.run_identity) and the task's version:
    what changes a composed value renames the run, what does not leaves the name alone."""
    import shutil

    from dfpo.launch import run_identity

    method = quickstart.METHODS[0]
    name = quickstart.experiment_name(method, tmp_path, 10, 1)
    assert (
        name.startswith("quickstart-dfpo_min_replace-10steps-seed1-")
        and quickstart.experiment_name(method, tmp_path, 10, 1) == name
    )
    # a knob exported in the caller's environment reaches the recipe, so it renames the run
    monkeypatch.setenv("LR", "2e-3")
    assert quickstart.experiment_name(method, tmp_path, 10, 1) != name
    monkeypatch.delenv("LR")
    # where the run writes does not: an output root copied or moved elsewhere keeps its runs' names
    assert quickstart.experiment_name(method, tmp_path / "copied" / "elsewhere", 10, 1) == name
    # an environment variable the composed config does not show (Ray's log deduplication) does not
    assert quickstart.experiment_name(method, tmp_path, 10, 1, knobs={"RAY_DEDUP_LOGS": "1"}) == name
    # another version of the task, or of the method's config file: another name (no stale checkpoint reused)
    monkeypatch.setattr(quickstart, "task_digest", lambda: "another-task")
    assert quickstart.experiment_name(method, tmp_path, 10, 1) != name
    monkeypatch.undo()
    config = tmp_path / "config"
    shutil.copytree(run_identity.CONFIG_DIR, config)
    method_file = config / "method" / "dfpo_min_replace.yaml"
    method_file.write_text(method_file.read_text().replace("dfpo_scope: all", "dfpo_scope: shared_prefix"))
    monkeypatch.setattr(run_identity, "CONFIG_DIR", config)
    assert quickstart.experiment_name(method, tmp_path, 10, 1) != name


def test_the_digest_leaves_out_only_the_runs_name_and_launch_time():
    from dfpo.launch.run_identity import config_digest

    launch = [
        "trainer.experiment_name='run-a'",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='/o/run-a.20261205T101010Z.jsonl'",
    ]
    again = [
        "trainer.experiment_name='run-b'",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='/o/run-b.20261206T090000Z.jsonl'",
    ]
    assert config_digest(launch, "run-a") == config_digest(again, "run-b")
    assert config_digest(launch, "run-a") != config_digest([*launch, "data.seed=2"], "run-a")
    assert config_digest(launch, "run-a") != config_digest(launch, "run-a", extra=("task-v2",))
    # the output root, given, is taken out of every override; not given, it is part of them
    here = ["actor_rollout_ref.model.path=/out/a/models/m", "trainer.default_local_dir=/out/a/checkpoints"]
    there = [o.replace("/out/a", "/data/b") for o in here]
    assert config_digest(here, "run-a", output_root="/out/a") == config_digest(there, "run-a", output_root="/data/b/")
    assert config_digest(here, "run-a") != config_digest(there, "run-a")
    assert config_digest(here, "run-a", output_root="/out/a") != config_digest(
        [*here, "data.seed=2"], "run-a", output_root="/out/a"
    )


def test_defaults_are_dfpo_alone_one_rank_and_k_8(monkeypatch):
    seen = {}
    monkeypatch.setattr(quickstart, "run", lambda *args: seen.setdefault("args", args) and {})
    assert quickstart.main(["--output-root", "/tmp/unused-quickstart", "--override", "a=1", "--override", "b=2"]) == 0
    _, steps, ranks, k, seed, _, overrides, methods = seen["args"]
    assert (steps, ranks, k, seed, overrides) == (quickstart.DEFAULT_STEPS, 1, 8, 1, ("a=1", "b=2"))
    assert [m.recipe_method for m in methods] == ["dfpo_min_replace"]  # the README's command trains DFPO alone
    with pytest.raises(SystemExit):
        quickstart.main(["--ranks", "0"])


def test_methods_selects_the_runs_and_the_report_baseline(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(quickstart, "run", lambda *args: seen.setdefault("args", args) and {})
    assert quickstart.main(["--output-root", str(tmp_path), "--methods", "dfpo_min_replace", "gspo"]) == 0
    assert [m.recipe_method for m in seen["args"][-1]] == ["dfpo_min_replace", "gspo"]
    seen.clear()
    assert quickstart.main(["--output-root", str(tmp_path), "--methods", "gspo"]) == 0
    assert [m.recipe_method for m in seen["args"][-1]] == ["gspo"]
    with pytest.raises(SystemExit):
        quickstart.main(["--methods", "grpo"])
    # without GSPO the report's baseline is the start; with it, GSPO (the paper's)
    runs = tmp_path / "runs.yaml"
    quickstart.write_runs_file(runs, {quickstart.START: tmp_path / "a", "DFPO (Min-Replace)": tmp_path / "b"}, {}, 1)
    assert runs.read_text().startswith(f"baseline: {quickstart.START}\n")
    quickstart.write_runs_file(runs, {quickstart.START: tmp_path / "a", "GSPO": tmp_path / "c"}, {}, 1)
    assert runs.read_text().startswith("baseline: GSPO\n")


def test_the_held_out_evaluation_is_verls_validation_at_the_evaluation_settings():
    """k samples per problem at temperature 0.6, no top-p/top-k cut (the report's sampling record
    says the same); the start is validated by the first run only."""
    knobs = quickstart.validation_knobs(8, validate_start=True)
    assert knobs == {
        "VAL_N": "8",
        "VAL_TEMPERATURE": "0.6",
        "VAL_TOP_P": "1.0",
        "VAL_TOP_K": "-1",
        "VAL_BEFORE_TRAIN": "true",
    }
    assert quickstart.validation_knobs(8, validate_start=False)["VAL_BEFORE_TRAIN"] == "false"
    sampling = quickstart.EVAL_SAMPLING
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_new_tokens) == (
        0.6,
        1.0,
        None,
        quickstart.MAX_NEW_TOKENS,
    )
    from omegaconf import OmegaConf

    recipe = OmegaConf.load(quickstart.REPO_ROOT / "dfpo" / "config" / "base_model" / "smollm2_135m_cpu.yaml")
    assert recipe.data.max_response_length == quickstart.MAX_NEW_TOKENS


def test_adding_gspo_in_the_output_root_of_the_default_run_reuses_dfpos_run(tmp_path, monkeypatch):
    """``--methods dfpo_min_replace gspo`` after the README's command: DFPO's run has the name the
    default run gave it (same knobs, the start validated by it), so its checkpoint is reused and
    only GSPO trains; GSPO does not validate the start again."""
    launches = []

    def fake_run_logged(command, log, env=None, on_poll=None):
        launches.append(env)
        on_poll.seen.update(range(1, int(env["TOTAL_TRAINING_STEPS"]) + 1))
        raise quickstart.StageFailed("stop after the launch")

    monkeypatch.setattr(quickstart, "run_logged", fake_run_logged)
    monkeypatch.setattr(
        quickstart, "prepare_pretrained", lambda root, log: (tmp_path / "model", None, tmp_path / "test.parquet")
    )
    precision = quickstart.Precision.resolve("fp32", "float32")
    with pytest.raises(quickstart.StageFailed):
        quickstart.run(tmp_path, 10, 1, 8, 1, precision)  # the default: DFPO alone
    (default_dfpo,) = launches
    both = tuple(quickstart.METHODS)
    with pytest.raises(quickstart.StageFailed):
        quickstart.run(tmp_path, 10, 1, 8, 1, precision, (), both)
    assert (
        launches[1]["EXPERIMENT_NAME"] == default_dfpo["EXPERIMENT_NAME"] and default_dfpo["VAL_BEFORE_TRAIN"] == "true"
    )
    # the default run finished: its final checkpoint is there, so only GSPO launches
    checkpoints = tmp_path / "checkpoints" / "dfpo" / default_dfpo["EXPERIMENT_NAME"]
    checkpoints.mkdir(parents=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("10")
    with pytest.raises(quickstart.StageFailed):
        quickstart.run(tmp_path, 10, 1, 8, 1, precision, (), both)
    assert launches[2]["EXPERIMENT_NAME"].startswith("quickstart-gspo-") and launches[2]["VAL_BEFORE_TRAIN"] == "false"
    assert len(launches) == 3
