"""The recipes' launch as a user meets it: the one-line run scripts, recipes/common.sh and
``python -m dfpo.launch.recipe`` (syntax, knobs, errors, the real run path), and a new method or model as
one config file.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dfpo.launch.methods import load_method, method_names
from dfpo.launch.preflight import PreflightError
from tests.recipes.recipe_commands import (
    RECIPES_DIR,
    REPO_ROOT,
    TEST_HOME,
    dry_run,
    launch_of,
    parse_commands,
    preflight_says,
    recipe_env,
    run_recipe,
)
from tests.recipes.recipe_expectations import GPU_RUN_SCRIPTS, METHODS

ALL_SHELL_FILES = sorted(p.relative_to(REPO_ROOT).as_posix() for p in RECIPES_DIR.rglob("*.sh"))
RUN_SCRIPTS = sorted(GPU_RUN_SCRIPTS)
SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"


@pytest.mark.parametrize("path", ALL_SHELL_FILES)
def test_shell_file_parses(path):
    result = subprocess.run(["bash", "-n", path], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", ALL_SHELL_FILES)
def test_no_cluster_specifics_or_ignored_keys_in_recipes(path):
    code = [
        line
        for line in (REPO_ROOT / path).read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    text = "\n".join(code)
    for forbidden in ("conda activate", "#SBATCH", "API_KEY", "/mnt/", "/cpfs", "/nas/", "hdfs://"):
        assert forbidden not in text, f"{path} hard-codes {forbidden!r}"
    # verl 0.9.1 ignores these top-level keys; ours are under `reward.`
    legacy = re.compile(r"(^|[\s\"'(+])(custom_reward_function|reward_model|sandbox_fusion)\.")
    assert not legacy.search(text), f"{path} uses a top-level reward key verl 0.9.1 ignores"


@pytest.mark.parametrize("script", RUN_SCRIPTS + ["sweep_group_size_qwen3_32b.sh"])
def test_missing_model_path_stops_with_a_clear_message(script):
    result = run_recipe(script, env=recipe_env(MODEL_PATH=None))
    assert result.returncode != 0
    assert result.stdout == ""
    assert "MODEL_PATH is not set" in result.stderr and f"recipes/{script}" in result.stderr
    model = launch_of(script)[1] if launch_of(script) else "qwen3_32b"  # the sweep runs Qwen3-32B
    model_id = OmegaConf.load(REPO_ROOT / "dfpo" / "config" / "base_model" / f"{model}.yaml").dfpo.model_id
    assert f"base_model={model} trains {model_id}." in result.stderr  # the model the run needs, by its id


def test_every_method_file_is_known_to_the_tests():
    assert method_names() == tuple(sorted(METHODS))
    for name, expected in METHODS.items():
        selection = load_method(name)
        assert (selection.adv_estimator, selection.loss_mode, selection.loss_agg_mode) == (
            expected.adv_estimator,
            expected.loss_mode,
            expected.loss_agg_mode,
        )


@pytest.fixture
def config_copy(tmp_path, monkeypatch):
    """A copy of dfpo/config that the launcher reads instead (a file added there is all it knows)."""
    import shutil

    import dfpo.launch.recipe

    config = tmp_path / "config"
    shutil.copytree(REPO_ROOT / "dfpo" / "config", config)
    monkeypatch.setattr(dfpo.launch.recipe, "CONFIG_DIR", config)
    return config


def _compose_in(config_dir, overrides):
    from hydra import compose, initialize_config_dir

    from dfpo.launch.driver_setup import resolve
    from tests.recipes.recipe_commands import recipe_home

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose("dfpo_trainer", overrides=overrides)
    with recipe_home():
        resolve(cfg)
    return cfg


def test_a_new_method_is_one_file(config_copy):
    """A method file added to dfpo/config/method/ is all the launcher and dfpo.main need: the
    launcher accepts its name and selects it, and the config composes with its values."""
    from dfpo.launch.recipe import recipe_command

    (config_copy / "method" / "dfpo_orth_proj_prefix.yaml").write_text(
        "# @package _global_\n"
        "dfpo:\n  method: dfpo_orth_proj_prefix\n"
        "algorithm:\n  adv_estimator: dfpo\n"
        "actor_rollout_ref:\n  actor:\n    loss_agg_mode: seq-mean-token-mean\n"
        "    policy_loss:\n      loss_mode: dfpo\n      dfpo_transform: orth_proj\n      dfpo_scope: shared_prefix\n"
    )
    command = recipe_command("dfpo_orth_proj_prefix", "qwen3_32b", [], recipe_env())
    assert "method=dfpo_orth_proj_prefix" in command
    cfg = _compose_in(config_copy, command[3:])
    options = cfg.actor_rollout_ref.actor.policy_loss
    assert (cfg.dfpo.method, options.dfpo_transform, options.dfpo_scope) == (
        "dfpo_orth_proj_prefix",
        "orth_proj",
        "shared_prefix",
    )
    assert cfg.trainer.experiment_name == "dfpo_orth_proj_prefix-qwen3_32b-g8-seed1"


NEW_MODEL = """# @package _global_
defaults:
  - /recipe_defaults
  - _self_
