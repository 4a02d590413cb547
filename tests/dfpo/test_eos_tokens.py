"""``cpu_backend.eos_tokens.eos_token_ids``: where the rollout server and the evaluation backend stop."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cpu_backend import server
from cpu_backend.eos_tokens import eos_token_ids
from evaluation.backends import transformers_backend


def _model(generation=None, config=None):
    return SimpleNamespace(
        generation_config=SimpleNamespace(eos_token_id=generation), config=SimpleNamespace(eos_token_id=config)
    )


@pytest.mark.parametrize(
    ("generation", "config", "tokenizer_eos", "expected"),
    [
        (7, None, None, [7]),
        ([9, 3], None, 3, [3, 9]),  # a list, and the tokenizer's EOS once
        (None, 5, None, [5]),  # the model config's, as vLLM reads it
        ((4,), 6, 2, [2, 4, 6]),
    ],
)
def test_every_source_counts_once_and_sorted(generation, config, tokenizer_eos, expected):
    assert eos_token_ids(_model(generation, config), SimpleNamespace(eos_token_id=tokenizer_eos)) == expected


def test_no_eos_anywhere_is_a_clear_error():
    with pytest.raises(ValueError, match="eos_token_id.*generation_config.json"):
        eos_token_ids(_model(), SimpleNamespace(eos_token_id=None))


def test_the_rollout_server_and_the_evaluation_backend_use_this_one():
    assert server.eos_token_ids is eos_token_ids and transformers_backend.eos_token_ids is eos_token_ids
