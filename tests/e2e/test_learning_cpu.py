"""The loop improves a policy: DFPO through verl's whole trainer makes SmolLM2-135M-Instruct better
at held-out sums, or this test fails.

The run is a user's command, ``bash recipes/run_dfpo_min_replace_smollm2_135m_cpu.sh`` (the
quickstart's recipe, fewer steps), so everything between the reward and the weights is under test:
``reward/score.py`` through verl's reward manager, DFPO's advantage (Eq. 4 with the paper's group
normalisation) and transform (Min-Replace, Eq. 17), the loss and its aggregation, FSDP2's gradient
over 2 gloo ranks, the optimizer step, the weight sync back to the rollout. A sign error anywhere
on that path (a negated advantage or reward, a loss maximised instead of minimised) makes the
policy worse; a scale error of the kind that matters (an update orders of magnitude too small,
or one large enough to break the answer format) leaves it where it was or breaks it. Either fails.

What is asserted is held-out and averaged, not a single step (the agent loop's request order
varies between runs, so single steps vary): verl's own validation — one greedy answer to each of
the 41 held-out sums, problems the run never trains on — before training and after the last step
must have risen by :data:`MIN_GAIN`; and the training reward averaged over the second half of the
run must exceed that of the first half. The run is seeded (data order, rollout sampling).

``DFPO_LEARNING_TEST_NEGATE=1`` trains on the negated signal instead (``negated_reward.py``: every
advantage negated exactly); the test must then fail, which is how it was shown that it can.
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.recipe_runs import REPO_ROOT, file_log_steps, run_recipe

# Not yet verified in its committed form (4 steps, gain 0.15): DFPO collapsed at lr 3e-5 in 1 of 3
# quickstart runs, so this test may be flaky. Skipped until it is measured over several seeds (issue 18).
pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="learning test not yet verified over seeds (issue 18 open)")]

STEPS = 4
MIN_GAIN = 0.15  # greedy held-out accuracy, 41 problems: about 6 more problems right
RUN_TIMEOUT_S = 600
EXPERIMENT = "learning-dfpo"
VAL_KEY = "val-core/digit_sums_test/acc/mean@1"
REWARD_KEY = "critic/score/mean"


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("learning")
    negate = os.environ.get("DFPO_LEARNING_TEST_NEGATE", "0") == "1"
    args = (f"reward.custom_reward_function.path='{REPO_ROOT / 'tests' / 'e2e' / 'negated_reward.py'}'",) if negate else ()
    run = run_recipe(
        "run_dfpo_min_replace_smollm2_135m_cpu.sh",
        {
            "OUTPUT_ROOT": str(root),
            "TOTAL_TRAINING_STEPS": str(STEPS),
            "TEST_FREQ": str(STEPS),
            "SAVE_FREQ": str(STEPS),
            "EXPERIMENT_NAME": EXPERIMENT,
            "SEED": "1",
        },
        args=args,
        timeout_s=RUN_TIMEOUT_S,
    )
    assert run.returncode == 0, f"recipe exited with {run.returncode}:\n{run.tail()}"
    logs = [steps for path, steps in file_log_steps(root / "logs" / "dfpo").items() if path.name.startswith(EXPERIMENT + ".")]
    assert len(logs) == 1, run.tail()
    return run, logs[0]


def test_dfpo_improves_held_out_accuracy_and_training_reward(learning_run):
    run, steps = learning_run
    trained = sorted(step for step, metrics in steps.items() if "actor/grad_norm" in metrics)
    assert trained == list(range(1, STEPS + 1)), run.tail()
    before, after = steps[0][VAL_KEY], steps[STEPS][VAL_KEY]
    rewards = [steps[step][REWARD_KEY] for step in trained]
    first, second = rewards[: STEPS // 2], rewards[STEPS // 2 :]
    summary = f"held-out greedy accuracy {before:.3f} -> {after:.3f}; training reward per step {[round(r, 3) for r in rewards]}"
    print(summary)
    assert after >= before + MIN_GAIN, summary
    assert sum(second) / len(second) > sum(first) / len(first), summary
    # DFPO's exact cancellation held on every step of the real model (its shared tokens: the chat
    # template's assistant header is in the prompt, \boxed{ opens most responses)
    for step in trained:
        assert steps[step]["actor/dfpo/cancellation_residual_after"] < 1e-5, step
