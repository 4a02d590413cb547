"""Reading verl 0.9.1's console, file and TensorBoard logger output (fixtures made by verl itself)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dfpo.operations.training_logs import (
    curve_keys,
    parse_console_value,
    read_console_log,
    read_file_log,
    read_tensorboard,
    read_training_log,
)

# the fixture logs steps 1-4, then a restart logs steps 3-6 with the score shifted by +0.5
EXPECTED_SCORE = {1: 0.1, 2: 0.2, 3: 0.8, 4: 0.9, 5: 1.0, 6: 1.1}


def _check_fixture_log(log):
    score = log["critic/score/mean"]
    np.testing.assert_array_equal(score.steps, [1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(score.values, [EXPECTED_SCORE[s] for s in score.steps])
    np.testing.assert_allclose(log["response_length/mean"].values, [510 + 10 * i for i in range(6)])
    np.testing.assert_allclose(log["actor/entropy"].values, [1.5 - 0.05 * s for s in range(1, 7)])
    assert log["dfpo/cancellation_residual_after"].values[2] == pytest.approx(3e-7)
    assert log["timing_s/gen"].values.tolist() == [3.0] * 6
    val = log["val-core/aime25/acc/mean@32"]
    assert math.isnan(val.values[0]) and val.values[1] == pytest.approx(0.22)


def test_console_log_with_ray_prefixes_colours_and_restart(fixtures_dir):
    log = read_console_log(fixtures_dir / "verl_console.log")
    _check_fixture_log(log)


def test_file_logger_jsonl(fixtures_dir):
    _check_fixture_log(read_file_log(fixtures_dir / "verl_file_logger.jsonl"))


def test_file_logger_torn_last_line_is_dropped_but_corruption_inside_is_an_error(fixtures_dir, tmp_path):
    text = (fixtures_dir / "verl_file_logger.jsonl").read_text()
    torn = tmp_path / "torn.jsonl"
    torn.write_text(text + '{"step": 7, "data": {"critic/sco')
    with pytest.warns(UserWarning, match="truncated last line"):
        log = read_file_log(torn)
    assert log["critic/score/mean"].steps[-1] == 6
    bad = tmp_path / "bad.jsonl"
    lines = text.splitlines()
    bad.write_text("\n".join([lines[0], "not json", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl line 2"):
        read_file_log(bad)


def test_tensorboard_written_by_verls_adapter(tmp_path, monkeypatch):
    from verl.utils.tracking import _TensorboardAdapter

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    adapter = _TensorboardAdapter("dfpo", "fixture")
    for step in range(1, 5):
        adapter.log({"critic/score/mean": 0.1 * step, "dfpo/weight_mean": 1.0 / step}, step)
    adapter.finish()
    for path in (tmp_path / "tb", tmp_path):  # the log directory itself or any folder above it
        log = read_training_log(path)
        np.testing.assert_array_equal(log["critic/score/mean"].steps, [1, 2, 3, 4])
        np.testing.assert_allclose(log["critic/score/mean"].values, [0.1, 0.2, 0.3, 0.4], rtol=1e-6)
        np.testing.assert_allclose(log["dfpo/weight_mean"].values, [1, 0.5, 1 / 3, 0.25], rtol=1e-6)


def test_format_detection_and_errors(fixtures_dir, tmp_path):
    _check_fixture_log(read_training_log(fixtures_dir / "verl_file_logger.jsonl"))
    _check_fixture_log(read_training_log(fixtures_dir / "verl_console.log"))
    empty = tmp_path / "nothing.log"
    empty.write_text("no metrics here\nstep: not a metric\n")
    with pytest.raises(ValueError, match="no 'step:N"):
        read_training_log(empty)
    with pytest.raises(FileNotFoundError):
        read_training_log(tmp_path / "missing.log")
    (tmp_path / "tb_empty").mkdir()
    with pytest.raises(ValueError, match="no TensorBoard event files"):
        read_tensorboard(tmp_path / "tb_empty")


@pytest.mark.parametrize(
    "text,value",
    [
        ("0.5", 0.5),
        ("np.float64(0.25)", 0.25),
        ("np.float32(812.5)", 812.5),
        ("np.int64(7)", 7.0),
        ("True", 1.0),
        ("-3", -3.0),
        ("1e-07", 1e-7),
    ],
)
def test_console_value_parsing(text, value):
    assert parse_console_value(text) == pytest.approx(value)


def test_console_value_parsing_special_values():
    assert math.isnan(parse_console_value("nan"))
    assert parse_console_value("inf") == math.inf
    assert parse_console_value("tensor(1.)") is None


def test_default_curve_keys(fixtures_dir):
    log = read_file_log(fixtures_dir / "verl_file_logger.jsonl")
    assert curve_keys(log) == [
        "critic/score/mean",
        "response_length/mean",
        "actor/entropy",
        "dfpo/cancellation_residual_after",
        "dfpo/negative_weight_frac",
    ]
    assert curve_keys(log, ("actor/entropy", "absent/key")) == ["actor/entropy"]
