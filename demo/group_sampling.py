"""Sampling groups of responses from the policy (the demo's rollout engine).

Every prompt is repeated G times (one group per prompt, as verl's ``rollout.n``); the template
header is written into every response, then the policy samples the remaining tokens at
temperature 1 until EOS or the length limit. Sampling uses an explicit ``torch.Generator``, so
the same generator state and the same policy give the same responses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from demo.task import EOS, HEADER_LEN, MAX_FREE_TOKENS, RESPONSE_LEN, PromptBatch, header_block, outcome_reward


@dataclass(frozen=True)
class Rollout:
    """One step's sampled batch, B = P·G rows, grouped contiguously by prompt."""

    prompts: torch.Tensor
    """(B, PROMPT_LEN) prompt token ids."""
    responses: torch.Tensor
    """(B, RESPONSE_LEN) response token ids (header included; EOS-padded)."""
    response_mask: torch.Tensor
    """(B, RESPONSE_LEN) float 1 on response tokens, 0 on padding."""
    rewards: torch.Tensor
    """(B,) outcome rewards."""
    group_index: torch.Tensor
    """(B,) group id (prompt number) of each row."""
    uid: np.ndarray
    """(B,) verl-style uid strings (one per group)."""

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) number of response tokens of each row."""
        return self.response_mask.sum(dim=1)

    def token_level_rewards(self) -> torch.Tensor:
        """(B, R) rewards placed on each response's last token, as verl's reward managers do."""
        last = (self.lengths.long() - 1).clamp(min=0)
        out = torch.zeros_like(self.response_mask)
        out[torch.arange(out.shape[0]), last] = self.rewards
        return out


@torch.no_grad()
def sample_groups(model: torch.nn.Module, prompts: PromptBatch, group_size: int, generator: torch.Generator) -> Rollout:
    """Sample ``group_size`` responses per prompt from ``model`` (temperature 1)."""
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 (a group-relative advantage needs a group), got {group_size}")
    prompt_tokens = prompts.tokens.repeat_interleave(group_size, dim=0)
    answers = prompts.answer.repeat_interleave(group_size, dim=0)
    batch = prompt_tokens.shape[0]
    responses = torch.full((batch, RESPONSE_LEN), EOS, dtype=torch.long)
    mask = torch.zeros((batch, RESPONSE_LEN), dtype=torch.float32)
    responses[:, :HEADER_LEN] = header_block(batch)
    mask[:, :HEADER_LEN] = 1.0
    alive = torch.ones(batch, dtype=torch.bool)
    for k in range(MAX_FREE_TOKENS):
        pos = HEADER_LEN + k
        logits = model(input_ids=torch.cat([prompt_tokens, responses[:, :pos]], dim=1)).logits[:, -1]
        probs = torch.softmax(logits.float(), dim=-1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        responses[:, pos] = torch.where(alive, token, torch.full_like(token, EOS))
        mask[:, pos] = alive.float()
        alive = alive & (token != EOS)
        if not bool(alive.any()):
            break
    group_index = torch.arange(prompts.tokens.shape[0]).repeat_interleave(group_size)
    uid = np.array([f"prompt-{int(g)}" for g in group_index])
    return Rollout(
        prompts=prompt_tokens,
        responses=responses,
        response_mask=mask,
        rewards=outcome_reward(responses, mask, answers),
        group_index=group_index,
        uid=uid,
    )
