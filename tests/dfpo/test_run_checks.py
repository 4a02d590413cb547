"""``python -m dfpo.operations.run_checks``: the rollout-vs-actor log-prob gap is judged, by the run's numerics."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dfpo.operations.run_checks import ROLLOUT_GAP_BOUNDS, check_run
from dfpo.operations.training_logs import read_file_log


def _log(tmp_path, gaps: list[float | None]):
    path = tmp_path / "run.jsonl"
    lines = []
    for step, gap in enumerate(gaps, start=1):
        data = {
            "critic/score/mean": 0.5,
            "actor/grad_norm": 0.3,
            "actor/dfpo/shared_token_grad_residual": 3e-8,
            "actor/dfpo/shared_token_grad_eps": 1.1920928955078125e-07,
        }
        if gap is not None:
            data["training/rollout_probs_diff_max"] = gap
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _gap_check(path, numerics: str) -> bool:
    (result,) = [
        ok
        for ok, text in check_run(read_file_log(path), 2, True, None, numerics)
        if text.startswith("rollout log-probs")
    ]
    return result


@pytest.mark.parametrize(
    ("numerics", "gaps", "passes"),
    [
        ("fp32", [9.5e-7, 1.1e-4], True),  # measured on CPU: the local server, vLLM's CPU build
        ("fp32", [1.1e-4, 0.02], False),  # step 2 sampled from weights one update behind
        ("bf16", [0.09, 0.3], True),
        ("bf16", [0.09, 2.5], False),  # the rollout samples from another model than the actor
        ("fp32", [1e-5, float("nan")], False),
        ("fp32", [None, None], False),  # not logged: nothing shows the weights arrived
    ],
)
def test_the_gap_bound_depends_on_the_numerics_and_fails_a_rollout_behind_the_actor(tmp_path, numerics, gaps, passes):
    assert _gap_check(_log(tmp_path, gaps), numerics) is passes


def test_fp32_bound_is_tighter_than_bf16():
    assert ROLLOUT_GAP_BOUNDS["fp32"] < ROLLOUT_GAP_BOUNDS["bf16"]


def test_the_command_exits_1_on_a_gap_above_the_bound(tmp_path):
    path = _log(tmp_path, [1e-5, 0.02])
    command = [sys.executable, "-m", "dfpo.operations.run_checks", str(path), "--steps", "2", "--dfpo"]
    fp32 = subprocess.run([*command, "--rollout-numerics", "fp32"], capture_output=True, text=True, check=False)
    assert fp32.returncode == 1 and "FAIL  rollout log-probs match the actor's (fp32 bound 0.001)" in fp32.stdout
    bf16 = subprocess.run(command, capture_output=True, text=True, check=False)  # default: bf16, the GPU recipes
    assert bf16.returncode == 0, bf16.stdout


def test_in_bypass_mode_the_gap_is_not_computed_and_not_required(tmp_path):
    """verl's bypass mode uses the rollout's log-probs as the old ones: no actor recompute, no gap logged
    (seen in scripts/gpu_smoke.sh --cpu's bypass step); a gap that is logged is still judged."""

    def gap_check(gaps, old):
        (result,) = [
            (ok, text)
            for ok, text in check_run(read_file_log(_log(tmp_path, gaps)), 2, True, old, "fp32")
            if text.startswith("rollout log-probs")
        ]
        return result

    ok, text = gap_check([None, None], "rollout")
    assert ok and "not computed in bypass mode" in text
    assert gap_check([None, None], "recomputed")[0] is False
    assert gap_check([1e-5, 0.02], "rollout")[0] is False


def _gradient_log(tmp_path, steps: list[tuple[float, float, float]]):
    """steps: (grad_norm, advantages max, advantages min) per step."""
    path = tmp_path / "grad.jsonl"
    lines = [
        json.dumps(
            {
                "step": step,
                "data": {
                    "critic/score/mean": 0.1,
                    "actor/grad_norm": grad,
                    "critic/advantages/max": hi,
                    "critic/advantages/min": lo,
                    "actor/dfpo/shared_token_grad_residual": 3e-8,
                    "actor/dfpo/shared_token_grad_eps": 1.1920928955078125e-07,
                    "training/rollout_probs_diff_max": 1e-5,
                },
            }
        )
        for step, (grad, hi, lo) in enumerate(steps, start=1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _gradient_check(path, steps: int):
    (result,) = [
        (ok, text)
        for ok, text in check_run(read_file_log(path), steps, True, None, "fp32")
        if text.startswith("finite non-zero gradient")
    ]
    return result


@pytest.mark.parametrize(
    ("steps", "passes", "says"),
    [
        ([(0.2, 2.4, -0.7), (0.1, 1.1, -0.3)], True, None),
        # step 2: no response right, every advantage 0 -> a zero gradient is what the update must give
        ([(0.2, 2.4, -0.7), (0.0, 0.0, 0.0)], True, "steps [2]: every advantage 0"),
        ([(0.2, 2.4, -0.7), (0.0, 1.1, -0.3)], False, "= 0 at step 2, whose advantages are not all 0"),
        ([(0.0, 0.0, 0.0), (0.0, 0.0, 0.0)], False, "no step had a learning signal"),
        ([(0.2, 2.4, -0.7), (float("nan"), 1.1, -0.3)], False, "at step 2"),
    ],
)
def test_a_zero_gradient_fails_only_where_there_was_a_learning_signal(tmp_path, steps, passes, says):
    ok, text = _gradient_check(_gradient_log(tmp_path, steps), len(steps))
    assert ok is passes, text
    if says:
        assert says in text


def test_without_advantage_metrics_every_step_needs_a_gradient(tmp_path):
    ok, _ = _gradient_check(_log(tmp_path, [1e-5, 1e-5]), 2)
    assert ok
    path = tmp_path / "no_adv.jsonl"
    path.write_text(
        "\n".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.0, "actor/grad_norm": 0.0}}) for s in (1, 2))
        + "\n"
    )
    assert _gradient_check(path, 2)[0] is False