dfpo:
  model: llama3_8b
  model_id: meta-llama/Meta-Llama-3-8B
trainer:
  nnodes: 2
data:
  max_response_length: 8192
actor_rollout_ref:
  model:
    use_remove_padding: true
  actor:
    ulysses_sequence_parallel_size: 2
    ppo_max_token_len_per_gpu: ${dfpo_tokens_per_gpu:3}
  rollout:
    tensor_model_parallel_size: 2
    log_prob_max_token_len_per_gpu: ${dfpo_tokens_per_gpu:6}
"""


def test_a_new_model_is_one_file(config_copy, monkeypatch):
    """A model file added to dfpo/config/base_model/ is all the launcher and dfpo.main need: the
    launcher accepts it, the config composes with its values and the recipes' defaults, its token
    budgets follow its lengths and any knob, and dfpo.main's memory plan is made for it once
    dfpo/launch/model_anatomy.py knows its published config (and says there is none before)."""
    from dfpo.launch import memory_plan
    from dfpo.launch.preflight import memory_plan_report
    from dfpo.launch.recipe import recipe_command

    (config_copy / "base_model" / "llama3_8b.yaml").write_text(NEW_MODEL)
    command = recipe_command("gspo", "llama3_8b", [], recipe_env(MAX_RESPONSE_LENGTH="6144"))
    assert command[3:5] == ["method=gspo", "base_model=llama3_8b"]
    cfg = _compose_in(config_copy, command[3:])
    assert (cfg.trainer.nnodes, cfg.data.max_response_length, cfg.actor_rollout_ref.rollout.n) == (2, 6144, 8)
    assert cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 3 * (2048 + 6144) // 2
    assert cfg.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu == 6 * (2048 + 6144) // 2
    assert cfg.trainer.experiment_name == "gspo-llama3_8b-g8-seed1"
    assert cfg.dfpo.model_id == "meta-llama/Meta-Llama-3-8B"  # what a missing checkpoint's message names
    assert "no memory plan" in memory_plan_report(cfg, environ={})
    llama3_8b = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32}
    llama3_8b |= {"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
    monkeypatch.setitem(memory_plan.KNOWN_MODELS, "llama3_8b", llama3_8b)
    plan = memory_plan_report(cfg, environ={})
    assert "llama3_8b" in plan and "no memory plan" not in plan


def _launch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", 'source recipes/common.sh; dfpo_launch "$@"', "recipe", *args],
        cwd=REPO_ROOT,
        env=env or recipe_env(),
        capture_output=True,
        text=True,
    )


def test_unknown_method_lists_the_valid_ones():
    result = _launch("grpo_typo", "qwen3_32b")
    assert result.returncode != 0
    assert "unknown method 'grpo_typo'" in result.stderr
    for method in METHODS:
        assert method in result.stderr


def test_unknown_model_lists_the_valid_ones():
    result = _launch("gspo", "qwen3_23b")
    assert result.returncode != 0
    assert (
        "unknown model 'qwen3_23b'" in result.stderr
        and "qwen3_32b" in result.stderr
        and "dfpo/config/base_model" in result.stderr
    )
    usage = _launch("gspo")
    assert usage.returncode == 2 and "usage: python -m dfpo.launch.recipe METHOD MODEL" in usage.stderr


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"GROUP_SIZE": "0"}, "GROUP_SIZE must be a positive integer, got '0'"),
        ({"SEED": "one"}, "SEED must be a positive integer, got 'one'"),
        ({"DRY_RUN": "maybe"}, "expected a boolean"),
        ({"MODEL_PATH": "/models/it's"}, "contains a quote or a backslash"),
        ({"TRAIN_FILES": ","}, "empty file list"),
        # knobs that cannot act are refused rather than silently ignored
        ({"KL_LOSS_COEF": "0.01"}, "KL_LOSS_COEF=0.01 has no effect without USE_KL_LOSS=true"),
        ({"ROLLOUT_IS_THRESHOLD": "3"}, "ROLLOUT_IS_THRESHOLD=3 has no effect without ROLLOUT_IS"),
    ],
)
def test_bad_knobs_fail_before_anything_runs(variables, message):
    result = run_recipe(SCRIPT, env=recipe_env(**variables))
    assert result.returncode != 0 and result.stdout == ""
    assert message in result.stderr


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"TRAIN_BATCH_SIZE": "100"},
            "data.train_batch_size=100 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=32",
        ),
        (
            {"PPO_MAX_TOKEN_LEN_PER_GPU": "4096"},
            "token budget too small: actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        ),
        (
            {"LOG_PROB_MAX_TOKEN_LEN_PER_GPU": "4096"},
            "token budget too small: actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096",
        ),
    ],
)
def test_impossible_batches_stop_before_ray(variables, message):
    """dfpo.main's preflight on the recipe's config (dfpo/launch/preflight.py), naming the key and the knob."""
    with pytest.raises(PreflightError, match=re.escape(message)):
        preflight_says(SCRIPT, **variables)
    assert preflight_says(SCRIPT, TRAIN_BATCH_SIZE="96", PPO_MAX_TOKEN_LEN_PER_GPU="8704")  # the plan is said


def test_variables_and_extra_overrides_reach_the_config():
    # an exported variable beats the model file; an extra override comes last and wins
    (command,) = dry_run(
        SCRIPT,
        "trainer.total_training_steps=7",
        "actor_rollout_ref.actor.optim.lr=3e-7",
        GROUP_SIZE="4",
        MAX_RESPONSE_LENGTH="16384",
        SEED="3",
        NNODES="2",
        DATA_DIR="~/elsewhere",
    )
    assert command.overrides[-2:] == ["trainer.total_training_steps=7", "actor_rollout_ref.actor.optim.lr=3e-7"]
    cfg = command.config
    assert cfg.trainer.total_training_steps == 7 and cfg.actor_rollout_ref.actor.optim.lr == 3e-7
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.data.max_response_length == 16384
    assert cfg.trainer.nnodes == 2
    assert cfg.data.seed == 3 and cfg.actor_rollout_ref.rollout.seed == 3
    assert cfg.trainer.experiment_name == "dfpo_min_replace-qwen3_32b-g4-seed3"
    assert cfg.data.train_files[0] == f"{TEST_HOME}/elsewhere/math_train.parquet"
    # the model file derives the token budgets from the lengths it was given: 2 (train) and 4
    # (log-prob) sequences of 2048 + 16384 tokens over SP_SIZE=4 GPUs
    assert cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 2 * (2048 + 16384) // 4
    assert cfg.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu == 4 * (2048 + 16384) // 4


def test_the_printed_line_run_verbatim_is_what_dfpo_main_composes():
    """DRY_RUN's line, executed by bash as printed (plus Hydra's ``--cfg job``, which prints the
    config instead of training; ``--resolve`` with dfpo's resolvers), reaches the real entry point
    with every tricky path intact."""
    model = "/models/my copy, v2=final/gpt-oss-120b-bf16"
    data = "/data/run [1]/dfpo"
    env = recipe_env(MODEL_PATH=model, DATA_DIR=data, PYTHON=sys.executable)
    line = run_recipe("run_grpo_fix_gpt_oss_120b.sh", env=env).stdout.strip()
    assert line.startswith(shlex.quote(sys.executable) + " -m dfpo.main ")
    result = subprocess.run(
        ["bash", "-c", line + " --cfg job --resolve"],
        cwd=REPO_ROOT,
        env={**env, "HYDRA_FULL_ERROR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cfg = OmegaConf.create(result.stdout)
    assert cfg.actor_rollout_ref.model.path == model
    assert list(cfg.data.val_files) == [f"{data}/{name}.parquet" for name in ("aime25", "hmmt25", "lcb_v6")]
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "cispo"
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "flex_attention"
    assert cfg.trainer.experiment_name == "grpo_fix-gpt_oss_120b-g8-seed1"


def test_dry_run_prints_the_command_only():
    """DRY_RUN=1 prints one line and checks no file: the files are dfpo.main's to check (below)."""
    result = run_recipe(SCRIPT)
    assert result.returncode == 0 and result.stderr == ""
    assert len(parse_commands(result.stdout)) == 1


