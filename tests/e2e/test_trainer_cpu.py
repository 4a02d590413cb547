"""The main job end to end: verl's whole trainer through the tiny CPU recipes.

Each run is a user's command — ``bash recipes/run_<method>_tiny_cpu.sh`` with environment knobs —
so everything between the shell and the optimizer step is under test: the launcher, data_prep's
parquet, the tiny model build, ``python -m dfpo.main``, Ray, verl's TaskRunner, TransferQueue,
the agent loop on verl's own vLLM rollout (``vLLMReplica`` / ``vLLMHttpServer`` on vLLM's CPU
build, one replica per rank), ``reward/score.py`` through verl's reward manager, old log-probs,
DFPO's exact update on 2 gloo ranks, verl's weight sync from the actor into vLLM, validation,
checkpoints, and ``python -m dfpo.run_checks`` on the run's log. The reward-fault run uses dfpo's
local rollout server instead (what it tests is the reward path, and the local server starts a
minute faster).

Covered elsewhere, each by one launch to keep CI's budget (a launch costs 2-4 minutes on 2 cores):
resume at the next step (tests/e2e/test_multi_node_cpu.py, 2 ranks on 2 Ray nodes), the GSPO
baseline through the same path on one rank with vLLM (tests/e2e/test_quickstart_cpu.py, on
SmolLM2-135M-Instruct), one rank with vLLM and bypass mode (``scripts/gpu_smoke.sh --cpu``,
tests/recipes/test_gpu_smoke.py).

The runs share one OUTPUT_ROOT, as a user's runs do (the model and data are built once).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from dfpo.run_checks import ROLLOUT_GAP_BOUNDS
from tests.e2e.recipe_runs import REPO_ROOT, file_log_steps, run_recipe

pytestmark = pytest.mark.slow

STEPS = 3
VLLM = {"ROLLOUT_NAME": "vllm"}
# verl's vLLM server announces itself in the driver's output (Ray prefixes each actor's lines)
VLLM_SERVER_MARK = "(vLLMHttpServer pid="
# A whole run on 2 cores takes 1-2 minutes; far beyond that something hangs (the known one:
# verl's TaskRunner waiting forever in TransferQueue's init).
RUN_TIMEOUT_S = 600
DFPO_EXPERIMENT = "dfpo_min_replace-tiny_cpu-g8-seed1"


def _training_steps(steps: dict[int, dict]) -> list[int]:
    return sorted(step for step, metrics in steps.items() if "actor/grad_norm" in metrics)


def _check_exit(run) -> None:
    assert run.returncode == 0, f"recipe exited with {run.returncode}:\n{run.tail()}"


def _check_served_by_vllm(run) -> None:
    assert VLLM_SERVER_MARK in run.output, "the run was not served by verl's vLLMHttpServer:\n" + run.tail()


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    return tmp_path_factory.mktemp("dfpo_runs")


@pytest.fixture(scope="module")
def dfpo_run(output_root):
    run = run_recipe(
        "run_dfpo_min_replace_tiny_cpu.sh",
        {"OUTPUT_ROOT": str(output_root), "TOTAL_TRAINING_STEPS": str(STEPS), "GPUS_PER_NODE": "2", **VLLM},
        timeout_s=RUN_TIMEOUT_S,
    )
    _check_exit(run)
    _check_served_by_vllm(run)
    return run


def _dfpo_log(output_root) -> dict[int, dict]:
    logs = [steps for path, steps in file_log_steps(output_root / "logs" / "dfpo").items() if path.name.startswith(DFPO_EXPERIMENT + ".")]
    assert logs, f"no file log of {DFPO_EXPERIMENT} under {output_root / 'logs' / 'dfpo'}"
    return logs[0]


def test_dfpo_run_logs_every_step_with_learning_signal(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    assert _training_steps(steps) == list(range(1, STEPS + 1))
    first = steps[1]
    # Mixed rewards at step 1: a policy that is always right or always wrong has zero advantages
    # and the update would be a no-op, so the run would pass without testing it.
    assert 0.0 < first["critic/score/mean"] < 1.0
    assert first["actor/grad_norm"] > 0.0 and math.isfinite(first["actor/grad_norm"])


def test_dfpo_run_cancels_the_drift_exactly(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    for step in _training_steps(steps):
        metrics = steps[step]
        assert any(key.startswith("actor/dfpo/") for key in metrics)
        assert metrics["actor/dfpo/cancellation_residual_after"] < 1e-6, step
        # a step whose groups all have equal rewards has nothing to cancel (both residuals 0)
        assert metrics["actor/dfpo/cancellation_residual_before"] >= metrics["actor/dfpo/cancellation_residual_after"], step
    # step 1 has mixed rewards (see above), so GSPO's weights leave a residual the transform removes
    assert steps[1]["actor/dfpo/cancellation_residual_before"] > 1e-4


def test_rollout_log_probs_match_the_actor_after_weight_sync(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    # Step 2 and later roll out with weights synced from the trained actor into vLLM: a sync that
    # did not reach the rollout would show as a log-prob gap of the size of the update. Both sides
    # are float32, so the gap is kernel rounding only (dfpo.run_checks states the bound's basis).
    for step in _training_steps(steps):
        assert steps[step]["training/rollout_probs_diff_max"] < ROLLOUT_GAP_BOUNDS["fp32"], step


def test_validation_runs_before_and_after_training(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    assert any(key.startswith("val-core/") for key in steps[0])
    assert any(key.startswith("val-core/") for key in steps[STEPS])


def test_checkpoint_of_every_rank(dfpo_run, output_root):
    experiment = output_root / "checkpoints" / "dfpo" / DFPO_EXPERIMENT
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    actor = experiment / f"global_step_{STEPS}" / "actor"
    for rank in range(2):
        for kind in ("model", "optim", "extra_state"):
            assert (actor / f"{kind}_world_size_2_rank_{rank}.pt").is_file(), f"{kind} of rank {rank} missing in {actor}"


def test_run_checks_pass_on_the_real_log(dfpo_run, output_root):
    """``python -m dfpo.run_checks`` (what scripts/gpu_smoke.sh runs after its training stage) on the
    file log verl wrote, with the CPU recipes' fp32 bound."""
    (log,) = [path for path in file_log_steps(output_root / "logs" / "dfpo") if path.name.startswith(DFPO_EXPERIMENT + ".")]
    command = [sys.executable, "-m", "dfpo.run_checks", str(log), "--steps", str(STEPS), "--dfpo", "--old-log-probs", "recomputed", "--rollout-numerics", "fp32"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASS  ") == 6 and "FAIL" not in done.stdout, done.stdout


@pytest.fixture(scope="module")
def faulty_reward_run(output_root):
    run = run_recipe(
        "run_dfpo_min_replace_tiny_cpu.sh",
        {
            "OUTPUT_ROOT": str(output_root), "TOTAL_TRAINING_STEPS": "2", "GPUS_PER_NODE": "1",
            "EXPERIMENT_NAME": "faulty-reward", "ROLLOUT_NAME": "local",
        },
        args=(
            f"reward.custom_reward_function.path='{REPO_ROOT / 'tests' / 'e2e' / 'faulty_reward.py'}'",
            "+reward.custom_reward_function.reward_kwargs.call_timeout_s=3",
        ),
        timeout_s=RUN_TIMEOUT_S,
    )
    _check_exit(run)
    return run


def test_a_reward_that_raises_or_hangs_is_bounded_scored_zero_counted_and_training_goes_on(faulty_reward_run, output_root):
    logs = [steps for path, steps in file_log_steps(output_root / "logs" / "dfpo").items() if path.name.startswith("faulty-reward.")]
    assert len(logs) == 1
    steps = logs[0]
    assert _training_steps(steps) == [1, 2], faulty_reward_run.tail()
    # validation holds 0+0 (raises) and 4+3 (hangs) among its 5 problems: 2 of 5 failed and were counted
    failed = steps[2]["val-aux/arithmetic_test/scorer_failed/mean@4"]
    assert failed == pytest.approx(2 / 5)
    assert "injected scorer fault" in faulty_reward_run.output
    assert "did not return within 3 s" in faulty_reward_run.output
