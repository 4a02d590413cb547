"""scripts/gpu_smoke.sh: its GPU mode with stand-ins for the GPU-only steps, and its CPU mode
(``--cpu``) for real.

The stand-in interpreter answers ``-m dfpo.launch.doctor`` (and ``-m dfpo.launch.sink_attention_check``
when ``FAKE_SINK_STATUS`` is set; otherwise it runs for real: SKIP here, without CUDA), ``-m
dfpo.main`` (it writes the file log and checkpoint a 2-step run leaves, from the overrides the
recipe really passed), ``-m verl.model_merger`` and ``-m evaluation.generate``; everything else — the toy data through
data_prep, ``python -m dfpo.operations.run_checks`` on the log, the recipe and its launcher — runs for real.
The GPU mode's 2-step training launch also runs, with those exact arguments, through the real
``python -m dfpo.main`` as far as a machine without a GPU lets it: to the NCCL process group.
The last test runs ``bash scripts/gpu_smoke.sh --cpu`` with nothing stood in: the doctor, the
tiny model and data, 2 DFPO steps and a bypass-mode step through verl's vLLM rollout on vLLM's
CPU build, verl.model_merger and the vLLM evaluation backend on CPU (6-9 minutes on 2 cores).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from dfpo.operations.run_checks import check_run
from dfpo.operations.training_logs import read_file_log
from evaluation.run_store import read_manifest, read_samples
from tests.recipes.recipe_commands import REPO_ROOT

STAGES = ("environment", "toy data", "train DFPO 2 steps", "bypass mode", "merge", "evaluate 2 problems")

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_CALLS"
case "$1 $2" in
    "-c import importlib.metadata"*) exit 0 ;;  # the launcher's install check (tested in test_recipes_launcher.py)
    "-m dfpo.launch.doctor") echo "[  ok] stand-in doctor"; exit "${FAKE_DOCTOR_STATUS:-0}" ;;
    "-m dfpo.launch.sink_attention_check") [[ -z "${FAKE_SINK_STATUS:-}" ]] || exit "$FAKE_SINK_STATUS" ;;  # else real
    "-m dfpo.main") exec "$REAL_PYTHON" "$FAKE_MAIN" "${@:3}" ;;
    "-m verl.model_merger") mkdir -p "${@: -1}" && echo '{}' > "${@: -1}/config.json"; exit 0 ;;
    "-m evaluation.generate")
        while [[ $# -gt 0 && "$1" != --output-dir ]]; do shift; done
        mkdir -p "$2" && echo '{}' > "$2/summary.json"; exit "${FAKE_EVAL_STATUS:-0}" ;;
esac
exec "$REAL_PYTHON" "$@"
"""

# What verl's trainer leaves after TOTAL_TRAINING_STEPS steps: the file log at VERL_FILE_LOGGER_PATH
# (with the DFPO worker's metrics) and the last checkpoint under trainer.default_local_dir, both from
# the config dfpo.main composes and resolves from the launch's arguments.
FAKE_MAIN = """
import json, os, sys
from dfpo.launch.driver_setup import resolve
from dfpo.launch.compose import compose_trainer_config
with open(os.environ["FAKE_MAIN_ARGV"], "a") as record:  # each launch's exact argument list
    record.write(json.dumps(sys.argv[1:]) + "\\n")
cfg = compose_trainer_config(sys.argv[1:], config_name="dfpo_trainer")  # what dfpo.main would run
resolve(cfg)
steps = int(cfg.trainer.total_training_steps)
bypass = bool(cfg.algorithm.rollout_correction.get("bypass_mode"))
gap = 1e-4 if cfg.trainer.device == "cpu" else 0.1  # fp32 on CPU, bf16 on GPUs
log_path = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
os.makedirs(os.path.dirname(log_path), exist_ok=True)
with open(log_path, "w") as log:
    for step in range(1, steps + 1):
        data = {"critic/score/mean": 0.25, "actor/grad_norm": 0.5, "actor/dfpo/shared_token_grad_residual": 3e-8,
                "actor/dfpo/shared_token_grad_eps": 1.1920928955078125e-07,
                "actor/dfpo/old_log_probs_recomputed": 0.0 if bypass else 1.0}
        if not bypass:  # as verl: in bypass mode the actor recomputes nothing, so there is no gap to log
            data["training/rollout_probs_diff_max"] = gap
            data["rollout_corr/kl"] = gap / 100  # synced: each step's rollout-vs-actor KL is the numerics' alone
        if cfg.actor_rollout_ref.actor.policy_loss.get("dfpo_measure_update_kl"):
            data["actor/dfpo/update_kl"] = 0.3  # two Adam steps at the smoke's LR
        log.write(json.dumps({"step": step, "data": data}) + "\\n")
os.makedirs(os.path.join(cfg.trainer.default_local_dir, f"global_step_{steps}", "actor"))
"""


