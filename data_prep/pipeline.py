"""The run loop shared by the math and code CLIs.

For every input row: convert it (a source adapter builds the verl row or says why the row is
dropped), drop repeats (dedup: training rows by statement, evaluation rows by id, see
``dedup.py``), check it against evaluation problems (contamination),
validate it and write it. Every row read ends up written or counted under a drop reason;
a malformed row stops the run with its file and row unless ``skip_bad_rows`` is set.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.contamination import EvaluationIndex
from data_prep.dedup import Deduplicator
from data_prep.errors import DataPrepError, MalformedRowError, RowError
from data_prep.parquet_output import ValidatedParquetWriter
from data_prep.readers import InputSpec, RawRecord, RecordStream
from data_prep.summary import RunSummary, with_progress

# How many rows of each kind (skipped bad rows, answer conflicts, contamination matches)
# are listed one by one; the rest are counted.
LISTED_DETAILS = 10


@dataclass(frozen=True)
class PreparedRow:
    """A converted row (``extra_info`` still without ``index``) and its comparison text."""

    row: dict[str, Any]
    problem: str  # statement used for dedup and the contamination check
    answer: str  # reference answer (math) or ground truth (code): duplicates that disagree are reported
    notes: dict[str, int] = field(default_factory=dict)  # changes made to the row, for the summary


@dataclass(frozen=True)
class Dropped:
    """A row left out on purpose (a filter), with the reason counted in the summary."""

    reason: str


Converter = Callable[[InputSpec, RawRecord, int], "PreparedRow | Dropped"]


@dataclass
class PipelineOptions:
    """Run-wide choices of the CLIs."""

    output: Path
    dedup: bool = True
    evaluation_index: EvaluationIndex | None = None
    drop_contaminated: bool = False
    drop_near_duplicates: bool = False
    skip_bad_rows: bool = False
    progress: bool | None = None


@dataclass
class RowDetails:
    """Per-row lines worth reading (first ``LISTED_DETAILS`` of each kind, the rest counted)."""

    lines: list[str] = field(default_factory=list)
    per_kind: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, line: str) -> None:
        seen = self.per_kind.get(kind, 0)
        self.per_kind[kind] = seen + 1
        if seen < LISTED_DETAILS:
            self.lines.append(line)

    def format(self) -> list[str]:
        unlisted = [
            f"... and {count - LISTED_DETAILS} more {kind} not listed"
            for kind, count in self.per_kind.items()
            if count > LISTED_DETAILS
        ]
        return self.lines + unlisted


@dataclass
class PipelineResult:
    summary: RunSummary
    details: RowDetails


def run_pipeline(
    inputs: list[InputSpec],
    open_input: Callable[[InputSpec], RecordStream],
    convert: Converter,
    options: PipelineOptions,
) -> PipelineResult:
    """Convert, filter, dedup, check and write every row of ``inputs`` to ``options.output``."""
    summary = RunSummary(output=str(options.output))
    details = RowDetails()
    dedup = Deduplicator() if options.dedup else None
    writer = ValidatedParquetWriter(options.output)
    try:
        for spec in inputs:
            stream = open_input(spec)
            summary.rows_read[spec.location] += 0
            for ordinal, record in enumerate(
                with_progress(stream.records, stream.total, spec.source, options.progress)
            ):
                summary.rows_read[spec.location] += 1
                _process(spec, record, ordinal, convert, options, dedup, writer, summary, details)
        if writer.rows_accepted == 0:
            raise DataPrepError(f"no rows left to write to {options.output}:\n{summary.format()}")
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    summary.rows_written = writer.rows_written
    if not summary.is_balanced():  # a bug in this module, never an input problem
        raise AssertionError(f"row accounting is off: {summary.as_dict()}")
    return PipelineResult(summary, details)


def _process(
    spec: InputSpec,
    record: RawRecord,
    ordinal: int,
    convert: Converter,
    options: PipelineOptions,
    dedup: Deduplicator | None,
    writer: ValidatedParquetWriter,
    summary: RunSummary,
    details: RowDetails,
) -> None:
    try:
        if record.error is not None:
            raise RowError(*record.error)
        outcome = convert(spec, record, ordinal)
    except RowError as exc:
        if not options.skip_bad_rows:
            raise MalformedRowError(record.location, exc.reason, exc.detail) from None
        summary.drop(f"malformed: {exc.reason}", record.location)
        details.add("skipped bad rows", f"skipped {record.location}: {exc.detail}")
        return
    if isinstance(outcome, Dropped):
        summary.drop(outcome.reason, record.location)
        return
    if dedup is not None and _is_repeat(outcome, record.location, dedup, summary, details):
        return
    if options.evaluation_index is not None:
        match = options.evaluation_index.match(outcome.problem)
        if match is not None:
            near = match.is_near_duplicate
            details.add(
                "near duplicates" if near else "contamination matches", f"{record.location}: {match.describe()}"
            )
            # dropping near duplicates implies dropping equal statements too
            drop = options.drop_near_duplicates if near else options.drop_contaminated or options.drop_near_duplicates
            if drop:
                summary.drop(f"contaminated ({match.kind} match with an evaluation problem)", record.location)
                return
            flag = "--drop-near-duplicates" if near else "--drop-contaminated"
            summary.note(f"kept rows matching an evaluation problem ({match.kind}); {flag} drops them")
    for what, count in outcome.notes.items():
        summary.note(what, count)
    row = outcome.row
    row["extra_info"] = {**row["extra_info"], "index": writer.rows_accepted}
    writer.add(row, record.location)


def _is_repeat(
    outcome: PreparedRow, location: str, dedup: Deduplicator, summary: RunSummary, details: RowDetails
) -> bool:
    """Whether the row repeats a kept one (counted as dropped); evaluation rows are keyed by id."""
    extra_info = outcome.row["extra_info"]
    if extra_info.get("split") == "test":
        problem_id = f"{outcome.row['data_source']}/{extra_info['source_id']}"
        found = dedup.check_evaluation(problem_id, outcome.problem, outcome.answer, location)
        if found.same_statement_as:
            summary.note(
                "evaluation problems whose statement repeats another id's (kept; evaluation sets are keyed by id)"
            )
            details.add(
                "repeated evaluation statements",
                f"{location}: same statement as {found.same_statement_as} under another id (kept)",
            )
        reason = "duplicate problem id"
    else:
        found = dedup.check(outcome.problem, outcome.answer, location)
        reason = "duplicate problem"
    if not found.is_duplicate:
        return False
    summary.drop(reason, location)
    if found.answer_differs:
        summary.note("duplicates whose answer differs from the kept copy (kept the first)")
        details.add("answer conflicts", f"{location}: same problem as {found.first_location} with a different answer")
    return True


def report(result: PipelineResult, summary_json: str | None) -> None:
    """Print the details and the summary (stdout) and optionally save the summary as JSON."""
    for line in result.details.format():
        print(line)
    print(result.summary.format())
    if summary_json:
        result.summary.write_json(summary_json)
    sys.stdout.flush()
