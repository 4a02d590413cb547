"""Errors raised while preparing data, each naming where the problem is and what to do."""

from __future__ import annotations


class DataPrepError(Exception):
    """A problem with the inputs or options of a preparation run (message says what to do)."""


class MalformedRowError(DataPrepError):
    """One input row cannot be converted.

    ``location`` names the file (or Hugging Face dataset) and the row number, so the message
    points at the exact row; ``reason`` is a short, stable category used to count rows skipped
    with ``--skip-bad-rows``.
    """

    def __init__(self, location: str, reason: str, detail: str):
        self.location = location
        self.reason = reason
        self.detail = detail
        super().__init__(f"{location}: {detail} (pass --skip-bad-rows to count and skip such rows instead of stopping)")


class RowError(ValueError):
    """Raised by adapters for a bad row; the pipeline adds the row's location.

    ``reason`` is a short category (for the summary), ``detail`` the full explanation.
    """

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        self.detail = detail
        super().__init__(detail)
