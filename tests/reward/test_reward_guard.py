"""The whole-call guard of compute_score: a scorer that raises or hangs costs one 0, not the run."""

from __future__ import annotations

import json
import logging
import time

import pytest

import reward.score as score
from reward import code_tests
from reward.guard import ScoringDeadlineExceeded, call_with_deadline


def test_call_with_deadline_returns_the_value_or_the_functions_own_error():
    assert call_with_deadline(lambda: 41 + 1, 5.0) == 42
    with pytest.raises(KeyError, match="k"):
        call_with_deadline(lambda: {}["k"], 5.0)


def test_call_with_deadline_gives_up_at_the_limit():
    started = time.monotonic()
    with pytest.raises(ScoringDeadlineExceeded, match="0.3 s"):
        call_with_deadline(lambda: time.sleep(30), 0.3)
    assert time.monotonic() - started < 5.0


def test_a_scorer_that_raises_scores_zero_counted_and_logged(monkeypatch, caplog):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(score, "score_response", broken)
    with caplog.at_level(logging.WARNING, logger="reward.score"):
        result = score.compute_score("aime25", "\\boxed{5}", "5")
    assert result["score"] == 0.0 and result["acc"] == 0.0
    assert result["reason"] == "scorer_error" and result["scorer_failed"] == 1.0
    assert "boom" in caplog.text


def test_a_scorer_that_hangs_is_bounded_by_call_timeout_s(monkeypatch):
    monkeypatch.setattr(score, "score_response", lambda *args: time.sleep(60))
    started = time.monotonic()
    result = score.compute_score("aime25", "\\boxed{5}", "5", call_timeout_s=0.5)
    assert time.monotonic() - started < 5.0
    assert result["reason"] == "timeout" and result["scorer_failed"] == 1.0 and result["score"] == 0.0


def test_wrong_inputs_still_raise():
    with pytest.raises(ValueError, match="unknown data_source"):
        score.compute_score("not_a_source", "\\boxed{5}", "5")
    with pytest.raises(ValueError, match="ground_truth"):
        score.compute_score("livecodebench", "```python\nprint(1)\n```", "not json")
    with pytest.raises(ValueError, match="call_timeout_s"):
        score.compute_score("aime25", "\\boxed{5}", "5", call_timeout_s=0)


def test_a_healthy_call_reports_no_failure():
    result = score.compute_score("aime25", "so \\boxed{5}", "5")
    assert result["score"] == 1.0 and result["scorer_failed"] == 0.0


def test_the_default_bound_follows_the_scorers_own_limit_so_long_code_runs_are_never_cut():
    from reward.options import RewardOptions

    options = RewardOptions()
    assert score.call_deadline_s("math", "5", options) == options.math_timeout_s + score.GUARD_MARGIN_S
    many_tests = json.dumps({"fn_name": None, "tests": [{"input": "1\n", "output": "1\n", "testtype": "stdin"}] * 120})
    # LiveCodeBench's whole-run limit for 120 tests at 6 s: (6 + 1) * 120 + 5 = 845 CPU seconds, backed
    # by 3 x 845 s of wall-clock time from the run's slot; before it, up to 600 s of waiting for the slot,
    # after it the teardown
    bound = 600.0 + 3 * 845.0 + code_tests.TEARDOWN_S
    assert score.call_deadline_s("code", many_tests, options) == bound + score.GUARD_MARGIN_S
    queue_of_60 = RewardOptions(code_queue_timeout_s=60)
    assert score.call_deadline_s("code", many_tests, queue_of_60) == bound - 540.0 + score.GUARD_MARGIN_S
    assert score.code_limits(RewardOptions(code_concurrency=3)).concurrency == 3  # the option reaches the sandbox
    assert score.call_deadline_s("code", many_tests, RewardOptions(call_timeout_s=30)) == 30
