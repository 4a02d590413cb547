"""The token ids that end a response, one answer for every transformers-side generator.

dfpo's transformers rollout server (``cpu_backend.server``) and the transformers evaluation
backend stop where vLLM stops: at the generation config's ``eos_token_id`` (one id or a list),
the model config's, and the tokenizer's EOS.
"""

from __future__ import annotations

from typing import Any


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The sorted ids that end a response; a clear error when there is none (it would never end)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            ids.update(int(i) for i in (value if isinstance(value, (list, tuple)) else [value]))
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(
            "neither the model's generation_config, its config nor the tokenizer defines an eos_token_id; "
            "responses could never end: set eos_token_id in generation_config.json"
        )
    return sorted(ids)
