"""The demo's toy task: vocabulary, prompts, the shared template header and the reward rule.

A prompt is ``[Q, a]`` with a digit ``a``; the question is "is a odd?" and the correct answer
is ``YES`` or ``NO``. Every response starts with the same template header of
:data:`HEADER_LEN` tokens, written by the rollout into the response (as a chat template's
assistant header or a thinking model's ``<think>`` opening is), then the model writes its answer,
any number of filler digits (its "reasoning") and ``EOS``:

    response = H0 H1 H2 H3 | YES/NO | filler … | EOS

Within a group (G responses to one prompt) the header positions are *shared steps*: the same
history (prompt + previous header tokens) and the same token in every member. The reward ignores
the header completely:

    r = 1  if the first token after the header is the correct answer and the response ends with
           EOS within :data:`MAX_FREE_TOKENS` tokens after the header,
    r = 0  otherwise (wrong or missing answer, or cut off at the length limit).

As in real reasoning runs, where overlong responses are cut off and wrong answers tend to be
longer, reward is negatively correlated with response length, so GSPO's length-dependent weights
1/L_i do not sum to zero against the advantages over a group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

EOS = 0
"""End of response (also the padding id; padding is always masked out)."""
QUESTION = 1
"""First prompt token."""
HEADER_TOKENS: tuple[int, ...] = (2, 3, 4, 5)
"""The template header the rollout writes at the start of every response."""
HEADER_VARIANT_TOKENS: tuple[int, ...] = (6, 7, 8, 9)
"""An equally valid spelling of each header token, seen only in the warm-start data."""
HEADER_LEN = len(HEADER_TOKENS)
YES = 10
NO = 11
NUM_DIGITS = 8
"""Digits 0..7 are token ids DIGIT_OFFSET..DIGIT_OFFSET+7 (prompt digits and filler)."""
DIGIT_OFFSET = 12
VOCAB_SIZE = DIGIT_OFFSET + NUM_DIGITS
PROMPT_LEN = 2
MAX_FREE_TOKENS = 8
"""Length limit after the header (answer, filler and EOS together); longer responses are cut off."""
RESPONSE_LEN = HEADER_LEN + MAX_FREE_TOKENS
"""Length of a rollout response (header included)."""
MAX_SEQUENCE_LEN = PROMPT_LEN + HEADER_LEN + 16
"""Longest prompt + response the model is built for (warm-start demonstrations may be overlong)."""


@dataclass(frozen=True)
class PromptBatch:
    """Prompts: token ids (P, PROMPT_LEN) and the correct answer token of each (P,)."""

    tokens: torch.Tensor
    answer: torch.Tensor


def make_prompts(digits: torch.Tensor) -> PromptBatch:
    """Prompts ``[Q, a]`` for a 1-D tensor of digits ``a``."""
    if digits.dim() != 1:
        raise ValueError(f"digits must be a 1-D tensor, got shape {tuple(digits.shape)}")
    if bool(((digits < 0) | (digits >= NUM_DIGITS)).any()):
        raise ValueError(f"prompt digits must lie in 0..{NUM_DIGITS - 1}, got {digits.tolist()}")
    tokens = torch.stack([torch.full_like(digits, QUESTION), digits + DIGIT_OFFSET], dim=1)
    answer = torch.where(digits % 2 == 1, YES, NO)
    return PromptBatch(tokens=tokens.long(), answer=answer.long())


def sample_prompts(num_prompts: int, generator: torch.Generator) -> PromptBatch:
    """``num_prompts`` random prompts drawn with ``generator`` (the data schedule)."""
    return make_prompts(torch.randint(0, NUM_DIGITS, (num_prompts,), generator=generator))


def all_prompts() -> PromptBatch:
    """Every one of the NUM_DIGITS prompts, in order (the probe set of the measures)."""
    return make_prompts(torch.arange(NUM_DIGITS))


def header_block(batch_size: int) -> torch.Tensor:
    """The template header for ``batch_size`` responses: (batch_size, HEADER_LEN) token ids."""
    return torch.tensor(HEADER_TOKENS, dtype=torch.long).expand(batch_size, HEADER_LEN).clone()


def outcome_reward(responses: torch.Tensor, response_mask: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """The reward rule of the module docstring.

    Args:
        responses: (B, RESPONSE_LEN) token ids, header included.
        response_mask: (B, RESPONSE_LEN) 1 on the response's tokens (header, answer, filler, EOS).
        answer: (B,) correct answer token of each response's prompt.

    Returns:
        (B,) float32 rewards in {0, 1}.
    """
    if responses.shape != response_mask.shape or responses.dim() != 2 or responses.shape[1] != RESPONSE_LEN:
        raise ValueError(
            f"responses and response_mask must both be (B, {RESPONSE_LEN}); got {tuple(responses.shape)} and "
            f"{tuple(response_mask.shape)}"
        )
    if answer.shape != responses.shape[:1]:
        raise ValueError(f"answer must be (B,) = {tuple(responses.shape[:1])}, got {tuple(answer.shape)}")
    mask = response_mask.to(torch.bool)
    free = responses[:, HEADER_LEN:]
    free_mask = mask[:, HEADER_LEN:]
    ended = ((free == EOS) & free_mask).any(dim=1)
    correct = (free[:, 0] == answer) & free_mask[:, 0]
    return (ended & correct).to(torch.float32)