# ---- the real (non-dry) path, with a stand-in interpreter -----------------------------------------

FAKE_PYTHON = f"""#!/usr/bin/env bash
# stands in for python3: the install check (-c) succeeds, the launcher (-m dfpo.launch.recipe) is the real
# one, and the driver (-m dfpo.main ...) records its arguments
if [[ "$1" == -c ]]; then exit "${{FAKE_IMPORT_STATUS:-0}}"; fi
if [[ "$1 $2" == "-m dfpo.launch.recipe" ]]; then exec {sys.executable} "$@"; fi
printf '%s\\n' "$@" > "$FAKE_ARGS"
echo "step:1 - critic/score/mean:0.5"
exit "${{FAKE_EXIT_STATUS:-0}}"
"""


@pytest.fixture
def run_setup(tmp_path):
    """A model directory, the five prepared data files and a fake interpreter."""
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    for name in ("math_train", "code_train", "aime25", "hmmt25", "lcb_v6"):
        (data / f"{name}.parquet").write_bytes(b"")
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = recipe_env(
        DRY_RUN=None,
        MODEL_PATH=str(model),
        DATA_DIR=str(data),
        PYTHON=str(python),
        OUTPUT_ROOT=str(tmp_path / "runs"),
        FAKE_ARGS=str(tmp_path / "args.txt"),
        NNODES="1",  # one node: a node-local OUTPUT_ROOT is fine (test_launch_multi_node.py: several)
    )
    return tmp_path, env


