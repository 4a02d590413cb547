"""The last line of defence of one reward call: a wall-clock bound and a contained failure.

The scorers bound their own work (math-verify in killable worker processes, programs in the
sandbox, both against limits counted from the call's start), so in a healthy run nothing here
fires. It exists for what they cannot foresee — a bug in a scorer, a wedged worker pool, an
exception from a library on some odd response — because in verl one reward call that raises
stops the whole training run, and one that never returns stalls it forever.

:func:`call_with_deadline` runs the scoring in a daemon thread and waits at most ``timeout_s``:
past that it raises :class:`ScoringDeadlineExceeded` and abandons the thread (Python cannot
stop a thread; a daemon thread does not keep the process alive). :mod:`reward.score` turns
that, and any unexpected exception, into a 0 score with reason ``timeout`` or ``scorer_error``
(counted in verl's metrics through the ``scorer_failed`` key, logged with the traceback).
Errors in the *inputs* — an unknown ``data_source``, a malformed ground truth, a bad option —
are ``ValueError``/``TypeError`` and are not contained: they are configuration or data errors to
fix, not failures of one response.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError)
"""Exceptions meaning the call's inputs are wrong: raised to the caller, never scored 0."""


class ScoringDeadlineExceeded(RuntimeError):
    """A reward call ran past its whole-call limit."""


def call_with_deadline(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()``'s result, or its exception, if it finishes within ``timeout_s`` seconds; else
    :class:`ScoringDeadlineExceeded` (``fn`` keeps running in an abandoned daemon thread)."""
    outcome: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error
        finally:
            done.set()

    thread = threading.Thread(target=target, name="reward-call", daemon=True)
    thread.start()
    if not done.wait(timeout_s):
        raise ScoringDeadlineExceeded(f"the reward call did not return within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
