"""The end-of-run summary (rows read, written, dropped by reason) and the progress bar."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# Inputs shorter than this get no progress bar: the summary is enough.
PROGRESS_MIN_ROWS = 2000


@dataclass
class RunSummary:
    """Counts of one preparation run; every row read is either written or dropped by a reason."""

    output: str
    rows_read: Counter = field(default_factory=Counter)  # per input location
    rows_written: int = 0
    dropped: Counter = field(default_factory=Counter)  # reason -> rows
    notes: Counter = field(default_factory=Counter)  # reason -> count, for changes that keep the row
    examples: dict[str, str] = field(default_factory=dict)  # reason -> first row location, for the report

    def drop(self, reason: str, location: str) -> None:
        """Count one dropped row (and remember the first location for this reason)."""
        self.dropped[reason] += 1
        self.examples.setdefault(reason, location)

    def note(self, what: str, count: int = 1) -> None:
        """Count a change made to rows that are kept (tests removed by a cap, ...)."""
        self.notes[what] += count

    @property
    def total_read(self) -> int:
        return sum(self.rows_read.values())

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def is_balanced(self) -> bool:
        """True when every row read was written or dropped (nothing lost silently)."""
        return self.total_read == self.rows_written + self.total_dropped

    def as_dict(self) -> dict:
        return {
            "output": self.output,
            "rows_read": dict(self.rows_read),
            "rows_written": self.rows_written,
            "dropped": dict(self.dropped),
            "notes": dict(self.notes),
            "first_dropped_row": dict(self.examples),
        }

    def format(self) -> str:
        lines = [f"summary for {self.output}"]
        for location, count in self.rows_read.items():
            lines.append(f"  read     {count:>9,}  {location}")
        lines.append(f"  written  {self.rows_written:>9,}")
        for reason, count in sorted(self.dropped.items(), key=lambda item: (-item[1], item[0])):
            lines.append(f"  dropped  {count:>9,}  {reason}  (first: {self.examples[reason]})")
        for what, count in sorted(self.notes.items()):
            lines.append(f"  note     {count:>9,}  {what}")
        return "\n".join(lines)

    def write_json(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.as_dict(), handle, indent=2, sort_keys=True)
            handle.write("\n")


def with_progress(items: Iterable[T], total: int | None, description: str, enabled: bool | None) -> Iterator[T]:
    """Wrap ``items`` in a tqdm bar on long inputs.

    ``enabled``: True forces the bar, False hides it, None shows it when stderr is a terminal
    and the input has at least ``PROGRESS_MIN_ROWS`` rows (or an unknown length).
    """
    if enabled is None:
        enabled = sys.stderr.isatty() and (total is None or total >= PROGRESS_MIN_ROWS)
    if not enabled:
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, total=total, desc=description, unit="row", mininterval=1.0, file=sys.stderr)