def test_a_real_launch_runs_the_printed_command(run_setup):
    tmp_path, env = run_setup
    result = run_recipe(SCRIPT, "trainer.save_freq=5", env=env)
    assert result.returncode == 0, result.stderr
    ran = (tmp_path / "args.txt").read_text().splitlines()
    assert ran[:2] == ["-m", "dfpo.main"]
    printed = dry_run(SCRIPT, "trainer.save_freq=5", **{k: v for k, v in env.items() if k != "PATH"})
    assert ran[2:] == printed[0].overrides


def test_the_driver_appends_its_output_to_the_console_log(tmp_path):
    """dfpo.main tees its own output, and its children's, to ``dfpo.console_log`` (a resumed run's
    second launch appends): what the recipes' console log holds."""
    log = tmp_path / "logs" / "run.console.log"
    code = (
        "import subprocess, sys; from dfpo.launch.driver_setup import tee_console; tee_console(sys.argv[1]); "
        "print('driver line', flush=True); subprocess.run(['echo', 'child line']); print('to stderr', file=sys.stderr)"
    )
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "driver line" in done.stdout  # still on the console too
    text = log.read_text()
    assert (text.count("driver line"), text.count("child line"), text.count("to stderr")) == (2, 2, 2)


def test_a_failing_training_run_fails_the_recipe(run_setup):
    _, env = run_setup
    result = run_recipe(SCRIPT, env={**env, "FAKE_EXIT_STATUS": "3"})
    assert result.returncode == 3


