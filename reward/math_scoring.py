"""Math scoring: extract the final answer, try the exact path, else ask math-verify.

Order of work for one response: :func:`reward.math_answer.extract_answer` (``no_answer``
when absent) -> :func:`reward.math_answer.quick_compare` (no process, microseconds) ->
a bounded LRU cache of earlier math-verify verdicts -> the hard-timeout worker pool.
Timeouts and worker failures are never cached (they depend on load, not on the pair).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from reward import outcome
from reward.math_answer import extract_answer, quick_compare
from reward.math_verify_pool import get_default_pool

PRED_CHARS_KEPT = 4096
"""Longer extracted answers are reported truncated in ``pred`` (scoring uses the whole)."""
CACHE_ENTRIES = 65536


class _VerdictCache:
    """Thread-safe LRU map (gold, pred) -> equal?"""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> bool | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: tuple[str, str], value: bool) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


verdict_cache = _VerdictCache(CACHE_ENTRIES)


def gold_answer(ground_truth: object) -> str:
    """The reference answer as a string; a ``\\boxed{}`` around it is removed."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, (str, int, float)):
        raise ValueError(
            "math ground_truth must be the answer string (reward_model.ground_truth), "
            f"got {type(ground_truth).__name__}"
        )
    gold = str(ground_truth).strip()
    if "\\boxed" in gold:
        gold = extract_answer(gold) or gold
    if not gold:
        raise ValueError("math ground_truth is empty; every math row needs reward_model.ground_truth")
    return gold


def _shown(pred: str) -> str:
    return pred if len(pred) <= PRED_CHARS_KEPT else pred[:PRED_CHARS_KEPT] + "...[truncated]"


def score_math(response: str, ground_truth: object, *, timeout_s: float, workers: int | None = None) -> outcome.Verdict:
    """Grade one math response against its reference answer (all-or-nothing).

    ``timeout_s`` bounds the whole call, counted from its start (waiting for a
    math-verify worker included); past it the verdict is ``timeout``.
    """
    started = time.monotonic()
    gold = gold_answer(ground_truth)
    pred = extract_answer(response)
    if pred is None:
        return outcome.all_or_nothing(outcome.NO_ANSWER, None)
    equal = quick_compare(gold, pred)
    if equal is None:
        equal = verdict_cache.get((gold, pred))
    if equal is None:
        comparison = get_default_pool(workers).compare(gold, pred, timeout_s, started=started)
        if comparison.status not in ("equal", "different"):
            reason = outcome.TIMEOUT if comparison.status == "timeout" else outcome.VERIFIER_ERROR
            return outcome.all_or_nothing(reason, _shown(pred))
        equal = comparison.status == "equal"
        verdict_cache.put((gold, pred), equal)
    return outcome.all_or_nothing(outcome.CORRECT if equal else outcome.WRONG_ANSWER, _shown(pred))
