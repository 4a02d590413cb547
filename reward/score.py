"""The verl reward entry point: ``compute_score`` and ``compute_score_async``.

Select it in verl 0.9.1 with::

    reward.custom_reward_function.path=<repo>/reward/score.py
    reward.custom_reward_function.name=compute_score        # or compute_score_async
    +reward.custom_reward_function.reward_kwargs.score_mode=signed   # optional, see RewardOptions

It dispatches on ``data_source`` (:mod:`reward.sources`): math sources go to
:mod:`reward.math_scoring`, code sources to :mod:`reward.code_tests` (local sandbox) or
:mod:`reward.sandbox_fusion`.  It is safe to call from any thread (verl's naive and dapo
managers use ``run_in_executor``), from asyncio through ``compute_score_async``, and in
the processes of verl's ``remote`` manager: nothing here relies on ``signal.alarm``, and
every bound is enforced from outside the work it limits.

Returns a dict with the same keys for every source: ``score`` (float), ``acc`` (1.0 when
fully correct, else 0.0), ``pred`` (extracted answer or program, or None), ``reason``
(see :data:`reward.outcome.REASONS`), ``pass_fraction`` and ``scorer_failed``. A call whose
scoring raises unexpectedly or runs past ``call_timeout_s`` scores 0 instead of stopping the run
(:mod:`reward.guard`); wrong inputs (unknown ``data_source``, malformed ground truth, bad options)
still raise ``ValueError``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Loaded by file path (verl's custom_reward_function.path): make the package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reward import outcome  # noqa: E402
from reward.code_tests import CodeLimits, parse_ground_truth, score_code  # noqa: E402
from reward.guard import INPUT_ERRORS, ScoringDeadlineExceeded, call_with_deadline  # noqa: E402
from reward.math_scoring import score_math  # noqa: E402
from reward.options import RewardOptions  # noqa: E402
from reward.response_format import answer_region, is_truncated  # noqa: E402
from reward.sources import source_kind  # noqa: E402

logger = logging.getLogger(__name__)

GUARD_MARGIN_S = 60.0
"""Seconds the whole-call guard waits beyond the scorer's own limit before it steps in."""


def compute_score(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None, **kwargs) -> dict:
    """Score one response; see the module docstring for the returned keys.

    Args:
        data_source: one of :data:`reward.sources.KNOWN_SOURCES` (ValueError otherwise).
        solution_str: the decoded model response.
        ground_truth: the answer string (math) or the JSON test specification (code).
        extra_info: verl's per-row extra info; only ``response_truncated`` is read
            (:mod:`reward.response_format`).
        **kwargs: :class:`reward.options.RewardOptions` fields (from ``reward_kwargs``).
    """
    options = RewardOptions.from_kwargs(kwargs)
    kind = source_kind(data_source)
    if not isinstance(solution_str, str):
        raise ValueError(f"solution_str must be the decoded response string, got {type(solution_str).__name__}")
    deadline_s = call_deadline_s(kind, ground_truth, options)
    region = answer_region(solution_str, options.response_format, truncated=is_truncated(extra_info))
    if region.text is None:
        # A thinking model's response with no final answer: nothing is extracted from its thinking
        return outcome.to_reward_dict(outcome.all_or_nothing(outcome.UNFINISHED, None), options.score_mode)
    try:
        verdict = call_with_deadline(lambda: score_response(kind, region.text, ground_truth, options), deadline_s)
    except INPUT_ERRORS:
        raise  # wrong data or options: to be fixed, not scored
    except ScoringDeadlineExceeded as error:
        logger.warning("reward: %s for a %s response (%d characters); scored 0", error, data_source, len(solution_str))
        verdict = outcome.Verdict(outcome.TIMEOUT, None, 0.0, 0.0, guarded_failure=True)
    except Exception:
        logger.warning("reward: scoring a %s response raised; scored 0", data_source, exc_info=True)
        verdict = outcome.Verdict(outcome.SCORER_ERROR, None, 0.0, 0.0, guarded_failure=True)
    return outcome.to_reward_dict(verdict, options.score_mode)


def code_limits(options: RewardOptions) -> CodeLimits:
    return CodeLimits(
        test_timeout_s=options.code_test_timeout_s,
        problem_budget_s=options.code_problem_budget_s,
        memory_mb=options.code_memory_mb,
        output_mb=options.code_output_mb,
        concurrency=options.code_concurrency,
        queue_timeout_s=options.code_queue_timeout_s,
    )


def call_deadline_s(kind: str, ground_truth, options: RewardOptions) -> float:
    """The whole-call bound of :mod:`reward.guard`: ``call_timeout_s`` when given, else the
    scorer's own limit for this response plus :data:`GUARD_MARGIN_S` — the math check's limit, or
    the longest a code call takes (its wait for a sandbox slot, the run's wall-clock backstop, which
    grows with the number of tests, and the teardown: ``CodeLimits.call_bound_s``), so the guard never
    cuts a run its scorer would still finish."""
    if options.call_timeout_s is not None:
        return options.call_timeout_s
    if kind == "math":
        return options.math_timeout_s + GUARD_MARGIN_S
    return code_limits(options).call_bound_s(len(parse_ground_truth(ground_truth).tests)) + GUARD_MARGIN_S


def score_response(kind: str, solution_str: str, ground_truth, options: RewardOptions) -> outcome.Verdict:
    """The scorer's verdict on one response (math or code), unguarded."""
    if kind == "math":
        return score_math(solution_str, ground_truth, timeout_s=options.math_timeout_s, workers=options.math_workers)
    limits = code_limits(options)
    if options.code_backend == "local":
        return score_code(solution_str, ground_truth, mode=options.code_mode, limits=limits)
    from reward.sandbox_fusion import score_code_remote

    return score_code_remote(
        solution_str,
        ground_truth,
        url=options.sandbox_fusion_url,
        mode=options.code_mode,
        limits=limits,
        concurrency=options.sandbox_fusion_concurrency,
    )


async def compute_score_async(
    data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None, **kwargs
) -> dict:
    """``compute_score`` for asyncio callers: the blocking work runs in the loop's executor."""
    loop = asyncio.get_running_loop()
    call = functools.partial(compute_score, data_source, solution_str, ground_truth, extra_info, **kwargs)
    return await loop.run_in_executor(None, call)
