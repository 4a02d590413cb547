"""Sampling settings, the model families' recommended presets, and per-sample seeds.

Presets follow the model cards' recommendations for reasoning benchmarks:

* ``qwen3-thinking`` (Qwen3 dense/MoE in thinking mode): temperature 0.6, top-p 0.95, top-k 20,
  min-p 0; the card suggests up to 38,912 output tokens for competition math and code.
* ``qwen3-next-thinking`` (Qwen3-Next-80B-A3B-Thinking and the 2507 thinking models): same
  sampling, up to 81,920 output tokens for competition problems.
* ``gpt-oss-high`` (gpt-oss-20b/120b): temperature 1.0, top-p 1.0, reasoning effort "high"
  passed to the chat template.

Every field can be overridden on the command line.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SamplingConfig:
    """How responses are sampled; recorded in the run's manifest."""

    temperature: float = 0.6
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 0.95
    """Nucleus sampling mass (1.0 disables it)."""
    top_k: int | None = 20
    """Top-k truncation; None disables it."""
    min_p: float = 0.0
    """Minimum probability relative to the most likely token (0 disables it)."""
    max_new_tokens: int = 38_912
    """Response length limit; responses that reach it without an end-of-sequence are truncated."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra variables for the tokenizer's chat template (e.g. enable_thinking, reasoning_effort)."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None (disabled), got {self.top_k}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form for the run manifest."""
        return dataclasses.asdict(self)


PRESETS: dict[str, SamplingConfig] = {
    "qwen3-thinking": SamplingConfig(
        temperature=0.6,
        top_p=0.95,
        top_k=20,
        min_p=0.0,
        max_new_tokens=38_912,
        chat_template_kwargs={"enable_thinking": True},
    ),
    "qwen3-next-thinking": SamplingConfig(
        temperature=0.6,
        top_p=0.95,
        top_k=20,
        min_p=0.0,
        max_new_tokens=81_920,
    ),
    "gpt-oss-high": SamplingConfig(
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        min_p=0.0,
        max_new_tokens=81_920,
        chat_template_kwargs={"reasoning_effort": "high"},
    ),
}


def preset(name: str, **overrides: Any) -> SamplingConfig:
    """A preset with the given fields replaced (None values are ignored)."""
    if name not in PRESETS:
        raise ValueError(f"unknown sampling preset {name!r}; choose one of {sorted(PRESETS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(PRESETS[name], **changes)


def derive_seed(base_seed: int, *parts: object) -> int:
    """A 31-bit seed determined by the base seed and the given parts (problem id, sample index).

    Independent of batching and of the order problems are processed in, so a resumed run
    draws exactly the seeds an uninterrupted run would have drawn.
    """
    text = ":".join([str(base_seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFF_FFFF