def _smoke(tmp_path):
    """gpu_smoke.sh with stand-ins for python3 (the doctor, dfpo.main, the evaluation) under
    ``tmp_path``: (tmp_path, run), ``run(*args, **env)`` one invocation."""
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
    model = tmp_path / "Qwen3-0.6B"
    model.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHON": str(python),
        "REAL_PYTHON": sys.executable,
        "FAKE_MAIN": str(tmp_path / "fake_main.py"),
        "FAKE_CALLS": str(tmp_path / "calls.txt"),
        "FAKE_MAIN_ARGV": str(tmp_path / "main_argv.jsonl"),
        "MODEL_PATH": str(model),
        "OUTPUT_ROOT": str(tmp_path / "smoke"),
    }

    def run(*args, **extra):
        return subprocess.run(
            ["bash", "scripts/gpu_smoke.sh", *args],
            cwd=REPO_ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )

    return tmp_path, run


@pytest.fixture
def smoke(tmp_path):
    return _smoke(tmp_path)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """One invocation with the defaults (GPU mode, every stand-in succeeding), shared by the tests
    that only read what it did: (tmp_path, its CompletedProcess)."""
    tmp_path, run = _smoke(tmp_path_factory.mktemp("gpu_smoke"))
    return tmp_path, run()


def test_gpu_smoke_runs_every_stage_and_passes(default_run):
    tmp_path, result = default_run
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = result.stdout.split("gpu_smoke summary", 1)[1]
    for stage in STAGES:
        line = next(line for line in summary.splitlines() if stage in line)
        assert " PASS " in line, line
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0] == "-m dfpo.launch.doctor"  # the GPU stack's checks
    # GPT-OSS's sink attention on CUDA, run for real: skipped with its reason on this machine without CUDA
    assert "-m dfpo.launch.sink_attention_check" in calls
    assert " SKIP " in next(line for line in summary.splitlines() if "GPT-OSS sink attention" in line)
    assert "sink attention check SKIPPED: no CUDA device" in result.stdout
    trains = [c for c in calls if c.startswith("-m dfpo.main")]
    assert len(trains) == 2 and "algorithm.rollout_correction.bypass_mode=true" in trains[1]
    assert (
        "trainer.total_training_steps=2" in trains[0] and "base_model=qwen3_0p6b" in trains[0]
    )  # rollout.name=vllm: the recipes' default
    assert "PASS  old log-probs recomputed" in result.stdout and "PASS  old log-probs rollout" in result.stdout
    # the 2-step run measures each update's KL and is checked for a rollout an update behind
    assert "actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true" in trains[0]
    assert "dfpo_measure_update_kl" not in trains[1]
    assert "actor_rollout_ref.actor.optim.lr=1e-4" in trains[0]  # SMOKE_LR: an update large enough to check the sync
    assert result.stdout.count("PASS  weights reached the rollout") == 1
    evaluate = next(c for c in calls if c.startswith("-m evaluation.generate"))
    assert "--backend vllm" in evaluate and "--limit 2" in evaluate and f"--model {tmp_path}/smoke/merged" in evaluate
    # the real toy data, from data_prep
    assert (tmp_path / "smoke" / "data" / "arithmetic_train.parquet").is_file()


