"""``python -m data_prep.math``: math problem sets to verl RL parquet.

Examples (``DATA_DIR`` defaults to ``~/data/dfpo``; the recipes read these paths)::

    python -m data_prep.math --input aime25=hf:math-ai/aime25@test --output $DATA_DIR/aime25.parquet
    python -m data_prep.math --input aime24=hf:Maxwell-Jia/AIME_2024@train --output $DATA_DIR/aime24.parquet
    python -m data_prep.math --input hmmt25=hf:MathArena/hmmt_feb_2025@train --output $DATA_DIR/hmmt25.parquet
    python -m data_prep.math --input math500=hf:HuggingFaceH4/MATH-500@test --output $DATA_DIR/math500.parquet
    python -m data_prep.math --input math_dapo=hf:BytedTsinghua-SIA/DAPO-Math-17k@train \\
        --output $DATA_DIR/math_train.parquet --drop-contaminated \\
        --decontaminate-against $DATA_DIR/aime24.parquet $DATA_DIR/aime25.parquet \\
                                $DATA_DIR/hmmt25.parquet $DATA_DIR/math500.parquet

Training sources (math_dapo, deepscaler) and evaluation sources (aime24, aime25, hmmt25,
math500) cannot be mixed in one output: the split is taken from the sources.

``--demonstration PROBLEM ANSWER`` puts one solved example before every problem (a user turn and
the assistant's answer, see ``data_prep/math_prompts.py``); a row whose problem is the
demonstration's own is dropped (counted in the summary), since its answer is in its prompt. The CPU
quickstart's task is written this way (``--demonstration "What is 2 + 5?" 7``, by
``cpu_examples/sums_task.py``).
"""

from __future__ import annotations

import argparse
import sys

from data_prep.cli_common import add_common_arguments, input_split, parse_inputs, pipeline_options, run_cli
from data_prep.math_prompts import DEFAULT_TEMPLATE, TEMPLATES, math_messages
from data_prep.math_sources import MATH_SOURCE_TABLE
from data_prep.pipeline import Dropped, PreparedRow, run_pipeline
from data_prep.readers import InputSpec, RawRecord, open_records


def build_math_row(
    source: str,
    split: str,
    problem: str,
    answer: str,
    source_id: str,
    origin: str,
    template: str,
    demonstration: tuple[str, str] | None = None,
) -> dict:
    """The verl row of one math problem (``extra_info.index`` is added when written)."""
    return {
        "data_source": source,
        "prompt": math_messages(problem, template, demonstration),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "source_id": source_id, "problem": problem, "origin": origin},
    }


DEMONSTRATION_DROP_REASON = "the --demonstration problem itself (its answer is in every prompt)"


def make_math_converter(split: str, template: str, demonstration: tuple[str, str] | None = None):
    """The per-row converter of the pipeline for math sources."""

    def convert(spec: InputSpec, record: RawRecord, ordinal: int) -> PreparedRow | Dropped:
        assert record.data is not None
        problem = MATH_SOURCE_TABLE[spec.source].read(record.data, ordinal)
        if demonstration is not None and problem.problem == demonstration[0].strip():
            return Dropped(DEMONSTRATION_DROP_REASON)
        row = build_math_row(
            spec.source, split, problem.problem, problem.answer, problem.source_id, spec.origin, template, demonstration
        )
        return PreparedRow(row, problem.problem, problem.answer)

    return convert


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.math",
        description="Prepare math problem sets as verl RL parquet (see the module docstring for the paper's sets).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Examples", 1)[1].split("\n", 1)[1],
    )
    add_common_arguments(parser, tuple(MATH_SOURCE_TABLE))
    parser.add_argument(
        "--template",
        choices=TEMPLATES,
        default=DEFAULT_TEMPLATE,
        help="prompt wording: 'boxed' (final answer in \\boxed{}), 'dapo' (last line 'Answer: ...') or 'bare' "
        "(the problem alone, the answer's \\boxed{} form taught by --demonstration); default boxed",
    )
    parser.add_argument(
        "--demonstration",
        nargs=2,
        metavar=("PROBLEM", "ANSWER"),
        help="one solved example before every problem: a user turn with PROBLEM (same template) and the "
        "assistant's ANSWER in the template's form; rows whose problem is PROBLEM are dropped",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)

    def run():
        specs = parse_inputs(args.input, tuple(MATH_SOURCE_TABLE))
        split = input_split(specs, {name: source.split for name, source in MATH_SOURCE_TABLE.items()})
        options = pipeline_options(args)
        demonstration = tuple(args.demonstration) if args.demonstration else None
        if demonstration is not None:
            math_messages("check", args.template, demonstration)  # refuses an empty problem or answer
        return run_pipeline(specs, open_records, make_math_converter(split, args.template, demonstration), options)

    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
