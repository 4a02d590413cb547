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
"""

from __future__ import annotations

import argparse
import sys

from data_prep.cli_common import add_common_arguments, input_split, parse_inputs, pipeline_options, run_cli
from data_prep.math_prompts import DEFAULT_TEMPLATE, TEMPLATES, render_math_prompt
from data_prep.math_sources import MATH_SOURCE_TABLE
from data_prep.pipeline import PreparedRow, run_pipeline
from data_prep.readers import InputSpec, RawRecord, open_records


def build_math_row(source: str, split: str, problem: str, answer: str, source_id: str, origin: str, template: str) -> dict:
    """The verl row of one math problem (``extra_info.index`` is added when written)."""
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": render_math_prompt(problem, template)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "source_id": source_id, "problem": problem, "origin": origin},
    }


def make_math_converter(split: str, template: str):
    """The per-row converter of the pipeline for math sources."""

    def convert(spec: InputSpec, record: RawRecord, ordinal: int) -> PreparedRow:
        assert record.data is not None
        problem = MATH_SOURCE_TABLE[spec.source].read(record.data, ordinal)
        row = build_math_row(spec.source, split, problem.problem, problem.answer, problem.source_id, spec.origin, template)
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
        "--template", choices=TEMPLATES, default=DEFAULT_TEMPLATE,
        help="prompt wording: 'boxed' (final answer in \\boxed{}) or 'dapo' (last line 'Answer: ...'); default boxed",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)

    def run():
        specs = parse_inputs(args.input, tuple(MATH_SOURCE_TABLE))
        split = input_split(specs, {name: source.split for name, source in MATH_SOURCE_TABLE.items()})
        options = pipeline_options(args)
        return run_pipeline(specs, open_records, make_math_converter(split, args.template), options)

    return run_cli(run, args)

if __name__ == "__main__":
    sys.exit(main())
