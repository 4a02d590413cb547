"""The paper's condition: the summed gradient of a token shared by the whole group vanishes.

Each group's responses share their first P tokens (same history, same token): the log-prob of
each shared position is ONE leaf used by every response, so its gradient is the group sum
Σ_i Â_i W̃_i ∇log π. DFPO Min-Replace / Orth-Proj with stop-gradient cancel it; the control
(none), the scale-0.5 ablation, the no-stop-grad ablation and verl's GSPO do not.
"""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn

from dfpo import compute_dfpo_loss
from tests.dfpo.verl_config import actor_config

G, P, T = 5, 4, 12


def shared_prefix_group(seed: int, log_ratio_scale: float = 0.05, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([P + 1, P + 3, P + 5, P + 8, T])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(dtype)
    shared_old = -torch.rand(P, generator=g, dtype=torch.float64)
    div_old = -torch.rand(G, T - P, generator=g, dtype=torch.float64)
    shared = (
        (shared_old + log_ratio_scale * torch.randn(P, generator=g, dtype=torch.float64)).to(dtype).requires_grad_(True)
    )
    div = (
        (div_old + log_ratio_scale * torch.randn(G, T - P, generator=g, dtype=torch.float64))
        .to(dtype)
        .requires_grad_(True)
    )
    log_prob = torch.cat([shared.expand(G, P), div], dim=1)
    old = torch.cat([shared_old.expand(G, P), div_old], dim=1).to(dtype)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    adv = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).unsqueeze(1) * mask
    tokens = torch.randint(0, 50, (G, T), generator=g)
    tokens[:, :P] = tokens[0, :P].clone()
    return dict(old=old, log_prob=log_prob, adv=adv.to(dtype), mask=mask, tokens=tokens, shared=shared, div=div)


def shared_and_divergent_grads(loss, d):
    g_shared, g_div = torch.autograd.grad(loss, [d["shared"], d["div"]])
    return g_shared.abs().max().item(), g_div.abs().max().item()


def dfpo_grads(d, **kw):
    loss, metrics = compute_dfpo_loss(
        d["old"], d["log_prob"], d["adv"], d["mask"], torch.zeros(G, dtype=torch.long), responses=d["tokens"], **kw
    )
    return shared_and_divergent_grads(loss, d), metrics


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
@pytest.mark.parametrize("scope", ["all", "shared_prefix"])
@pytest.mark.parametrize("seed", range(5))
def test_dfpo_cancels_shared_token_gradient(seed, transform, scope):
    d = shared_prefix_group(seed)
    (shared, div), metrics = dfpo_grads(d, transform=transform, scope=scope)
    assert div > 1e-3  # divergent tokens still learn
    assert shared <= 1e-12 * div
    assert metrics["dfpo/cancellation_residual_after"] < 1e-12
    assert metrics["dfpo/cancellation_residual_before"] > 1e-3


@pytest.mark.parametrize(
    "kw",
    [
        dict(transform="none"),
        dict(transform="scale", scale=0.5),
        dict(transform="min_replace", stop_grad=False),
        dict(transform="orth_proj", stop_grad=False),
    ],
    ids=["none", "scale", "min_replace-no-stop-grad", "orth_proj-no-stop-grad"],
)
@pytest.mark.parametrize("seed", range(3))
def test_controls_and_ablations_do_not_cancel(seed, kw):
    d = shared_prefix_group(seed)
    (shared, div), _ = dfpo_grads(d, **kw)
    assert shared > 1e-3 * div


@pytest.mark.parametrize("seed", range(3))
def test_verl_gspo_does_not_cancel(seed):
    # Tiny log-ratios keep GSPO's 3e-4/4e-4 sequence clip inactive: the asymmetry is the 1/L_i.
    d = shared_prefix_group(seed, log_ratio_scale=1e-6)
    cfg = actor_config(
        [
            "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
            "actor_rollout_ref.actor.clip_ratio_low=3e-4",
            "actor_rollout_ref.actor.clip_ratio_high=4e-4",
        ]
    )
    loss, _ = get_policy_loss_fn("gspo")(d["old"], d["log_prob"], d["adv"], d["mask"], "seq-mean-token-mean", cfg, None)
    shared, div = shared_and_divergent_grads(loss, d)
    assert div > 1e-3
    assert shared > 1e-3 * div
