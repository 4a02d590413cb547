"""The weight-sync check fails a run whose rollout never received the trained weights — in bf16 —
and the GSPO baseline trains through verl's trainer with DFPO's diagnostics and no transform.

One launch for both (each launch costs 1.5-2 minutes of start-up on 2 cores): verl's trainer runs
the GSPO baseline's tiny recipe (``recipes/run_gspo_tiny_cpu.sh``) for 3 steps on one rank with a
bf16 actor and a bf16 vLLM engine (the GPU recipes' numerics; on CPUs without native bf16 it costs
about 2x the fp32 step here, the model being tiny), its weight sync skipped (the test's own
``DFPOSyncTrainer.on_step_end``, installed in the run's Ray workers by tests/e2e/weight_sync_skipped.py:
the rollout keeps sampling with the first weights) and each update's size measured (``dfpo_measure_update_kl=true``).

- The check: ``python -m dfpo.operations.run_checks --weight-sync --rollout-numerics bf16`` must fail the
  run, saying the rollout was an update behind, while its per-token gap check (1 nat at bf16)
  passes it: the case the weight-sync check exists for. The check reads the rollout's and the
  update's KL only, whatever the method. The synced counterpart is ``scripts/gpu_smoke.sh --cpu``
  (tests/recipes/test_gpu_smoke.py, DFPO on 2 ranks), whose 2-step run passes the same check; the
  measurements behind its constants are in docs/exactness.md.
- The baseline: verl's own GSPO loss (``loss_mode=gspo``) through dfpo's worker, which logs the
  learning tax GSPO's weights leave on the shared tokens (``cancellation_residual_before``) and
  measures it on the gradient verl backpropagated (``shared_token_grad_residual``), and applies no
  transform (no ``cancellation_residual_after``). The warm-started tiny model answers
  ``\\boxed{n}``, so the responses of a group share a prefix, and where their rewards differ
  GSPO's gradient on it is far above rounding: the residual DFPO's run-checks bound would fail.
  The same baseline on the real model is the README's ``--methods dfpo_min_replace gspo``
  (recorded by ``python scripts/study_quickstart_seeds.py --seeds 1 --methods dfpo_min_replace
  gspo``, docs/cpu.md); its reuse of DFPO's finished run is tests/quickstart's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dfpo.operations.run_checks import shared_gradient_tolerance
from tests.e2e import weight_sync_skipped
from tests.e2e.recipe_runs import REPO_ROOT, file_log_steps, run_recipe

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # serial: verl's trainer through Ray and vLLM needs the machine to itself

STEPS = 3
# Three times the tiny recipe's LR (1e-3): the check needs updates that stand out of bf16's noise.
# With the recipe's own LR a CI run's updates (update_kl 0.002-0.003) left steps 2 and 3 within it
# (excess 0.0044 and 0.0026 against twice the spread of rollout_corr/kl, 0.005: dfpo.operations.run_checks),
# and the check said "not decisive" instead of "one update behind or more". KL grows with the
# square of the step: three times the LR, about nine times the update_kl (a run here: excess 0.046
# and 0.054, ten times the noise; the per-token gap 0.33 nat, under the bf16 bound of 1).
LR = "3e-3"
RECIPE = "run_gspo_tiny_cpu.sh"


@pytest.fixture(scope="module")
def stale_gspo_run(tmp_path_factory, tiny_example):
    """(the run, its file log path, its steps' metrics)."""
    output_root = tiny_example(tmp_path_factory.mktemp("stale_gspo"))
    env = {
        "OUTPUT_ROOT": str(output_root),
        "TOTAL_TRAINING_STEPS": str(STEPS),
        # one rank, one vLLM engine: what is under test is the check, and each engine costs about a
        # minute of start-up on 2 cores (the 2-rank sync is tests/e2e/test_trainer_cpu.py's run)
        "GPUS_PER_NODE": "1",
        "SAVE_FREQ": "-1",
        "TEST_FREQ": "-1",
        "VAL_BEFORE_TRAIN": "false",  # nothing here reads a validation
        "ACTOR_DTYPE": "bf16",
        "ROLLOUT_DTYPE": "bfloat16",
        "PROJECT_NAME": "stale",
        "EXPERIMENT_NAME": "stale",
        # the setup hook's module (tests.e2e.weight_sync_skipped) importable in every Ray worker
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])),
    }
    args = (
        f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true",
        weight_sync_skipped.HOOK_OVERRIDE,
    )
    run = run_recipe(RECIPE, env, args, timeout_s=900)
    assert run.returncode == 0, run.tail(120)
    assert "(vLLMHttpServer pid=" in run.output, "not served by verl's vLLMHttpServer:\n" + run.tail()
    ((log, steps),) = file_log_steps(output_root / "logs" / "stale").items()
    return run, log, steps


def test_a_rollout_that_never_got_the_weights_fails_the_weight_sync_check(stale_gspo_run):
    run, log, _ = stale_gspo_run
    assert weight_sync_skipped.SAID in run.output
    command = [
        sys.executable,
        "-m",
        "dfpo.operations.run_checks",
        str(log),
        "--steps",
        str(STEPS),
        "--rollout-numerics",
        "bf16",
    ]
    checks = subprocess.run(command + ["--weight-sync"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert checks.returncode == 1, checks.stdout
    lines = checks.stdout.splitlines()
    sync = next(line for line in lines if "weights reached the rollout" in line)
    assert sync.startswith("FAIL") and "one update behind or more" in sync, checks.stdout
    # what the per-token bound cannot see at bf16, and the rest of the run is sound
    assert all(line.startswith("PASS") for line in lines if line is not sync), checks.stdout


def test_the_gspo_baseline_trains_with_dfpos_diagnostics_and_no_transform(stale_gspo_run):
    run, _, steps = stale_gspo_run
    assert "'loss_mode': 'gspo'" in run.output, "verl's printed config does not train GSPO's loss:\n" + run.tail()
    trained = {step: metrics for step, metrics in steps.items() if "actor/grad_norm" in metrics}
    assert sorted(trained) == list(range(1, STEPS + 1)), sorted(steps)
    for step, metrics in trained.items():
        assert "actor/dfpo/cancellation_residual_before" in metrics, step
        assert "actor/dfpo/cancellation_residual_after" not in metrics, step  # no transform
    # GSPO's gradient on the shared tokens: the learning tax, above what DFPO's bound calls rounding
    measured = {step: m for step, m in trained.items() if m.get("actor/dfpo/shared_token_grad_groups", 0) > 0}
    assert measured, {step: m.get("actor/dfpo/shared_token_grad_prefix_groups") for step, m in trained.items()}
    taxed = [
        m["actor/dfpo/shared_token_grad_residual"] / shared_gradient_tolerance(m["actor/dfpo/shared_token_grad_eps"])
        for m in measured.values()
    ]
    print(f"GSPO's shared-token gradient residual over DFPO's rounding bound, by measured step: {taxed}")
    assert max(taxed) > 1.0, taxed
    assert max(m["actor/dfpo/cancellation_residual_before"] for m in trained.values()) > 1e-4
