"""DFPO in verl's asynchronous trainers, end to end through the tiny CPU recipe.

``TRAINER_MODE=colocate_async`` and ``TRAINER_MODE=separate_async`` of
``bash recipes/run_dfpo_min_replace_tiny_cpu.sh``: verl's own asynchronous V1 trainers with DFPO's
actor worker. separate_async samples through verl's vLLM rollout on CPU — a standalone vLLM replica
on a rank of its own, fed after every step through the ``local`` gloo checkpoint engine (the GPU
default, NCCL, needs CUDA); colocate_async uses dfpo's local rollout server (what it adds over the
synchronous runs is verl's scheduling, and the local server starts faster), and a reward whose
scorer raises for some problems and hangs for others (``faulty_reward.py``): each fault must be
bounded, scored 0 and counted, and training must go on. Each run is checked for its steps, an
exact transform (DFPO's residual after < 1e-6) and the ``dfpo/`` staleness diagnostics; the
separate-async run also for what its two local updates per step do (the second trains on π_old's
log-probs, so DFPO's pre-pass forwards it).
"""

from __future__ import annotations

import pytest

from dfpo.operations.run_checks import ROLLOUT_GAP_BOUNDS
from tests.e2e.recipe_runs import REPO_ROOT, RecipeRun, file_log_steps, run_recipe

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # serial: verl's trainer through Ray and vLLM needs the machine to itself

RUN_TIMEOUT_S = 900


def _run(
    output_root, mode: str, steps: int, rollout: str, args: tuple[str, ...] = ()
) -> tuple[dict[int, dict], RecipeRun]:
    run = run_recipe(
        "run_dfpo_min_replace_tiny_cpu.sh",
        # one training rank (separate_async: plus its rollout rank); validation after training only
        {
            "OUTPUT_ROOT": str(output_root),
            "TRAINER_MODE": mode,
            "TOTAL_TRAINING_STEPS": str(steps),
            "GPUS_PER_NODE": "1",
            "VAL_BEFORE_TRAIN": "false",
            "ROLLOUT_NAME": rollout,
        },
        args,
        timeout_s=RUN_TIMEOUT_S,
    )
    assert run.returncode == 0, f"TRAINER_MODE={mode} exited with {run.returncode}:\n{run.tail()}"
    if rollout == "vllm":
        assert "(vLLMHttpServer pid=" in run.output, "not served by verl's vLLMHttpServer:\n" + run.tail()
    experiment = f"dfpo_min_replace-tiny_cpu-g8-seed1-{mode}"
    logs = [
        s for path, s in file_log_steps(output_root / "logs" / "dfpo").items() if path.name.startswith(experiment + ".")
    ]
    assert len(logs) == 1, run.tail()
    return logs[0], run


@pytest.fixture(scope="module")
def output_root(tmp_path_factory, tiny_example):
    return tiny_example(tmp_path_factory.mktemp("dfpo_async_runs"))


@pytest.fixture(scope="module")
def colocate_run(output_root):
    """colocate_async with a reward whose scorer raises for some problems and hangs for others
    (tests/e2e/faulty_reward.py, a 3 s call limit): one launch for both, to keep CI's budget."""
    return _run(
        output_root,
        "colocate_async",
        2,
        rollout="local",
        args=(
            f"reward.custom_reward_function.path='{REPO_ROOT / 'tests' / 'e2e' / 'faulty_reward.py'}'",
            "+reward.custom_reward_function.reward_kwargs.call_timeout_s=3",
        ),
    )


@pytest.fixture(scope="module")
def colocate_log(colocate_run):
    return colocate_run[0]


@pytest.fixture(scope="module")
def separate_log(output_root):
    return _run(output_root, "separate_async", 2, rollout="vllm")[0]


def _training_steps(steps: dict[int, dict]) -> list[int]:
    return sorted(step for step, metrics in steps.items() if "actor/grad_norm" in metrics)


def _check_dfpo_steps(steps: dict[int, dict], expected: list[int]) -> None:
    assert _training_steps(steps) == expected
    for step in expected:
        metrics = steps[step]
        assert metrics["actor/dfpo/cancellation_residual_after"] < 1e-6, step
        # a step whose groups all have equal rewards (the tiny model's format can break after a
        # step or two) has zero advantages and a zero gradient; step 1 always has mixed rewards
        if step == expected[0] or metrics["actor/dfpo/cancellation_residual_before"] > 0.0:
            assert metrics["actor/grad_norm"] > 0.0, step
        for key in (
            "dfpo/staleness/policy_lag_mean",
            "dfpo/staleness/policy_lag_max",
            "actor/dfpo/staleness/rollout_ratio_spread",
        ):
            assert key in metrics, (step, key)


def test_colocate_async_trains_on_stale_responses_with_exact_group_statistics(colocate_log):
    _check_dfpo_steps(colocate_log, [1, 2])
    # the warm-up batch runs ahead: step 2 trains on responses started by the step-1 policy
    assert colocate_log[1]["dfpo/staleness/policy_lag_max"] == 0.0
    assert colocate_log[2]["dfpo/staleness/policy_lag_max"] >= 1.0
    assert colocate_log[2]["actor/dfpo/staleness/rollout_ratio_spread"] > 1e-3
    for step in (1, 2):
        # old log-probs recomputed just before each update: of its 2 mini-batches only the second
        # runs the pre-pass forward
        assert colocate_log[step]["actor/dfpo/old_log_probs_recomputed"] == 1.0
        assert colocate_log[step]["actor/dfpo/prepass_forward"] == 0.5
    assert any(key.startswith("val-core/") for key in colocate_log[2])


def test_separate_async_runs_on_its_own_rollout_rank_with_two_local_updates_per_sync(separate_log):
    _check_dfpo_steps(separate_log, [1, 2])
    for step in (1, 2):
        metrics = separate_log[step]
        # TRAIN_BATCH_SIZE 8 / PPO_MINI_BATCH_SIZE 4: local updates 0 and 1, averaged over the step;
        # update 1's old log-probs are π_old's, so it skips no forward
        assert metrics["dfpo/staleness/local_update"] == 0.5, step
        assert metrics["actor/dfpo/old_log_probs_recomputed"] == 0.5, step
        assert metrics["actor/dfpo/prepass_forward"] == 0.5, step
        # the end-of-step weight sync to the standalone vLLM replica (the local checkpoint engine;
        # its transfer is checked bit for bit in tests/cpu/test_local_checkpoint_engine.py)
        assert metrics["timing_s/update_weights"] > 0.0, step
    # step 1 samples with the initial weights, which actor and vLLM share: the gap is rounding only
    # (from step 2 on the responses come from the policy one sync behind, by design)
    assert separate_log[1]["training/rollout_probs_diff_max"] < ROLLOUT_GAP_BOUNDS["fp32"]
    assert any(key.startswith("val-core/") for key in separate_log[2])


def test_a_reward_that_raises_or_hangs_is_bounded_scored_zero_counted_and_training_goes_on(colocate_run):
    steps, run = colocate_run
    assert _training_steps(steps) == [1, 2], run.tail()
    # validation holds 0+0 (raises) and 4+3 (hangs) among its 5 problems: 2 of 5 failed and were counted
    assert steps[2]["val-aux/arithmetic_test/scorer_failed/mean@4"] == pytest.approx(2 / 5)
    assert "injected scorer fault" in run.output
    assert "did not return within 3 s" in run.output
