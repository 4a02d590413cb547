"""The weight-sync check fails a run whose rollout never received the trained weights.

verl's trainer runs the tiny DFPO recipe for 3 steps with its weight sync skipped (the test-only
``DFPO_TEST_SKIP_WEIGHT_SYNC=1`` of ``dfpo.trainer.DFPOSyncTrainer``: the rollout keeps sampling
with the first weights) and each update's KL measured (``dfpo_measure_update_kl=true``).
``python -m dfpo.run_checks --weight-sync`` must fail it, saying the rollout was an update behind.
The synced counterpart is ``scripts/gpu_smoke.sh --cpu`` (tests/recipes/test_gpu_smoke.py), whose
2-step run passes the same check. The rollout is dfpo's local server (it starts in seconds, and the
check reads only verl's logged metrics); the tiny recipe's own vLLM runs are measured in docs/exactness.md.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dfpo.trainer import SKIP_WEIGHT_SYNC_FOR_TESTS
from tests.e2e.recipe_runs import REPO_ROOT, run_recipe

pytestmark = pytest.mark.slow

STEPS = 3


def test_a_rollout_that_never_got_the_weights_fails_the_weight_sync_check(tmp_path):
    env = {
        "OUTPUT_ROOT": str(tmp_path),
        "TOTAL_TRAINING_STEPS": str(STEPS),
        "SAVE_FREQ": "-1",
        "TEST_FREQ": "-1",
        "ROLLOUT_NAME": "local",
        "PROJECT_NAME": "stale",
        "EXPERIMENT_NAME": "stale",
    }
    args = (
        "actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{SKIP_WEIGHT_SYNC_FOR_TESTS}='1'",
    )
    run = run_recipe("run_dfpo_min_replace_tiny_cpu.sh", env, args, timeout_s=900)
    assert run.returncode == 0, run.tail(120)
    assert f"{SKIP_WEIGHT_SYNC_FOR_TESTS}=1: the updated weights are NOT synced" in run.output
    (log,) = (tmp_path / "logs" / "stale").glob("stale.*.jsonl")
    command = [sys.executable, "-m", "dfpo.run_checks", str(log), "--steps", str(STEPS), "--dfpo", "--rollout-numerics", "fp32"]
    checks = subprocess.run(command + ["--weight-sync"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert checks.returncode == 1, checks.stdout
    line = next(line for line in checks.stdout.splitlines() if "weights reached the rollout" in line)
    assert line.startswith("FAIL") and "one update behind or more" in line, line