def test_an_uninstalled_project_is_reported_before_launch(run_setup):
    tmp_path, env = run_setup
    result = run_recipe(SCRIPT, env={**env, "FAKE_IMPORT_STATUS": "1"})
    assert result.returncode != 0 and "pip install -e" in result.stderr
    assert not (tmp_path / "args.txt").exists()


@pytest.mark.parametrize(("flags", "installed"), [((), True), (("-S",), False)])
def test_the_install_check_finds_the_project_without_importing_verl(flags, installed):
    """The launcher's check, run by this interpreter: it passes here, where the project is installed,
    and fails without site-packages (-S: neither the project nor verl is found); it never imports verl
    (10-20 s on 2 cores)."""
    check = subprocess.run(
        [
            "bash",
            "-c",
            f'source recipes/common.sh && "$0" {" ".join(flags)} -c "$DFPO_INSTALL_CHECK" && "$0" -c "import '
            "atexit, sys; atexit.register(lambda: print('verl' in sys.modules)); $DFPO_INSTALL_CHECK\"",
            sys.executable,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert (check.returncode == 0) is installed, check.stderr
    if installed:
        assert check.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        (
            "model",
            "MODEL_PATH {model} does not exist (the recipe's actor_rollout_ref.model.path): base_model=qwen3_32b "
            "trains Qwen/Qwen3-32B: set MODEL_PATH=/path/to/Qwen3-32B",
        ),
        (
            "data",
            "data.val_files: {data}/hmmt25.parquet does not exist: prepare it with data_prep (docs/data.md), or "
            "point the run at the files: dfpo.data_dir=DIR or data.val_files=[...] for python -m dfpo.main, "
            "DATA_DIR=DIR or VAL_FILES=... for the recipe scripts",
        ),
    ],
)
def test_a_launch_checks_its_files_before_ray(run_setup, missing, message):
    """dfpo.main's preflight (every path) names a missing checkpoint or data file and what to do: on the
    recipes' path (the launcher hands the driver its environment, MODEL_PATH included) the model the
    base model file trains and the MODEL_PATH knob."""
    from dfpo.launch.preflight import check_input_files

    _, env = run_setup
    model, data = Path(env["MODEL_PATH"]), Path(env["DATA_DIR"])
    (command,) = dry_run(SCRIPT, MODEL_PATH=str(model), DATA_DIR=str(data))
    check_input_files(command.config)  # everything there: passes
    if missing == "model":
        model.rmdir()
    else:
        (data / "hmmt25.parquet").unlink()
    with pytest.raises(PreflightError, match=re.escape(message.format(model=model, data=data))):
        check_input_files(command.config, environ=env)