def _residual_check(tmp_path, residuals: list[float | None], eps: float = 1.1920928955078125e-07) -> tuple[bool, str]:
    path = tmp_path / "residual.jsonl"
    lines = []
    for step, residual in enumerate(residuals, start=1):
        data = {"critic/score/mean": 0.5, "actor/grad_norm": 0.3, "training/rollout_probs_diff_max": 1e-5}
        if residual is not None:
            data |= {"actor/dfpo/shared_token_grad_residual": residual, "actor/dfpo/shared_token_grad_eps": eps}
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    (result,) = [
        (ok, text)
        for ok, text in check_run(read_file_log(path), len(residuals), True, None, "fp32")
        if text.startswith("DFPO gives")
    ]
    return result


@pytest.mark.parametrize(
    ("residuals", "eps", "passes"),
    [
        ([3e-8, 1e-7], 1.1920928955078125e-07, True),  # float32 rounding
        (
            [3e-8, 1.2e-2],
            1.1920928955078125e-07,
            False,
        ),  # the no-stop-grad ablation's size (tests/dfpo/test_shared_token_gradient.py)
        ([3e-8, 0.3], 0.0078125, False),  # GSPO's size, even with bf16 log-probs
        ([4e-3, 1e-2], 0.0078125, True),  # bf16 rounding
        ([None, None], 1.1920928955078125e-07, False),  # nothing measured and no weights residual logged: not a pass
    ],
)
def test_the_shared_token_gradient_check_is_rounding_by_the_log_probs_dtype(tmp_path, residuals, eps, passes):
    ok, text = _residual_check(tmp_path, residuals, eps)
    assert ok is passes, text


def test_without_a_measured_step_the_weights_residual_is_judged_and_named(tmp_path):
    path = tmp_path / "weights.jsonl"
    steps = [
        {
            "critic/score/mean": 0.5,
            "actor/grad_norm": 0.3,
            "actor/dfpo/shared_token_grad_groups": 0.0,
            "actor/dfpo/cancellation_residual_after": after,
        }
        for after in (2e-17, 3e-3)
    ]
    path.write_text("\n".join(json.dumps({"step": i + 1, "data": d}) for i, d in enumerate(steps[:1])) + "\n")
    ((ok, text),) = [r for r in check_run(read_file_log(path), 1, True, None, "fp32") if r[1].startswith("DFPO gives")]
    assert ok and "gradient was not measured" in text
    path.write_text("\n".join(json.dumps({"step": i + 1, "data": d}) for i, d in enumerate(steps)) + "\n")
    ((ok, text),) = [r for r in check_run(read_file_log(path), 2, True, None, "fp32") if r[1].startswith("DFPO gives")]
    assert not ok


