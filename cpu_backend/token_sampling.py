"""Next-token sampling of the local rollout server, and the log-probability it reports.

For one row of next-token logits z (vocabulary V), temperature T, top-k k and top-p p:

* T = 0 is greedy decoding: the arg-max token, reported with log softmax(z).
* Otherwise the sampling distribution is softmax(z / T) restricted to the k most likely tokens
  (k <= 0: no restriction), then to the smallest prefix of the remaining tokens, in decreasing
  probability, whose mass reaches p (the token that crosses p is kept; p >= 1: no restriction),
  renormalised. This is vLLM's order (temperature, then top-k, then top-p).
* The reported log-probability of the sampled token y is log softmax(z / T)_y — before top-k and
  top-p. That is what verl's rollout log-probs mean with vLLM's default ``logprobs_mode`` in
  verl 0.9.1 (``processed_logprobs``) and what verl's actor computes as ``old_log_probs``
  (logits divided by the rollout temperature, no truncation), so the trainer's
  ``training/rollout_probs_diff_*`` compares like with like.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling parameters verl's agent loop sends with each request (vLLM's names)."""

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def from_request(cls, sampling_params: dict) -> SamplingSettings:
        top_k = sampling_params.get("top_k")
        top_p = sampling_params.get("top_p")
        temperature = sampling_params.get("temperature")
        return cls(
            temperature=1.0 if temperature is None else float(temperature),
            top_k=-1 if top_k is None else int(top_k),
            top_p=1.0 if top_p is None else float(top_p),
        )


def truncated_log_probs(scaled_log_probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Restrict (B, V) log-probabilities to top-k then top-p; excluded tokens get -inf.

    The result is not renormalised (sampling from it with ``torch.multinomial`` on its exp or
    with Gumbel noise normalises implicitly).
    """
    logits = scaled_log_probs
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p  # tokens entirely beyond the nucleus
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next_tokens(
    logits: torch.Tensor, settings: SamplingSettings, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of (B, V) ``logits``; returns (tokens (B,), log-probs (B,)) as
    defined in the module docstring."""
    logits = logits.float()
    if settings.greedy:
        log_probs = torch.log_softmax(logits, dim=-1)
        tokens = torch.argmax(log_probs, dim=-1)
    else:
        log_probs = torch.log_softmax(logits / settings.temperature, dim=-1)
        allowed = truncated_log_probs(log_probs, settings.top_k, settings.top_p)
        probs = torch.softmax(allowed, dim=-1)
        tokens = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