def test_the_recipe_becomes_the_driver_so_sigterm_reaches_it_and_its_status_is_the_recipes(tmp_path):
    """dfpo_launch execs python -m dfpo.main: a scheduler's SIGTERM to the recipe's process is the
    driver's (dfpo.operations.preemption), and the recipe exits with the driver's status (75 after a clean
    stop). A stand-in interpreter plays the driver; every other python call is the real one."""
    import os
    import signal
    import time

    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [[ "$1" == -m && "$2" == dfpo.main ]]; then\n'
        "  trap 'echo \"driver got TERM\"; exit 75' TERM\n"
        '  echo "driver up $$"\n'
        "  while true; do sleep 0.1; done\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    model, data = tmp_path / "model", tmp_path / "data.parquet"
    model.mkdir()
    data.write_bytes(b"")
    env = recipe_env(
        DRY_RUN="0",
        NNODES="1",
        PYTHON=str(fake),
        MODEL_PATH=str(model),
        TRAIN_FILES=str(data),
        VAL_FILES=str(data),
        OUTPUT_ROOT=str(tmp_path / "out"),
    )
    recipe = subprocess.Popen(
        ["bash", str(RECIPES_DIR / SCRIPT)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 60
        while not any(line.startswith("driver up") for line in lines) and time.monotonic() < deadline:
            lines.append(recipe.stdout.readline())
        (up,) = [line for line in lines if line.startswith("driver up")]
        assert int(up.split()[2]) == recipe.pid, (
            f"the driver is not the recipe's process: {up!r}, recipe pid {recipe.pid}"
        )
        os.kill(recipe.pid, signal.SIGTERM)
        rest = recipe.communicate(timeout=30)[0]
    finally:
        recipe.kill()
    assert recipe.returncode == 75, "".join(lines) + rest
    assert "driver got TERM" in rest


def test_a_hub_id_as_the_model_is_verls_to_fetch_a_missing_local_path_is_not(run_setup):
    """The README's direct example names the model by its hub id: preflight leaves it to verl."""
    from dfpo.launch.preflight import check_input_files

    _, env = run_setup
    (hub,) = dry_run(SCRIPT, MODEL_PATH="Qwen/Qwen3-32B", DATA_DIR=env["DATA_DIR"])
    check_input_files(hub.config)
    local_path = "/nonexistent/Qwen/Qwen3-32B"
    (local,) = dry_run(SCRIPT, MODEL_PATH=local_path, DATA_DIR=env["DATA_DIR"])
    with pytest.raises(PreflightError, match=re.escape(f"MODEL_PATH {local_path} does not exist")):
        check_input_files(local.config, environ={"MODEL_PATH": local_path})


def test_a_knob_of_another_model_is_not_passed_and_said(capsys):
    from dfpo.launch.recipe import recipe_overrides

    said: list[str] = []
    qwen = recipe_overrides(
        "gspo", "qwen3_32b", recipe_env(GPT_OSS_REASONING_EFFORT="low", ACTOR_DTYPE="bf16"), say=said.append
    )
    assert not any("reasoning_effort" in o or "actor_dtype" in o for o in qwen)
    assert (
        len(said) == 2
        and "GPT_OSS_REASONING_EFFORT=low not passed" in said[0]
        and "ACTOR_DTYPE=bf16 not passed" in said[1]
    )
    gpt_oss = recipe_overrides("gspo", "gpt_oss_120b", recipe_env(GPT_OSS_REASONING_EFFORT="low"), say=said.append)
    assert "data.apply_chat_template_kwargs.reasoning_effort=low" in gpt_oss


def test_a_cpu_rollout_other_than_vllm_or_local_is_refused():
    result = run_recipe("run_gspo_tiny_cpu.sh", env=recipe_env(ROLLOUT_NAME="sglang"))
    assert result.returncode != 0 and "ROLLOUT_NAME on CPU must be vllm or local, got 'sglang'" in result.stderr


def test_lr_warmup_steps_takes_verls_minus_one():
    """-1 is verl's own default: the warm-up then follows optim.lr_warmup_steps_ratio."""
    (command,) = dry_run(SCRIPT, LR_WARMUP_STEPS="-1")
    assert command.config.actor_rollout_ref.actor.optim.lr_warmup_steps == -1
    assert run_recipe(SCRIPT, env=recipe_env(LR_WARMUP_STEPS="ten")).returncode != 0
