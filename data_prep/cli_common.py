"""Command-line options and error handling shared by ``data_prep.math`` and ``data_prep.code``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from data_prep.contamination import add_ngram_argument, load_evaluation_index
from data_prep.errors import DataPrepError
from data_prep.pipeline import PipelineOptions, PipelineResult, report
from data_prep.readers import InputSpec, parse_input_spec

DATA_DIR_HELP = "DATA_DIR is where the recipes read data from (default ~/data/dfpo)"


def add_common_arguments(parser: argparse.ArgumentParser, sources: tuple[str, ...]) -> None:
    """Inputs, output, dedup, contamination, bad-row handling, progress and summary options."""
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="SOURCE=LOCATION",
        help=f"repeatable; SOURCE is one of {', '.join(sources)}; LOCATION is a .jsonl/.json/.parquet file "
        "or hf:OWNER/NAME[:CONFIG][@SPLIT] (a Hugging Face dataset, downloaded by the datasets library)",
    )
    parser.add_argument("--output", required=True, help=f"parquet file to write; {DATA_DIR_HELP}")
    parser.add_argument(
        "--no-dedup",
        action="store_true",
        help="keep repeated problems (dedup is on by default: training sets by normalised statement, evaluation sets "
        "by problem id)",
    )
    parser.add_argument(
        "--decontaminate-against",
        type=Path,
        nargs="+",
        default=[],
        metavar="EVAL.parquet",
        help="prepared evaluation files; rows whose problem matches one of theirs (exact or normalised text) are "
        "reported",
    )
    parser.add_argument(
        "--drop-contaminated",
        action="store_true",
        help="drop the rows found by --decontaminate-against with an exact or normalised-text match",
    )
    parser.add_argument(
        "--drop-near-duplicates",
        action="store_true",
        help="drop near duplicates too: rows sharing a run of --ngram-size words with an evaluation problem, "
        "as well as the rows --drop-contaminated drops (near duplicates are always reported)",
    )
    add_ngram_argument(parser)
    parser.add_argument(
        "--skip-bad-rows", action="store_true", help="count and skip malformed rows instead of stopping at the first"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: on a terminal, for inputs of 2,000 rows or more)",
    )
    parser.add_argument("--summary-json", metavar="PATH", help="also write the run summary as JSON")


def parse_inputs(texts: list[str], sources: tuple[str, ...]) -> list[InputSpec]:
    """Parse the ``--input`` values."""
    return [parse_input_spec(text, sources) for text in texts]


def input_split(specs: list[InputSpec], split_of_source: dict[str, str]) -> str:
    """The split (``train``/``test``) shared by all inputs; training and evaluation sets never mix."""
    splits = {split_of_source[spec.source] for spec in specs}
    if len(splits) != 1:
        by_split = {split: sorted({s.source for s in specs if split_of_source[s.source] == split}) for split in splits}
        raise DataPrepError(
            f"training and evaluation sources cannot share an output file: {by_split}; run the command once per split"
        )
    return splits.pop()


def pipeline_options(args: argparse.Namespace) -> PipelineOptions:
    """The run-wide options given by :func:`add_common_arguments` (evaluation files read here)."""
    paths: list[Path] = args.decontaminate_against
    return PipelineOptions(
        output=Path(args.output).expanduser(),
        dedup=not args.no_dedup,
        evaluation_index=load_evaluation_index(paths, args.ngram_size) if paths else None,
        drop_contaminated=args.drop_contaminated,
        drop_near_duplicates=args.drop_near_duplicates,
        skip_bad_rows=args.skip_bad_rows,
        progress=args.progress,
    )


def run_cli(run: Callable[[], PipelineResult], args: argparse.Namespace) -> int:
    """Run, print the summary; on a data error print it and return exit status 2."""
    try:
        for flag in ("drop_contaminated", "drop_near_duplicates"):
            if getattr(args, flag) and not args.decontaminate_against:
                raise DataPrepError(f"--{flag.replace('_', '-')} needs --decontaminate-against EVAL.parquet ...")
        result = run()
    except DataPrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(result, args.summary_json)
    return 0
