"""scripts/bench_trainer_startup.py: what it reads from a run's log and how it sums the runs up."""

from __future__ import annotations

import datetime

import pytest

from tests.script_modules import load_script

# verl's line as the quickstart's train log holds it (a Ray actor's prefix, then the logging record)
READY_LINE = (
    "\x1b[36m(DFPOTaskRunner pid=16820)\x1b[0m INFO:2026-12-06 05:10:29,339:all initialize finished, ready to fit\n"
)


def _bench():
    return load_script("bench_trainer_startup")


def test_ready_to_fit_is_timed_from_the_launch_to_verls_line(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "$ python -m dfpo.main ...\nINFO:2026-12-06 05:08:44,265:Platform override from VERL_PLATFORM: cpu\n"
        + READY_LINE
    )
    launched = datetime.datetime(2026, 12, 6, 5, 8, 44, 200000)
    assert _bench().ready_seconds(log, launched) == pytest.approx(105.1)


def test_a_log_without_verls_line_is_an_error_naming_it(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("$ python -m dfpo.main ...\n")
    with pytest.raises(RuntimeError, match="train.log has no verl 'ready to fit' line"):
        _bench().ready_seconds(log, datetime.datetime(2026, 12, 6))


def test_the_summary_gives_each_settings_means_and_the_ratio_off_over_on():
    runs = [
        {"torch_compile": False, "ready_to_fit_s": 80.0, "steps_s": [30.0, 25.0], "run_s": 190.0},
        {"torch_compile": True, "ready_to_fit_s": 100.0, "steps_s": [34.0, 29.0], "run_s": 230.0},
        {"torch_compile": False, "ready_to_fit_s": 90.0, "steps_s": [31.0, 26.0], "run_s": 210.0},
        {"torch_compile": True, "ready_to_fit_s": 104.0, "steps_s": [35.0, 28.0], "run_s": 226.0},
    ]
    summary = _bench().summary(runs)
    assert summary["off"] == {"runs": 2, "ready_to_fit_s": 85.0, "steps_s": 56.0, "run_s": 200.0}
    assert summary["on"] == {"runs": 2, "ready_to_fit_s": 102.0, "steps_s": 63.0, "run_s": 228.0}
    assert summary["off_over_on"] == {"ready_to_fit_s": 0.83, "run_s": 0.88}
