"""``python -m dfpo.local.prepare --output-root DIR``: the toy data and tiny model of the CPU recipes.

Writes, once (reruns reuse them):

* ``DIR/data/arithmetic_train.parquet`` and ``DIR/data/arithmetic_test.parquet`` — the toy task
  (:mod:`dfpo.local.toy_task`) through ``python -m data_prep.math``;
* ``DIR/models/tiny_qwen3_cpu`` — the warm-started tiny model (:mod:`dfpo.local.tiny_model`),
  rebuilt when its specification changes.

``recipes/models/tiny_cpu.sh`` calls it before every launch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dfpo.local.tiny_model import TinyModelSpec, ensure_tiny_model
from dfpo.local.toy_task import TEST_FILE, TRAIN_FILE, answer_pool, arithmetic_split, prepare_parquet

MODEL_DIR_NAME = "tiny_qwen3_cpu"


def data_dir(output_root: Path) -> Path:
    return output_root / "data"


def model_dir(output_root: Path) -> Path:
    return output_root / "models" / MODEL_DIR_NAME


def prepare(output_root: Path, spec: TinyModelSpec = TinyModelSpec()) -> tuple[Path, Path, Path]:
    """(model directory, train parquet, test parquet) under ``output_root``, built if missing."""
    from data_prep.math_prompts import DEFAULT_TEMPLATE, render_math_prompt

    directory = data_dir(output_root)
    train, test = directory / TRAIN_FILE, directory / TEST_FILE
    if not (train.exists() and test.exists()):
        prepare_parquet(directory)
    train_problems, _ = arithmetic_split()
    model = ensure_tiny_model(
        model_dir(output_root),
        prompts=[render_math_prompt(p.problem, DEFAULT_TEMPLATE) for p in train_problems],
        answer_pool=answer_pool(),
        spec=spec,
    )
    return model, train, test


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dfpo.local.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", required=True, type=Path, help="the recipes' OUTPUT_ROOT")
    args = parser.parse_args(argv)
    model, train, test = prepare(args.output_root.expanduser().resolve())
    print(f"model: {model}\ntrain: {train}\nvalidation: {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
