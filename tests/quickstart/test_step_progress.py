"""The quickstart's progress lines (quickstart/pipeline.py's StepProgress), read from a verl file log."""

from __future__ import annotations

import json

import pytest

from quickstart import pipeline as quickstart
from quickstart.pipeline import StepProgress


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


AFTER = "actor/dfpo/cancellation_residual_after"  # DFPO's transformed weights: 0 by construction
MEASURED = "actor/dfpo/shared_token_grad_residual"  # measured on the gradient, where _groups > 0
GROUPS = "actor/dfpo/shared_token_grad_groups"


def step_metrics(seconds: float, measured: float | None, groups: int) -> dict:
    data = {
        "actor/grad_norm": 0.1,
        "critic/score/mean": 0.25,
        "timing_s/step": seconds,
        "actor/dfpo/cancellation_residual_before": 0.1,
        AFTER: 3e-8,
        GROUPS: float(groups),
    }
    return data if measured is None else {**data, MEASURED: measured}


def assert_shows_measurements_only(line: str, data: dict) -> None:
    """A DFPO step's line shows the residual measured on the gradient where the step measured it, and
    else says that the weights cancel by construction; never the transformed weights' residual, an
    identity (rounding), as a measurement."""
    after = data[AFTER]
    assert f"{after:.1e}" not in line and f"{after:.2e}" not in line and "after the transform" not in line, line
    if data.get(GROUPS, 0) > 0 and MEASURED in data:
        assert f"DFPO's gradient measured {data[MEASURED]:.1e}" in line, line
    else:
        assert "by construction" in line and "measured " not in line.replace("not measured ", ""), line


def test_one_line_per_step_and_validation_with_the_time_left(tmp_path, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(quickstart, "say", said.append)
    log = tmp_path / "run.20261205T000000Z.jsonl"
    key = "val-core/digit_sums_test/acc/mean@8"
    # verl logs best@ and maj@ beside mean@ (they sort first): the line shows the mean, avg@k
    records = [
        {
            "step": 0,
            "data": {
                "val-core/digit_sums_test/acc/best@8/mean": 0.6,
                "val-core/digit_sums_test/acc/maj@8/mean": 0.3,
                key: 0.22,
            },
        }
    ]
    progress = StepProgress(tmp_path, "run", total=4, transform=True)
    _write(log, records)
    progress()
    assert said == ["  validation after step 0: held-out avg@8 0.220"]
    # step 1 measured the gradient on two groups; step 2 had no group to measure (all scored alike)
    records += [{"step": 1, "data": step_metrics(200.0, 2.5e-8, 2)}, {"step": 2, "data": step_metrics(100.0, None, 0)}]
    _write(log, records)
    progress()
    progress()  # a second poll prints nothing new
    assert said[1:] == [
        "  step 1/4: train reward 0.250, learning-tax residual: GSPO's weights would leave 1.00e-01, DFPO's "
        "gradient measured 2.5e-08 (2 groups), 200.0 s; about 10 min for the 3 steps left",
        "  step 2/4: train reward 0.250, learning-tax residual: GSPO's weights would leave 1.00e-01, DFPO's "
        "gradient not measured this step (its weights cancel by construction), 100.0 s; about 5 min for the 2 "
        "steps left",
    ]
    for line, record in zip(said[1:], records[1:], strict=True):
        assert_shows_measurements_only(line, record["data"])
    records.append({"step": 4, "data": {"actor/grad_norm": 0.1, "critic/score/mean": 0.5, "timing_s/step": 30.0}})
    _write(log, records)
    progress()
    assert said[-1] == "  step 4/4: train reward 0.500, learning-tax residual not logged, 30.0 s"  # nothing left


def test_gspos_line_shows_its_weights_and_its_measured_gradient():
    data = step_metrics(10.0, 0.12, 1)
    assert quickstart.learning_tax(data, transform=False) == (
        "learning-tax residual: GSPO's weights leave 1.00e-01, GSPO's gradient measured 1.2e-01 (1 group)"
    )
    assert quickstart.learning_tax(step_metrics(10.0, None, 0), transform=False) == (
        "learning-tax residual: GSPO's weights leave 1.00e-01"
    )


def test_a_line_showing_the_transformed_weights_residual_as_a_measurement_fails(tmp_path, monkeypatch):
    """Mutants: the line before this check (the weights' residual "after the transform"), and the
    pipeline reading the transformed weights' residual where the measured one is logged."""
    data = step_metrics(10.0, 2.5e-8, 2)
    old = "  step 1/4: train reward 0.250, learning-tax residual 1.00e-01 -> 3.0e-08 after the transform, 10.0 s"
    with pytest.raises(AssertionError):
        assert_shows_measurements_only(old, data)
    monkeypatch.setattr(quickstart, "MEASURED_RESIDUAL", AFTER)
    for record in (data, step_metrics(10.0, None, 0), {**step_metrics(10.0, None, 0), GROUPS: 1.0}):
        line = quickstart.learning_tax(record, transform=True)
        if record is data or record[GROUPS] > 0:
            with pytest.raises(AssertionError):
                assert_shows_measurements_only(line, record)


def test_short_remaining_times_are_in_seconds(tmp_path):
    progress = StepProgress(tmp_path, "run", total=3, transform=False)
    progress.step_seconds = [20.0]
    assert progress.remaining(1) == "; about 40 s for the 2 steps left"
    assert progress.remaining(2) == "; about 20 s for the step left"
    assert progress.remaining(3) == ""


def test_the_time_table_splits_each_run_by_verls_timers(tmp_path):
    """Steps and validations after steps from verl's ``timing_s/step`` and ``timing_s/testing``; the
    rest of the run's wall time is start-up, the untimed validation before training and shutdown
    (unknown for a run an earlier invocation trained)."""
    log = tmp_path / "run.jsonl"
    _write(
        log,
        [
            {"step": 0, "data": {"timing_s/testing": 25.0, "val-core/x/acc/mean@8": 0.1}},
            {"step": 1, "data": {"timing_s/step": 20.04, "actor/grad_norm": 1.0}},
            {"step": 2, "data": {"timing_s/step": 30.0, "timing_s/testing": 26.0, "actor/grad_norm": 1.0}},
        ],
    )
    split = quickstart.training_seconds(log, 200.0)
    assert split == {
        "run": 200.0,
        "steps": 50.0,
        "validations_after_steps": 51.0,
        "the_rest": 99.0,
        "per_step": [20.0, 30.0],
    }
    assert quickstart.training_seconds(log, 3.0, reused=True)["the_rest"] is None
    table = quickstart.time_table(
        {"prepare": 21.0, "evaluate": 1.0, "report": 4.0, "total": 300.0},
        {"dfpo_min_replace": split, "gspo": quickstart.training_seconds(log, 3.0, reused=True)},
        {"dfpo_min_replace": "DFPO (Min-Replace)", "gspo": "GSPO"},
    )
    assert "| DFPO (Min-Replace): start-up (Ray, workers, vLLM), validation before training, shutdown | 99 |" in table
    assert (
        "| DFPO (Min-Replace): 2 steps, 25.0 each | 50 |" in table
        and "| DFPO (Min-Replace): validations after steps | 51 |" in table
    )
    assert (
        "| GSPO: start-up (Ray, workers, vLLM), validation before training, shutdown | trained before (reused) |"
        in table
    )
    assert table.splitlines()[-1] == "| total | 300 |"
