"""Edge cases: extreme log-ratios, empty rows, singleton and all-equal groups, fp32 and bf16."""

from __future__ import annotations

import pytest
import torch

from dfpo import compute_dfpo_loss, compute_dfpo_outcome_advantage

TRANSFORMS = ["min_replace", "orth_proj", "scale", "none"]


def _batch(dtype, ratio):
    # groups: 0 = 3 members incl. an empty row; 1 = singleton; 2 = all-equal rewards; 3 = normal
    ids = torch.tensor([0, 0, 0, 1, 2, 2, 2, 3, 3])
    T = 6
    lengths = torch.tensor([6, 0, 3, 4, 5, 2, 6, 1, 6])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(dtype)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    token_rewards = torch.zeros(len(ids), T)
    token_rewards[torch.arange(len(ids)), (lengths - 1).clamp(min=0)] = rewards
    token_rewards = token_rewards * mask.float()
    adv = compute_dfpo_outcome_advantage(token_rewards, mask, ids.tolist()).to(dtype)
    old = torch.full((len(ids), T), -2.0, dtype=dtype)
    sign = torch.tensor([1, -1, 1, -1, 1, -1, 1, -1, 1], dtype=dtype).unsqueeze(1)
    log_prob = (old + ratio * sign).clone().requires_grad_(True)
    return ids, mask, adv, old, log_prob, torch.randint(0, 5, (len(ids), T))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ratio", [50.0, -50.0, 0.0, 1e-4])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("stop_grad", [True, False])
@pytest.mark.parametrize("scope", ["all", "shared_prefix"])
def test_finite_and_silent_where_there_is_no_signal(dtype, ratio, transform, stop_grad, scope):
    ids, mask, adv, old, log_prob, tokens = _batch(dtype, ratio)
    loss, metrics = compute_dfpo_loss(
        old, log_prob, adv, mask, ids, transform=transform, stop_grad=stop_grad, scope=scope, responses=tokens
    )
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert torch.isfinite(loss).item()
    assert bool(torch.isfinite(grad).all())
    assert all(v == v and abs(v) != float("inf") for v in metrics.values()), metrics
    # empty row, singleton and all-equal groups contribute no gradient at all
    for row in (1, 3, 4, 5, 6):
        assert float(grad[row].abs().max()) == 0.0
    assert float(grad[mask == 0].abs().max()) == 0.0


def test_all_rows_empty_gives_zero_loss():
    mask = torch.zeros(3, 4)
    lp = torch.zeros(3, 4, requires_grad=True)
    loss, _ = compute_dfpo_loss(torch.zeros(3, 4), lp, torch.zeros(3, 4), mask, torch.tensor([0, 0, 1]))
    assert float(loss.detach()) == 0.0