@pytest.mark.slow
def test_gpu_smoke_gpu_mode_commands_compose_in_verl_and_every_key_is_read(default_run):
    """GPU mode as far as it goes without a GPU: both training launches' exact arguments (the GPU
    recipe recipes/run_dfpo_min_replace_qwen3_0p6b.sh with the smoke's SMOKE_LR, update-KL and
    bypass-mode keys) compose in verl 0.9.1's Hydra config with dfpo's, build verl's actor config
    and DFPO's loss config, and set only keys verl reads on the path that runs."""
    from verl.utils.config import omega_conf_to_dataclass

    from dfpo.launch.compose import compose_trainer_config
    from tests.recipes.recipe_commands import keys_set
    from tests.recipes.verl_readers import reader_of, running_reader

    tmp_path, result = default_run
    assert result.returncode == 0
    launches = [json.loads(line) for line in (tmp_path / "main_argv.jsonl").read_text().splitlines()]
    assert len(launches) == 2
    for overrides in launches:
        cfg = compose_trainer_config(overrides, config_name="dfpo_trainer")
        assert cfg.trainer.device == "cuda" and cfg.actor_rollout_ref.rollout.name == "vllm"
        actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        assert actor.policy_loss.loss_mode == "dfpo" and actor.optim.lr == pytest.approx(1e-4)
        for key in keys_set(overrides):
            assert reader_of(key) is not None, (
                f"gpu_smoke sets {key}, which nothing on verl 0.9.1's V1 engine path reads"
            )
            assert running_reader(key, cfg) is not None, (
                f"gpu_smoke sets {key}, read only under a condition that is off"
            )
    update_kl = [
        launch for launch in launches if "actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true" in launch
    ]
    assert (
        len(update_kl) == 1
        and compose_trainer_config(
            update_kl[0], config_name="dfpo_trainer"
        ).actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl
        is True
    )
    bypass = compose_trainer_config(launches[1], config_name="dfpo_trainer")
    assert bypass.algorithm.rollout_correction.bypass_mode is True
    # the bypass step validates nothing (the 2-step stage does, before and after training)
    assert bypass.trainer.val_before_train is False and bypass.trainer.test_freq == -1


