"""``python -m data_prep.code``: LiveCodeBench and code training sets to verl RL parquet.

Examples (``DATA_DIR`` defaults to ``~/data/dfpo``; the recipes read these paths)::

    # LiveCodeBench v6 window (contest dates 2025-02-01 .. 2025-05-01 of release_v6)
    python -m data_prep.code --input livecodebench=hf:livecodebench/code_generation_lite \\
        --release release_v6 --start-date 2025-02-01 --end-date 2025-05-01 \\
        --output $DATA_DIR/lcb_v6.parquet

    # training set: DeepCoder's training configs + PrimeIntellect, decontaminated against LCB v6
    python -m data_prep.code \\
        --input deepcoder=hf:agentica-org/DeepCoder-Preview-Dataset:lcbv5@train \\
        --input deepcoder=hf:agentica-org/DeepCoder-Preview-Dataset:primeintellect@train \\
        --input deepcoder=hf:agentica-org/DeepCoder-Preview-Dataset:taco@train \\
        --input primeintellect=hf:PrimeIntellect/verifiable-coding-problems@train \\
        --decontaminate-against $DATA_DIR/lcb_v6.parquet --drop-contaminated \\
        --output $DATA_DIR/code_train.parquet

A local folder holding LiveCodeBench's release files (test.jsonl .. test6.jsonl) can replace
the hub id (``--input livecodebench=/path/to/code_generation_lite``), as can a single jsonl.
Dates are compared as LiveCodeBench does: start 00:00 <= contest_date <= end 00:00.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from data_prep.cli_common import add_common_arguments, input_split, parse_inputs, pipeline_options, run_cli
from data_prep.code_ground_truth import encode_ground_truth
from data_prep.code_prompts import code_messages
from data_prep.code_sources import CODE_SOURCE_TABLE, CodeProblem, Notes
from data_prep.code_test_caps import CodeTestCaps, apply_test_caps
from data_prep.errors import DataPrepError, RowError
from data_prep.livecodebench_releases import LIVECODEBENCH_HF_DATASET, RELEASE_FILES
from data_prep.pipeline import Dropped, PreparedRow, run_pipeline
from data_prep.readers import InputSpec, RawRecord, open_records

DEFAULT_RELEASE = "release_v6"
# Training rows carry every test into the parquet that the trainer loads whole; these
# defaults keep a row under ~1 MB. Evaluation (LiveCodeBench) keeps every test unless capped.
DEFAULT_TRAIN_CAPS = CodeTestCaps(max_tests=32, max_bytes=1_000_000)


class CodeFilters:
    """Date window (inclusive, as LiveCodeBench compares), platforms and difficulties."""

    def __init__(self, start: datetime | None, end: datetime | None, platforms: list[str], difficulties: list[str]):
        if start is not None and end is not None and start > end:
            raise DataPrepError(f"--start-date {start:%Y-%m-%d} is after --end-date {end:%Y-%m-%d}")
        self.start, self.end = start, end
        self.platforms = {p.lower() for p in platforms}
        self.difficulties = {d.lower() for d in difficulties}

    def reason_to_drop(self, problem: CodeProblem) -> str | None:
        """Why the problem is filtered out, or None to keep it."""
        if self.start is not None or self.end is not None:
            if problem.contest_date is None:
                return "no contest_date (a date window is set)"
            if self.start is not None and problem.contest_date < self.start:
                return f"contest_date before {self.start:%Y-%m-%d}"
            if self.end is not None and problem.contest_date > self.end:
                return f"contest_date after {self.end:%Y-%m-%d}"
        if self.platforms and problem.platform.lower() not in self.platforms:
            return "platform not selected"
        if self.difficulties and problem.difficulty.lower() not in self.difficulties:
            return "difficulty not selected"
        return None


def build_code_row(
    source: str, split: str, problem: CodeProblem, tests, origin: str, with_system_message: bool
) -> dict:
    """The verl row of one code problem (``extra_info.index`` is added when written)."""
    return {
        "data_source": source,
        "prompt": code_messages(problem.question, problem.starter_code, problem.fn_name, with_system_message),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": encode_ground_truth(tests, problem.fn_name)},
        "extra_info": {
            "split": split,
            "source_id": problem.source_id,
            "problem": problem.question,
            "origin": origin,
            "title": problem.title,
            "platform": problem.platform,
            "difficulty": problem.difficulty,
            "contest_date": problem.contest_date.isoformat() if problem.contest_date else "",
            "starter_code": problem.starter_code,
            "num_tests": len(tests),
        },
    }


def origin_of(spec: InputSpec, release: str) -> str:
    """``extra_info.origin``: the input, plus the release tag when release shards were read."""
    reads_release_shards = spec.hf_dataset == LIVECODEBENCH_HF_DATASET or (spec.path is not None and spec.path.is_dir())
    if reads_release_shards and not spec.hf_config:  # a config in the input already names the release
        return f"{spec.origin} ({release})"
    return spec.origin


def make_code_converter(split: str, filters: CodeFilters, caps: CodeTestCaps, with_system_message: bool, release: str):
    """The per-row converter of the pipeline for code sources."""

    def convert(spec: InputSpec, record: RawRecord, ordinal: int) -> PreparedRow | Dropped:
        assert record.data is not None
        notes = Notes()
        problem = CODE_SOURCE_TABLE[spec.source].read(record.data, ordinal, notes)
        if problem.language != "python":
            return Dropped(f"language is {problem.language}, not python")
        reason = filters.reason_to_drop(problem)
        if reason is not None:
            return Dropped(reason)
        if not problem.tests:
            return Dropped("no tests")
        kinds = {test.testtype for test in problem.tests}
        if len(kinds) > 1:
            raise RowError("mixed test types", "the problem mixes stdin and functional tests")
        if "functional" in kinds and problem.fn_name is None:
            raise RowError("missing function name", "functional tests need a function name (fn_name / func_name)")
        capped = apply_test_caps(problem.tests, caps)
        if not capped.kept:
            return Dropped("no test fits in --max-test-bytes")
        if capped.removed_by_count:
            notes["problems with tests removed by --max-tests"] = 1
            notes["tests removed by --max-tests"] = capped.removed_by_count
        if capped.removed_by_bytes:
            notes["problems with tests removed by --max-test-bytes"] = 1
            notes["tests removed by --max-test-bytes"] = capped.removed_by_bytes
        row = build_code_row(spec.source, split, problem, capped.kept, origin_of(spec, release), with_system_message)
        return PreparedRow(row, problem.question, row["reward_model"]["ground_truth"], dict(notes))

    return convert


def _date(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.code",
        description="Prepare LiveCodeBench and code training sets as verl RL parquet.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Examples", 1)[1].split("\n", 1)[1],
    )
    add_common_arguments(parser, tuple(CODE_SOURCE_TABLE))
    parser.add_argument(
        "--release",
        choices=sorted(RELEASE_FILES),
        default=DEFAULT_RELEASE,
        metavar="TAG",
        help="LiveCodeBench release read from a folder or the hub id: release_v1 .. release_v6, release_latest, "
        f"vN (one shard) or vA_vB (shards A..B); default {DEFAULT_RELEASE}",
    )
    parser.add_argument(
        "--start-date", type=_date, help="keep problems with contest_date on or after this day (YYYY-MM-DD)"
    )
    parser.add_argument(
        "--end-date", type=_date, help="keep problems with contest_date up to this day 00:00 (YYYY-MM-DD)"
    )
    parser.add_argument(
        "--platform", action="append", default=[], help="repeatable: leetcode, atcoder, codeforces, ..."
    )
    parser.add_argument("--difficulty", action="append", default=[], help="repeatable: easy, medium, hard, ...")
    parser.add_argument(
        "--max-tests",
        type=int,
        help=f"keep at most this many tests per problem (training default {DEFAULT_TRAIN_CAPS.max_tests}; evaluation: "
        "all)",
    )
    parser.add_argument(
        "--max-test-bytes",
        type=int,
        help=f"byte budget of a problem's tests (training default {DEFAULT_TRAIN_CAPS.max_bytes:,}; evaluation: none)",
    )
    parser.add_argument("--no-caps", action="store_true", help="keep every test of training problems too")
    parser.add_argument(
        "--system-message",
        action="store_true",
        help="prepend LiveCodeBench's generic system message to each prompt (default: user message only)",
    )
    return parser.parse_args(argv)


def caps_for(split: str, args: argparse.Namespace) -> CodeTestCaps:
    """The caps of this run: explicit options win, else the training defaults (none for evaluation)."""
    if args.no_caps:
        if args.max_tests is not None or args.max_test_bytes is not None:
            raise DataPrepError("--no-caps cannot be combined with --max-tests / --max-test-bytes")
        return CodeTestCaps()
    defaults = DEFAULT_TRAIN_CAPS if split == "train" else CodeTestCaps()
    return CodeTestCaps(
        max_tests=args.max_tests if args.max_tests is not None else defaults.max_tests,
        max_bytes=args.max_test_bytes if args.max_test_bytes is not None else defaults.max_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)

    def run():
        specs = parse_inputs(args.input, tuple(CODE_SOURCE_TABLE))
        split = input_split(specs, {name: source.split for name, source in CODE_SOURCE_TABLE.items()})
        filters = CodeFilters(args.start_date, args.end_date, args.platform, args.difficulty)
        options = pipeline_options(args)
        converter = make_code_converter(split, filters, caps_for(split, args), args.system_message, args.release)

        def open_input(spec: InputSpec):  # only LiveCodeBench inputs are read as release shards
            return open_records(spec, args.release if spec.source == "livecodebench" else None)

        return run_pipeline(specs, open_input, converter, options)

    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
