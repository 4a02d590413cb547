"""Generation backends: vLLM (GPU, tensor parallel) and transformers (CPU or GPU, small models).

Both take the same requests and return the same completions, so the evaluation loop, the
files it writes and the tests do not depend on which one produced the text. Heavy imports
(torch, transformers, vllm) happen only when a backend is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from evaluation.sampling_settings import SamplingConfig

BACKEND_NAMES = ("vllm", "transformers")


@dataclass(frozen=True)
class GenerationRequest:
    """k samples to draw for one problem."""

    problem_id: str
    messages: list[dict[str, str]]
    seeds: list[int]
    """One seed per sample (len(seeds) == k)."""
    problem_seed: int
    """Seed for backends that draw all k samples of a problem as one batch."""


@dataclass(frozen=True)
class Completion:
    """One sampled response."""

    text: str
    num_tokens: int
    """Generated tokens, the end-of-sequence token included when one was produced."""
    truncated: bool
    """True when the response hit the token limit before an end-of-sequence token."""
    seed: int
    """The seed that reproduces this sample with this backend (see the backend's docs)."""


class GenerationBackend(Protocol):
    """What the evaluation loop needs from a backend."""

    tokenizer: Any
    """The model's Hugging Face tokenizer (prompts are rendered with its chat template; the response
    format the scorer reads is found from it: ``reward.response_format.template_response_format``)."""

    def describe(self) -> dict[str, Any]:
        """Settings that identify the backend in the run manifest."""
        ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """Completions for each request, in request order, len(seeds) per request."""
        ...


def cpu_dtype(requested: str, declared: str | None) -> str:
    """The dtype a CPU evaluation computes in, by the CPU precision rule (bf16 only where this CPU
    computes it natively: :func:`cpu_backend.precision.for_checkpoint`), said on stderr."""
    from cpu_backend.precision import announce, for_checkpoint

    choice = for_checkpoint("--dtype", requested, declared)
    announce(choice, "dfpo evaluation precision")
    return choice.dtype


def checkpoint_dtype(model_path: str, trust_remote_code: bool = False) -> str | None:
    """The dtype a checkpoint's config declares (``float32``, ``bfloat16``, ...), or None."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    declared = getattr(config, "dtype", None)
    if declared is None:
        return None
    return str(declared).removeprefix("torch.")


def build_backend(name: str, model_path: str, sampling: SamplingConfig, **options: Any) -> GenerationBackend:
    """Build a backend by name; ``options`` are the backend's constructor arguments."""
    if name == "vllm":
        from evaluation.backends.vllm_backend import VLLMBackend

        return VLLMBackend(model_path, sampling, **options)
    if name == "transformers":
        from evaluation.backends.transformers_backend import TransformersBackend

        return TransformersBackend(model_path, sampling, **options)
    raise ValueError(f"unknown backend {name!r}; choose one of {BACKEND_NAMES}")
