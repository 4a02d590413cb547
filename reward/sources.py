"""The ``data_source`` names this reward understands, in one place.

``data_prep`` writes exactly these strings into the ``data_source`` column of the verl
parquet files; :mod:`reward.score` dispatches on them.  Import the constants instead of
spelling the names again.
"""

from __future__ import annotations

from typing import Literal

MATH_SOURCES: tuple[str, ...] = (
    "math_dapo",
    "aime24",
    "aime25",
    "hmmt25",
    "math500",
    "deepscaler",
    # the toy task of the tiny CPU recipes (cpu_examples/addition_task.py): single-digit sums
    "arithmetic",
    "arithmetic_test",
    # the CPU quickstart's task (cpu_examples/sums_task.py): single-digit sums with a demonstration turn
    "digit_sums",
    "digit_sums_test",
)
"""Sources whose ground truth is a final answer string checked with math-verify."""

CODE_SOURCES: tuple[str, ...] = ("livecodebench", "deepcoder", "primeintellect")
"""Sources whose ground truth is a JSON test specification run in the sandbox."""

KNOWN_SOURCES: tuple[str, ...] = MATH_SOURCES + CODE_SOURCES

SourceKind = Literal["math", "code"]


def source_kind(data_source: str) -> SourceKind:
    """Return ``"math"`` or ``"code"`` for a known ``data_source``.

    Raises:
        ValueError: for an unknown name, listing every known one.
    """
    if data_source in MATH_SOURCES:
        return "math"
    if data_source in CODE_SOURCES:
        return "code"
    raise ValueError(
        f"unknown data_source {data_source!r}: the DFPO reward knows math sources "
        f"{', '.join(MATH_SOURCES)} and code sources {', '.join(CODE_SOURCES)}; "
        "fix the data_source column written by data_prep or add the source to reward/sources.py"
    )