# not serial: the launch stops before any training (the CPU-mode run is serial by its fixture: tests/conftest.py)
@pytest.mark.slow
def test_gpu_smoke_gpu_mode_training_launch_runs_for_real_until_cuda_is_needed(default_run):
    """The GPU mode's 2-step training launch, with exactly the arguments gpu_smoke passes (the GPU
    recipe's settings: packing, dynamic batching, fsdp2, vLLM, device cuda), run through the real
    ``python -m dfpo.main`` on this machine without a GPU, Ray given one logical GPU (and CPUs for
    TransferQueue's storage actors): verl's config validation, dfpo's preflight, Ray, DFPO's
    TaskRunner and trainer, the tokenizer and both datasets, the worker group on device ``cuda`` and
    DFPO's worker's ``init_model`` all run, and the launch stops only where CUDA is first needed:
    NCCL's process group. The model is a tiny Qwen3 in Qwen3-0.6B's place (about 90 s on 2 cores)."""
    from cpu_examples.tiny_model import TinyModelSpec, build_char_tokenizer, save_untrained_model
    from tests.e2e.recipe_runs import run_command

    tmp_path, result = default_run
    assert result.returncode == 0
    launch = json.loads((tmp_path / "main_argv.jsonl").read_text().splitlines()[0])
    assert (
        f"actor_rollout_ref.model.path='{tmp_path}/Qwen3-0.6B'" in launch and "base_model=qwen3_0p6b" in launch
    )  # one GPU: the model file's
    save_untrained_model(tmp_path / "Qwen3-0.6B", TinyModelSpec(), build_char_tokenizer())
    logical_gpu = ["+ray_kwargs.ray_init.num_gpus=1", "ray_kwargs.ray_init.num_cpus=16"]
    # the GPU path: no CPU backend (VERL_PLATFORM unset), a Ray instance of its own (RAY_ADDRESS=local:
    # an empty one lets ray.init join a cluster another process started with `ray start`). No node watch
    # (DFPO_NODE_WATCH_S=0): with it, the driver holds verl's Ray error back 30 s to ask Ray's node
    # table whether a node was lost (node_watch.CONFIRM_S) before raising it as it is, a third of
    # this test's time; that path is tests/dfpo/test_node_watch.py's, the real watch the multi-node e2e's
    result = run_command(
        [sys.executable, "-m", "dfpo.main", *launch, *logical_gpu],
        {"VERL_PLATFORM": "", "RAY_ADDRESS": "local", "DFPO_NODE_WATCH_S": "0"},
        timeout_s=600,
    )
    output = result.output
    assert result.returncode != 0, output[-3000:]
    assert "[validate_config] All configuration checks passed successfully!" in output
    assert re.search(
        r"train and validate dataloader initialized, train dataset size: \d+, val dataset size: \d+", output
    ), output[-3000:]
    assert "worker group kwargs: {'device_name': 'cuda'}" in output, output[-3000:]
    assert re.search(r'dfpo/verl/workers\.py", line \d+, in init_model', output), output[-3000:]
    assert "ProcessGroupNCCL is only supported with GPUs, no GPUs found!" in output, output[-3000:]


def test_gpu_smoke_reports_a_failed_stage_and_keeps_going(smoke):
    _, run = smoke
    result = run(FAKE_DOCTOR_STATUS="1", FAKE_EVAL_STATUS="1", FAKE_SINK_STATUS="1")
    assert result.returncode == 1
    summary = result.stdout.split("gpu_smoke summary", 1)[1]
    assert " FAIL " in next(line for line in summary.splitlines() if "GPT-OSS sink attention" in line)
    assert " FAIL " in next(line for line in summary.splitlines() if "environment" in line)
    assert " PASS " in next(line for line in summary.splitlines() if "train DFPO 2 steps" in line)
    assert " FAIL " in next(line for line in summary.splitlines() if "evaluate" in line)


def test_gpu_smoke_needs_a_model(smoke):
    _, run = smoke
    result = run(MODEL_PATH="")
    assert result.returncode != 0 and "MODEL_PATH" in result.stderr and "--cpu" in result.stderr
    wrong = run("--gpu")
    assert wrong.returncode == 2 and "unknown argument '--gpu'" in wrong.stderr


