"""The result of scoring one response: reasons, score conventions and the dict verl receives.

Every scorer returns a :class:`Verdict`; :func:`to_reward_dict` turns it into the dict
handed to verl.  All results carry the same keys whatever the source, because verl's
reward managers collect every key into per-sample lists and a batch may mix math and
code samples.
"""

from __future__ import annotations

from dataclasses import dataclass

CORRECT = "correct"
WRONG_ANSWER = "wrong_answer"
NO_ANSWER = "no_answer"
TIMEOUT = "timeout"
RUNTIME_ERROR = "runtime_error"
SANDBOX_ERROR = "sandbox_error"
VERIFIER_ERROR = "verifier_error"
SCORER_ERROR = "scorer_error"
UNFINISHED = "unfinished"

REASONS: tuple[str, ...] = (
    CORRECT,
    WRONG_ANSWER,
    NO_ANSWER,
    TIMEOUT,
    RUNTIME_ERROR,
    SANDBOX_ERROR,
    VERIFIER_ERROR,
    SCORER_ERROR,
    UNFINISHED,
)
"""``correct``; ``wrong_answer``; ``no_answer`` (no boxed answer, no ``Answer:`` line, no
fenced code); ``timeout`` (the verifier or a test ran past its wall-clock limit);
``runtime_error`` (the program crashed, exceeded a resource limit or printed nothing usable);
``sandbox_error`` (the sandbox itself could not run, an infrastructure fault);
``verifier_error`` (the math-verify worker failed for a reason other than time);
``scorer_error`` (the scoring code itself raised unexpectedly: see :mod:`reward.guard`);
``unfinished`` (a thinking model's response that never reached its final answer, or was cut off at
the length cap: see :mod:`reward.response_format`; its answer is not looked at)."""

SCORE_MODES: tuple[str, ...] = ("binary", "signed")


@dataclass(frozen=True)
class Verdict:
    """What a scorer concluded about one response.

    Attributes:
        reason: one of :data:`REASONS`.
        pred: the extracted answer (math) or program (code); ``None`` when nothing was found.
        pass_fraction: fraction of the checks that passed, in [0, 1] (math: 0 or 1).
        credit: the fraction that the score is computed from (equal to ``pass_fraction``
            when partial credit is on, else 1.0 for correct and 0.0 otherwise).
    """

    reason: str
    pred: str | None
    pass_fraction: float
    credit: float
    guarded_failure: bool = False
    """True when the scorer gave no verdict on the response: :mod:`reward.guard` replaced a call that
    raised or ran past its whole-call limit, or a code call got no sandbox slot in time
    (``code_queue_timeout_s``). Reported as ``scorer_failed``."""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown verdict reason {self.reason!r}; expected one of {REASONS}")
        if not (0.0 <= self.pass_fraction <= 1.0 and 0.0 <= self.credit <= 1.0):
            raise ValueError(f"pass_fraction and credit must lie in [0, 1], got {self.pass_fraction}, {self.credit}")

    @property
    def correct(self) -> bool:
        return self.reason == CORRECT


def all_or_nothing(reason: str, pred: str | None) -> Verdict:
    """A verdict with no partial credit: correct scores full credit, anything else none."""
    full = 1.0 if reason == CORRECT else 0.0
    return Verdict(reason=reason, pred=pred, pass_fraction=full, credit=full)


def check_score_mode(score_mode: str) -> None:
    """Raise a ValueError naming the valid modes when ``score_mode`` is not one of them."""
    if score_mode not in SCORE_MODES:
        raise ValueError(
            f"score_mode={score_mode!r} is not supported; use 'binary' (1 correct / 0 otherwise) "
            "or 'signed' (+1 / -1, DAPO style) in reward.custom_reward_function.reward_kwargs"
        )


def to_reward_dict(verdict: Verdict, score_mode: str = "binary") -> dict:
    """The dict verl's reward managers expect: ``score`` plus per-sample extra info.

    ``binary`` maps credit c in [0, 1] to c; ``signed`` maps it to 2c - 1 (so +1 / -1 for
    all-or-nothing verdicts, the DAPO convention).
    """
    check_score_mode(score_mode)
    score = verdict.credit if score_mode == "binary" else 2.0 * verdict.credit - 1.0
    return {
        "score": float(score),
        "acc": 1.0 if verdict.correct else 0.0,
        "pred": verdict.pred,
        "reason": verdict.reason,
        "pass_fraction": float(verdict.pass_fraction),
        # 1.0 when the whole-call guard had to step in (reward.guard): verl averages numeric keys
        # into its metrics, so a run shows how often its reward failed instead of scoring.
        "scorer_failed": 1.0 if verdict.guarded_failure else 0.0,
        # 1.0 when the response never reached its final answer (reward.response_format): counted apart
        # from wrong answers in verl's metrics, since it measures length, not correctness
        "unfinished": 1.0 if verdict.reason == UNFINISHED else 0.0,
    }
