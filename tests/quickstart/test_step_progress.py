"""The quickstart's progress lines (quickstart/pipeline.py's StepProgress), read from a verl file log."""

from __future__ import annotations

import json

from quickstart import pipeline as quickstart
from quickstart.pipeline import StepProgress


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


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
    for step, seconds in ((1, 200.0), (2, 100.0)):
        records.append(
            {
                "step": step,
                "data": {
                    "actor/grad_norm": 0.1,
                    "critic/score/mean": 0.25,
                    "timing_s/step": seconds,
                    "actor/dfpo/cancellation_residual_before": 0.1,
                    "actor/dfpo/cancellation_residual_after": 3e-8,
                },
            }
        )
    _write(log, records)
    progress()
    progress()  # a second poll prints nothing new
    assert said[1:] == [
        "  step 1/4: train reward 0.250, learning-tax residual 1.00e-01 -> 3.0e-08 after the transform, 200.0 s; about 10 min for the 3 steps left",
        "  step 2/4: train reward 0.250, learning-tax residual 1.00e-01 -> 3.0e-08 after the transform, 100.0 s; about 5 min for the 2 steps left",
    ]
    records.append({"step": 4, "data": {"actor/grad_norm": 0.1, "critic/score/mean": 0.5, "timing_s/step": 30.0}})
    _write(log, records)
    progress()
    assert said[-1] == "  step 4/4: train reward 0.500, learning-tax residual nan, 30.0 s"  # nothing left to estimate


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
