"""The main job end to end: verl's whole trainer through the tiny CPU recipes.

Each run is a user's command, so everything between the shell and the optimizer step is under
test: the launcher, data_prep's parquet, the tiny model build, ``python -m dfpo.main``, Ray, verl's
TaskRunner, TransferQueue, the agent loop on verl's own vLLM rollout (``vLLMReplica`` /
``vLLMHttpServer`` on vLLM's CPU build, one replica per rank), ``reward/score.py`` through verl's
reward manager, old log-probs, DFPO's exact update on 2 gloo ranks with the GPU recipes' packed
sequences and dynamic batching, verl's weight sync from the actor into vLLM, validation,
checkpoints, and ``python -m dfpo.operations.run_checks`` on the run's log.

The DFPO run read here is the training stage of ``bash scripts/gpu_smoke.sh --cpu`` on 2 ranks
(``recipes/run_dfpo_min_replace_tiny_cpu.sh``, 2 steps, vLLM), launched once per test session for
this module and tests/recipes/test_gpu_smoke.py (``cpu_smoke_run`` in tests/conftest.py): a launch
costs 4-6 minutes on 2 cores, and both check the same run. The reward-fault run is the
colocate-async run of tests/e2e/test_trainer_async_cpu.py.

Covered elsewhere, each by one launch to keep CI's budget: resume at the next step
(tests/e2e/test_multi_node_cpu.py, 2 ranks on 2 Ray nodes), bypass mode (the smoke's second
stage), the GSPO baseline through the same path on one rank with vLLM, in a bf16 actor and engine
with a skipped weight sync (tests/e2e/test_weight_sync_check_cpu.py).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from dfpo.operations.run_checks import ROLLOUT_GAP_BOUNDS
from tests.e2e.recipe_runs import file_log_steps

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # serial: verl's trainer through Ray and vLLM needs the machine to itself

# verl's vLLM server announces itself in the driver's output (Ray prefixes each actor's lines)
VLLM_SERVER_MARK = "(vLLMHttpServer pid="


def _training_steps(steps: dict[int, dict]) -> list[int]:
    return sorted(step for step, metrics in steps.items() if "actor/grad_norm" in metrics)


@pytest.fixture(scope="module")
def dfpo_run(cpu_smoke_run):
    """The smoke's 2-step DFPO stage on 2 ranks: (run, its file log by step, its checkpoint folder)."""
    run = cpu_smoke_run.run
    training = next(
        (
            line
            for line in run.output.splitlines()
            if "train DFPO 2 steps" in line and line.rstrip().endswith(("PASS", "FAIL"))
        ),
        None,
    )
    assert training is not None and training.rstrip().endswith("PASS"), (
        f"the smoke's training stage did not pass:\n{run.tail()}"
    )
    assert VLLM_SERVER_MARK in run.output, "the run was not served by verl's vLLMHttpServer:\n" + run.tail()
    root, project, experiment = cpu_smoke_run.output_root, cpu_smoke_run.project, cpu_smoke_run.experiment
    logs = [
        steps
        for path, steps in file_log_steps(root / "logs" / project).items()
        if path.name.startswith(experiment + ".")
    ]
    assert len(logs) == 1, f"expected one file log of {experiment} under {root / 'logs' / project}"
    return run, logs[0], root / "checkpoints" / project / experiment, cpu_smoke_run


def test_dfpo_run_logs_every_step_with_learning_signal(dfpo_run):
    _, steps, _, smoke = dfpo_run
    assert _training_steps(steps) == list(range(1, smoke.steps + 1))
    first = steps[1]
    # Mixed rewards at step 1: a policy that is always right or always wrong has zero advantages
    # and the update would be a no-op, so the run would pass without testing it.
    assert 0.0 < first["critic/score/mean"] < 1.0
    assert first["actor/grad_norm"] > 0.0 and math.isfinite(first["actor/grad_norm"])


def test_dfpo_run_cancels_the_drift_exactly(dfpo_run):
    _, steps, _, _ = dfpo_run
    for step in _training_steps(steps):
        metrics = steps[step]
        assert metrics["actor/dfpo/cancellation_residual_after"] < 1e-6, step
        # a step whose groups all have equal rewards has nothing to cancel (both residuals 0)
        assert (
            metrics["actor/dfpo/cancellation_residual_before"] >= metrics["actor/dfpo/cancellation_residual_after"]
        ), step
    # step 1 has mixed rewards (see above), so GSPO's weights leave a residual the transform removes
    assert steps[1]["actor/dfpo/cancellation_residual_before"] > 1e-4


def test_rollout_log_probs_match_the_actor_after_weight_sync(dfpo_run):
    _, steps, _, _ = dfpo_run
    # Step 2 rolls out with weights synced from the trained actor into vLLM: a sync that did not
    # reach the rollout would show as a log-prob gap of the size of the update. Both sides are
    # float32, so the gap is kernel rounding only (dfpo.operations.run_checks states the bound's basis).
    for step in _training_steps(steps):
        assert steps[step]["training/rollout_probs_diff_max"] < ROLLOUT_GAP_BOUNDS["fp32"], step


def test_validation_runs_before_and_after_training(dfpo_run):
    _, steps, _, smoke = dfpo_run
    assert any(key.startswith("val-core/") for key in steps[0])
    assert any(key.startswith("val-core/") for key in steps[smoke.steps])


def test_checkpoint_of_every_rank(dfpo_run):
    _, _, experiment, smoke = dfpo_run
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(smoke.steps)
    actor = experiment / f"global_step_{smoke.steps}" / "actor"
    for rank in range(smoke.ranks):
        for kind in ("model", "optim", "extra_state"):
            assert (actor / f"{kind}_world_size_{smoke.ranks}_rank_{rank}.pt").is_file(), (
                f"{kind} of rank {rank} missing in {actor}"
            )


def test_run_checks_pass_on_the_real_log(dfpo_run):
    """``python -m dfpo.operations.run_checks`` on the file log verl wrote, with the CPU recipes' fp32 bound and
    the weight-sync check (what scripts/gpu_smoke.sh runs after its training stage)."""
    _, _, _, smoke = dfpo_run
    root = smoke.output_root / "logs" / smoke.project
    (log,) = [path for path in file_log_steps(root) if path.name.startswith(smoke.experiment + ".")]
    command = [
        sys.executable,
        "-m",
        "dfpo.operations.run_checks",
        str(log),
        "--steps",
        str(smoke.steps),
        "--dfpo",
        "--old-log-probs",
        "recomputed",
        "--rollout-numerics",
        "fp32",
        "--weight-sync",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASS  ") == 7 and "FAIL" not in done.stdout, done.stdout
