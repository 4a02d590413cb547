"""Supervised warm start: the policy every method starts RL from (as RL starts from an SFT model).

The demonstrations answer correctly 70% of the time (a partly trained policy), and the filler
after the answer has a random length, often longer than the rollout's length limit: about a
third of the warm-start policy's responses are cut off and score 0, so reward and length are
negatively correlated (-0.43 to -0.49 on seeds 0-2).

The demonstrations also write each header token in one of two spellings, the one the rollout
writes (:data:`~demo.task.HEADER_TOKENS`, 20% of the time) or a variant
(:data:`~demo.task.HEADER_VARIANT_TOKENS`, 80%): a choice that has nothing to do with
the answer, like the wording of the opening line of a reasoning trace. The warm-start policy
therefore gives the written header a probability of about 0.2 per token, with room to drift
either way; the log-odds of the written spelling against its variant is the reward-irrelevant
preference the demo watches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from demo.policy_model import response_logits
from demo.task import (
    DIGIT_OFFSET,
    EOS,
    HEADER_LEN,
    HEADER_TOKENS,
    HEADER_VARIANT_TOKENS,
    MAX_SEQUENCE_LEN,
    NO,
    NUM_DIGITS,
    PROMPT_LEN,
    YES,
    sample_prompts,
)


@dataclass(frozen=True)
class WarmStartConfig:
    """Settings of the supervised warm start."""

    steps: int = 100
    """Optimizer steps."""
    batch_size: int = 64
    """Demonstrations per step."""
    learning_rate: float = 3e-3
    """AdamW learning rate."""
    correct_fraction: float = 0.7
    """Fraction of demonstrations whose answer is correct."""
    max_filler: int = 10
    """Filler length is uniform in 0..max_filler (the rollout cuts responses off after 6)."""
    header_variant_fraction: float = 0.8
    """Probability that a demonstration spells a header token with its variant."""

    def __post_init__(self) -> None:
        if PROMPT_LEN + HEADER_LEN + self.max_filler + 2 > MAX_SEQUENCE_LEN:
            raise ValueError(
                f"max_filler={self.max_filler} makes demonstrations longer than the model's {MAX_SEQUENCE_LEN} "
                "positions"
            )
        if not 0.0 <= self.header_variant_fraction <= 1.0:
            raise ValueError(f"header_variant_fraction must lie in [0, 1], got {self.header_variant_fraction}")


def make_demonstrations(
    num: int, cfg: WarmStartConfig, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``num`` demonstrations: prompts (num, 3), responses (num, T) and their loss mask (num, T)."""
    prompts = sample_prompts(num, generator)
    length = HEADER_LEN + cfg.max_filler + 2
    variant = torch.rand(num, HEADER_LEN, generator=generator) < cfg.header_variant_fraction
    correct = torch.rand(num, generator=generator) < cfg.correct_fraction
    answer = torch.where(correct, prompts.answer, YES + NO - prompts.answer)
    filler_len = torch.randint(0, cfg.max_filler + 1, (num,), generator=generator)
    filler = torch.randint(DIGIT_OFFSET, DIGIT_OFFSET + NUM_DIGITS, (num, length), generator=generator)

    responses = torch.full((num, length), EOS, dtype=torch.long)
    responses[:, :HEADER_LEN] = torch.where(variant, torch.tensor(HEADER_VARIANT_TOKENS), torch.tensor(HEADER_TOKENS))
    responses[:, HEADER_LEN] = answer
    positions = torch.arange(length).unsqueeze(0)
    in_filler = (positions > HEADER_LEN) & (positions <= HEADER_LEN + filler_len.unsqueeze(1))
    responses = torch.where(in_filler, filler, responses)
    loss_mask = (positions <= (HEADER_LEN + filler_len + 1).unsqueeze(1)).float()
    return prompts.tokens, responses, loss_mask


def warm_start(model: torch.nn.Module, cfg: WarmStartConfig, seed: int) -> list[float]:
    """Train ``model`` in place on demonstrations (cross-entropy on every response token); returns the losses."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    losses = []
    for _ in range(cfg.steps):
        prompts, responses, loss_mask = make_demonstrations(cfg.batch_size, cfg, generator)
        logits = response_logits(model, prompts, responses)
        token_loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), responses.reshape(-1), reduction="none"
        )
        loss = (token_loss * loss_mask.reshape(-1)).sum() / loss_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses
