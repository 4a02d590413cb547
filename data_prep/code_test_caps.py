"""Caps on the tests kept per code problem: a count and a byte budget.

Tests are kept in their original order (LiveCodeBench: public tests first): first the
count cap keeps the first ``max_tests``; then each remaining test is kept if it still fits
in ``max_bytes`` (UTF-8 bytes of input plus output, summed over kept tests). A problem
with no test left is dropped by the caller. Counts of removed tests are reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from data_prep.code_ground_truth import CodeTest
from data_prep.errors import DataPrepError


@dataclass(frozen=True)
class CodeTestCaps:
    """``None`` means no cap."""

    max_tests: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, option in (("max_tests", "--max-tests"), ("max_bytes", "--max-test-bytes")):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DataPrepError(f"{option} must be at least 1 (got {value}); omit it for no cap")


@dataclass(frozen=True)
class CappedTests:
    kept: list[CodeTest]
    removed_by_count: int
    removed_by_bytes: int


def apply_test_caps(tests: list[CodeTest], caps: CodeTestCaps) -> CappedTests:
    """Apply the count cap, then the byte budget (see module docstring)."""
    by_count = tests if caps.max_tests is None else tests[: caps.max_tests]
    removed_by_count = len(tests) - len(by_count)
    if caps.max_bytes is None:
        return CappedTests(list(by_count), removed_by_count, 0)
    kept: list[CodeTest] = []
    used = 0
    for test in by_count:
        size = test.size_bytes()
        if used + size <= caps.max_bytes:
            kept.append(test)
            used += size
    return CappedTests(kept, removed_by_count, len(by_count) - len(kept))
