"""Random DFPO batches for tests: groups, ragged masks, shared prefixes, advantages per group."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    old_log_prob: torch.Tensor
    log_prob: torch.Tensor  # a leaf requiring grad
    advantages: torch.Tensor
    response_mask: torch.Tensor
    group_index: torch.Tensor
    responses: torch.Tensor
    rollout_is_weights: torch.Tensor

    def kwargs(self, with_is: bool = False) -> dict:
        return dict(responses=self.responses, rollout_is_weights=self.rollout_is_weights if with_is else None)


def random_batch(seed: int, dtype=torch.float64, empty_rows: bool = True, vocab: int = 3) -> Batch:
    g = torch.Generator().manual_seed(seed)
    num_groups = int(torch.randint(1, 5, (1,), generator=g))
    sizes = torch.randint(1, 6, (num_groups,), generator=g).tolist()
    B = sum(sizes)
    T = int(torch.randint(1, 10, (1,), generator=g))
    group_index = torch.cat([torch.full((s,), 7 * k + 3, dtype=torch.long) for k, s in enumerate(sizes)])
    lengths = torch.randint(0 if empty_rows else 1, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float32)
    # Members of a group share a random-length token prefix, then diverge.
    responses = torch.randint(0, vocab, (B, T), generator=g)
    start = 0
    for s in sizes:
        shared = int(torch.randint(0, T + 1, (1,), generator=g))
        responses[start : start + s, :shared] = responses[start, :shared].clone()
        start += s
    rewards = torch.randint(0, 3, (B,), generator=g).to(torch.float64)
    adv_seq = torch.zeros(B, dtype=torch.float64)
    start = 0
    for s in sizes:
        r = rewards[start : start + s]
        if s > 1:
            adv_seq[start : start + s] = (r - r.mean()) / (r.std() + 1e-6)
        start += s
    advantages = (adv_seq.unsqueeze(1) * mask).to(dtype)
    old = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).to(dtype)
    new = (old.to(torch.float64) + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.3).to(dtype)
    perm = torch.randperm(B, generator=g)
    is_w = (0.5 + torch.rand(B, T, generator=g, dtype=torch.float64)).to(dtype)
    return Batch(
        old_log_prob=old[perm],
        log_prob=new[perm].clone().requires_grad_(True),
        advantages=advantages[perm],
        response_mask=mask[perm],
        group_index=group_index[perm],
        responses=responses[perm],
        rollout_is_weights=is_w[perm],
    )
