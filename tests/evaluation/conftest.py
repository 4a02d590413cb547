"""Fixtures for the evaluation tests: a tiny random Qwen2 with an offline tokenizer, small verl
parquet files, and deterministic stand-in scorers. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "evaluation"

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking %}<think>\n{% endif %}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tiny_model(model_dir: Path) -> Path:
    """Train a byte-level BPE tokenizer in memory and save it with a random 2-layer Qwen2 (the one
    tiny model definition, :mod:`cpu_examples.tiny_model`, at this fixture's size).

    The tokenizer is not the recipes' character tokenizer: evaluation reads a real model's
    tokenizer, which is byte-level like Qwen's (any text round-trips), and its chat template
    opens the thinking block (``enable_thinking``) that Qwen3's does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cpu_examples.tiny_model import TinyModelSpec, save_untrained_model

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "What is 1 + 1? The answer is \\boxed{2}.",
        "Let x = 3. Then 2x = 6 and x^2 = 9.",
        "def solve():\n    print(int(input()) * 2)",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    spec = TinyModelSpec(
        architecture="qwen2",
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=None,
        max_position_embeddings=256,
    )
    return save_untrained_model(model_dir, spec, tokenizer)


def write_math_parquet(path: Path, data_source: str, answers: list[str], difficulties: list[str] | None = None) -> Path:
    """A verl RL parquet with one math question per answer."""
    rows = []
    for i, answer in enumerate(answers):
        extra = {"split": "test", "index": i}
        if difficulties is not None:
            extra["difficulty"] = difficulties[i]
        rows.append(
            {
                "data_source": data_source,
                "prompt": [
                    {"role": "user", "content": f"Question {i}: compute {answer}. Put the answer in \\boxed{{}}."}
                ],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": extra,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A saved tiny random Qwen2 + tokenizer with a chat template."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture()
def math_parquet(tmp_path) -> Path:
    """Six math problems of data_source 'toy_math', with difficulties."""
    return write_math_parquet(
        tmp_path / "toy_math.parquet",
        "toy_math",
        ["2", "6", "9", "12", "1/2", "7"],
        ["easy", "easy", "medium", "medium", "hard", "hard"],
    )


@pytest.fixture()
def fixtures_dir() -> Path:
    """tests/fixtures/evaluation."""
    return FIXTURES


def write_synthetic_run(run_dir: Path, correct: dict, seed: int = 0, n_problems: int | None = None) -> Path:
    """A run directory in generate's format from given correctness: ``correct[data_source]`` is a
    (problems, k) 0/1 array. ``n_problems`` larger than the rows given makes an unfinished run."""
    import numpy as np

    from evaluation.run_store import RunStore

    arrays = {src: np.asarray(v, dtype=float) for src, v in correct.items()}
    k = next(iter(arrays.values())).shape[1]
    total = sum(a.shape[0] for a in arrays.values())
    manifest = {
        "model": f"synthetic-{seed}",
        "data": [],
        "backend": {"name": "synthetic"},
        "sampling": {},
        "k": k,
        "seed": seed,
        "scorer": "synthetic",
        "n_problems": n_problems or total,
    }
    store = RunStore(run_dir, manifest)
    store.open()
    for source, array in arrays.items():
        for i, row in enumerate(array):
            store.append_problem(
                [
                    {
                        "problem_id": f"{source}/{i}",
                        "data_source": source,
                        "difficulty": None,
                        "row": i,
                        "sample_index": j,
                        "seed": seed,
                        "response": "r",
                        "num_tokens": 100 + 10 * j,
                        "truncated": j == 0,
                        "score": float(c),
                        "acc": float(c),
                        "pred": None,
                        "reason": "synthetic",
                        "details": {},
                    }
                    for j, c in enumerate(row)
                ]
            )
    return run_dir


@pytest.fixture()
def write_math_parquet_fn():
    """The write_math_parquet helper, for tests that need their own data files."""
    return write_math_parquet


@pytest.fixture()
def write_synthetic_run_fn():
    """The write_synthetic_run helper, for report tests."""
    return write_synthetic_run