@pytest.mark.slow
def test_gpu_smoke_cpu_mode_passes_the_cpu_recipe_the_vllm_rollout_and_cpu_settings(smoke):
    tmp_path, run = smoke
    result = run("--cpu", MODEL_PATH="", GPUS_PER_NODE="2")  # no model needed: the tiny one is built
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = result.stdout.split("gpu_smoke --cpu summary", 1)[1]
    for stage in STAGES:
        assert " PASS " in next(line for line in summary.splitlines() if stage in line)
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0] == "-m dfpo.launch.doctor --stack cpu"
    assert any(c.startswith("-m cpu_examples.prepare --output-root") for c in calls)  # the tiny model and the data
    # the CPU backend's packed attention against eager on the tiny GPT-OSS, for real
    assert "-m dfpo.launch.sink_attention_check --cpu" in calls
    assert " PASS " in next(line for line in summary.splitlines() if "GPT-OSS sink attention" in line)
    for dtype in ("fp32", "bf16"):  # the exact check, then the recipe's precision
        assert f"GPT-OSS sink attention in {dtype}: dfpo_cpu_varlen (packed row) against fp32 eager on cpu" in (
            result.stdout
        )
    trains = [c for c in calls if c.startswith("-m dfpo.main")]
    assert len(trains) == 2 and "algorithm.rollout_correction.bypass_mode=true" in trains[1]
    assert "trainer.val_before_train=false" in trains[1] and "trainer.test_freq=-1" in trains[1]  # no validation
    model = f"actor_rollout_ref.model.path={tmp_path}/smoke/models/tiny_qwen3_cpu"
    for train, ranks in zip(trains, (2, 1), strict=True):  # the bypass step on one rank whatever GPUS_PER_NODE says
        assert (
            "actor_rollout_ref.rollout.name='vllm'" in train and "base_model=tiny_cpu" in train
        )  # trainer.device=cpu: platform/cpu.yaml
        assert f"trainer.n_gpus_per_node={ranks}" in train and model in train.replace("'", "")
    assert "PASS  rollout log-probs match the actor's (fp32 bound" in result.stdout
    evaluate = next(c for c in calls if c.startswith("-m evaluation.generate"))
    assert "--backend vllm" in evaluate and "--enforce-eager" in evaluate and "--dtype float32" in evaluate
    assert "--gpu-memory-utilization" not in evaluate and f"--model {tmp_path}/smoke/merged" in evaluate
    assert (tmp_path / "smoke" / "models" / "tiny_qwen3_cpu" / "config.json").is_file()


@pytest.mark.slow
def test_gpu_smoke_cpu_mode_runs_every_stage_for_real(cpu_smoke_run):
    """The session's one real run of ``bash scripts/gpu_smoke.sh --cpu`` (tests/conftest.py), on 2
    ranks; tests/e2e/test_trainer_cpu.py reads its training stage too."""
    run, output_root = cpu_smoke_run.run, cpu_smoke_run.output_root
    assert run.returncode == 0, run.tail(150)
    summary = run.output.split("gpu_smoke --cpu summary", 1)[1]
    for stage in STAGES:
        assert " PASS " in next(line for line in summary.splitlines() if stage in line)
    assert "[  ok] vLLM: 0.24.0+cpu on cpu" in run.output  # the doctor saw vLLM's CPU build
    assert "(vLLMHttpServer pid=" in run.output, "training was not served by verl's vLLMHttpServer"
    assert "PASS  old log-probs recomputed" in run.output and "PASS  old log-probs rollout" in run.output
    assert run.output.count("PASS  DFPO gives the shared tokens no net gradient") == 2
    assert "PASS  weights reached the rollout" in run.output  # the 2-step stage's weight-sync check
    assert (output_root / "merged" / "config.json").is_file()
    manifest = read_manifest(output_root / "eval")
    assert manifest["model"] == str((output_root / "merged").resolve())
    backend = manifest["backend"]
    assert (backend["name"], backend["device"], backend["enforce_eager"], backend["dtype"]) == (
        "vllm",
        "cpu",
        True,
        "float32",
    )
    records = read_samples(output_root / "eval")
    assert len(records) == 4 and all(r["reason"] and r["num_tokens"] > 0 for r in records)


def test_run_checks_fail_a_run_that_trained_no_steps_or_skipped_the_recompute(tmp_path):
    log = tmp_path / "run.jsonl"
    data = {
        "critic/score/mean": 0.5,
        "actor/grad_norm": 1.0,
        "actor/dfpo/shared_token_grad_residual": 3e-8,
        "actor/dfpo/shared_token_grad_eps": 1.1920928955078125e-07,
        "actor/dfpo/old_log_probs_recomputed": 0.0,
    }
    log.write_text(json.dumps({"step": 1, "data": data}) + "\n")
    results = dict((text.split(":")[0], ok) for ok, text in check_run(read_file_log(log), 2, True, "recomputed"))
    assert results["steps 1..2 logged (found [1])"] is False
    assert results["old log-probs recomputed"] is False
    assert results["reward computed"] is True and results["DFPO gives the shared tokens no net gradient"] is True
