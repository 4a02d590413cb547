"""The demo's policy: a tiny Qwen3 causal LM built in code (no download), and its log-probabilities.

The architecture is the one of the paper's models (Qwen3: RMSNorm, rotary attention with
grouped KV heads, SwiGLU MLP), shrunk to two layers of width 64 so that a CPU trains it in
seconds. The model is the one tiny model definition (:mod:`cpu_examples.tiny_model`) without a
tokenizer: the toy task's vocabulary is token ids only (:mod:`demo.task`). Attention is
the eager implementation in float32, which is deterministic on CPU.
"""

from __future__ import annotations

import torch
from transformers import Qwen3ForCausalLM

from cpu_examples.tiny_model import TinyModelSpec, build_model
from demo.task import MAX_SEQUENCE_LEN, VOCAB_SIZE


def build_policy(seed: int, hidden_size: int = 64, num_layers: int = 2) -> Qwen3ForCausalLM:
    """A randomly initialised tiny Qwen3 causal LM; the same ``seed`` gives the same weights."""
    spec = TinyModelSpec(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        head_dim=None,  # hidden_size / 4 heads
        max_position_embeddings=MAX_SEQUENCE_LEN,
        seed=seed,
        tie_word_embeddings=False,
        attn_implementation="eager",
        use_cache=False,
    )
    return build_model(spec)


def response_logits(model: torch.nn.Module, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Logits that predict each response token: (B, R, V) for prompts (B, P) and responses (B, R).

    Responses are right-padded; with causal attention padding never influences earlier
    positions, so no attention mask is needed (padded positions are masked out of every loss).
    """
    input_ids = torch.cat([prompts, responses], dim=1)
    logits = model(input_ids=input_ids).logits
    start = prompts.shape[1] - 1
    return logits[:, start : start + responses.shape[1]]


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log π(token | history) from (B, R, V) logits and (B, R) token ids: (B, R)."""
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each next-token distribution: (B, R) from (B, R, V)."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)