def _sync_log(tmp_path, kl: list[float], update_kl: list[float] | None):
    path = tmp_path / "sync.jsonl"
    lines = []
    for step, value in enumerate(kl, start=1):
        data = {"critic/score/mean": 0.5, "actor/grad_norm": 0.3, "rollout_corr/kl": value}
        if update_kl is not None:
            data["actor/dfpo/update_kl"] = update_kl[step - 1]
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return read_file_log(path)


def _sync_check(log, numerics="fp32") -> tuple[bool, str]:
    (result,) = [
        (ok, text)
        for ok, text in check_run(log, 3, False, None, numerics, weight_sync=True)
        if text.startswith("weights reached")
    ]
    return result


@pytest.mark.parametrize(
    ("kl", "update_kl", "passes"),
    [
        # measured, the tiny recipe through vLLM's CPU build in fp32 (docs/exactness.md): synced ...
        ([6.40e-5, 2.89e-5, 5.77e-5, 8.11e-5], [0.0300, 0.0191, 0.0122, 0.0800], True),
        # ... and with the sync skipped: one update behind at step 2, further behind later
        ([6.47e-5, 0.0387, 0.125, 0.261], [0.0212, 0.0765, 0.0839, 0.0676], False),
        # one update behind at one step only is enough to fail
        ([6.40e-5, 2.89e-5, 5.77e-5, 0.005], [0.0300, 0.0191, 0.0122, 0.0800], False),
        # a smaller stale excess than measured (a tenth of the update's size) still fails
        ([6.40e-5, 0.0031, 5.77e-5, 8.11e-5], [0.0300, 0.0191, 0.0122, 0.0800], False),
    ],
)
def test_the_weight_sync_check_separates_a_synced_run_from_a_stale_one(tmp_path, kl, update_kl, passes):
    ok, text = _sync_check(_sync_log(tmp_path, kl, update_kl))
    assert ok is passes, text


def test_the_weight_sync_check_needs_a_decisive_step_and_its_inputs(tmp_path):
    ok, text = _sync_check(_sync_log(tmp_path, [6.0e-5, 6.0e-5, 6.0e-5], [1e-9, 1e-9, 1e-9]))
    assert not ok and "not decisive" in text and "larger LR" in text
    ok, text = _sync_check(_sync_log(tmp_path, [6.0e-5, 6.0e-5, 6.0e-5], None))
    assert not ok and "dfpo_measure_update_kl=true" in text
    # bf16's spread is wider: an update that decides at fp32 does not at bf16
    small = _sync_log(tmp_path, [6.0e-5, 5.5e-5, 6.6e-5], [3e-3, 3e-3, 3e-3])
    assert _sync_check(small, "fp32")[0] and not _sync_check(small, "bf16")[0]


@pytest.mark.parametrize(
    ("kl", "update_kl", "passes"),
    [
        # measured with a bf16 actor and a bf16 vLLM engine on CPU: synced (step 2's update too small
        # to decide, step 3's decides) ...
        ([-4.17e-4, -1.04e-3, 1.70e-4], [0.0201, 1.362, 0.108], True),
        # ... and with the sync skipped: updates too small for a tenth of them to clear bf16's spread,
        # but an excess ten times that spread is a rollout on other weights
        ([-2.65e-4, 0.0278, 0.0324], [0.0171, 0.0038, 0.0204], False),
    ],
)
def test_the_weight_sync_check_at_bf16(tmp_path, kl, update_kl, passes):
    ok, text = _sync_check(_sync_log(tmp_path, kl, update_kl), "bf16")
    assert ok is passes, text
    assert passes or "one update behind" in text


def test_the_cli_runs_the_weight_sync_check_only_when_asked(tmp_path):
    _sync_log(tmp_path, [6.47e-5, 0.0387, 0.125], [0.0212, 0.0765, 0.0839])
    command = [
        sys.executable,
        "-m",
        "dfpo.operations.run_checks",
        str(tmp_path / "sync.jsonl"),
        "--steps",
        "3",
        "--rollout-numerics",
        "fp32",
    ]
    plain = subprocess.run(command, capture_output=True, text=True)
    asked = subprocess.run(command + ["--weight-sync"], capture_output=True, text=True)
    assert "weights reached" not in plain.stdout
    assert asked.returncode == 1 and "FAIL  weights reached the rollout" in asked.stdout, asked.stdout
