"""The residual the demo reads from autograd equals its closed form on an on-policy update.

On the first mini-batch of a step the policy has not moved (every ratio is 1, no clip is
active), so the coefficient ∂L/∂log π_{i,t} of each loss is known in closed form:

* GSPO (seq-mean-token-mean):      −Â_i / (L_i · N)
* GRPO (vanilla) and GRPO-fix (cispo), token-mean:   −Â_i / T   (T: valid tokens of the mini-batch)
* DFPO Min-Replace:                −Â_i · min_j(1/L_j) / N
* DFPO Orth-Proj:                  −Â_i · w̃_i / N,  w̃ = w − (Âᵀw/‖Â‖²) Â,  w_i = 1/L_i

so the residual on a group's shared positions is Σ_t |Σ_i Â_i c_i| / Σ_t Σ_i |Â_i c_i| with the
per-sequence factors c_i above. This checks the measurement (and the wiring of verl's losses)
against numbers computed without autograd.
"""

from __future__ import annotations

import pytest
import torch

from demo.compared_methods import PolicyLoss, build_actor_config, compute_advantages, select_methods
from demo.config import DemoConfig
from demo.group_sampling import sample_groups
from demo.measures import cancellation_sums, group_common_prefix_lengths
from demo.policy_model import build_policy, response_logits, token_log_probs
from demo.task import sample_prompts
from demo.warm_start import WarmStartConfig, warm_start

GROUP_SIZE = 8
PROMPTS = 4


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(0)
    model = build_policy(seed=0)
    warm_start(model, WarmStartConfig(steps=40), seed=0)
    generator = torch.Generator().manual_seed(5)
    rollout = sample_groups(model, sample_prompts(PROMPTS, generator), GROUP_SIZE, generator)
    assert rollout.rewards.min() < rollout.rewards.max(), "the fixture needs reward variance"
    return model, rollout


def closed_form_residual(adv: torch.Tensor, factor: torch.Tensor, prefix: torch.Tensor, group: torch.Tensor) -> float:
    net = magnitude = 0.0
    for g in torch.unique(group).tolist():
        rows = group == g
        coef = adv[rows].double() * factor[rows].double()
        length = int(prefix[rows][0])
        net += length * float(coef.sum().abs())
        magnitude += length * float(coef.abs().sum())
    return net / magnitude


@pytest.mark.parametrize("key", ["gspo", "grpo", "grpo_fix", "dfpo_min_replace", "dfpo_orth_proj"])
def test_on_policy_residual_matches_closed_form(batch, key):
    model, rollout = batch
    method = select_methods([key])[0]
    loss_fn = PolicyLoss(method, build_actor_config(method, GROUP_SIZE, PROMPTS))
    advantages = compute_advantages(method, rollout.token_level_rewards(), rollout.response_mask, rollout.uid)
    log_prob = token_log_probs(response_logits(model, rollout.prompts, rollout.responses), rollout.responses)
    old_log_prob = log_prob.detach().clone()
    log_prob.retain_grad()
    loss, _ = loss_fn(old_log_prob, log_prob, advantages, rollout.response_mask, rollout.group_index)
    loss.backward()
    prefix = group_common_prefix_lengths(rollout.responses, rollout.response_mask, rollout.group_index)
    measured = cancellation_sums(log_prob.grad, prefix, rollout.group_index).residual

    adv = advantages[:, 0]
    lengths = rollout.lengths
    n_seq = rollout.responses.shape[0]
    if key == "gspo":
        factor = 1.0 / (lengths * n_seq)
    elif key in ("grpo", "grpo_fix"):
        factor = torch.full_like(lengths, 1.0 / float(rollout.response_mask.sum()))
    elif key == "dfpo_min_replace":
        inverse = 1.0 / lengths
        w_min = torch.stack([inverse[rollout.group_index == g].min() for g in rollout.group_index.tolist()])
        factor = w_min / n_seq
    else:
        w = (1.0 / lengths).double()
        a = adv.double()
        projected = torch.empty_like(w)
        for g in torch.unique(rollout.group_index).tolist():
            rows = rollout.group_index == g
            norm = float((a[rows] ** 2).sum())
            coef = float((a[rows] * w[rows]).sum()) / norm if norm > 1e-12 else 0.0
            projected[rows] = w[rows] - coef * a[rows]
        factor = projected / n_seq
    expected = closed_form_residual(adv, factor, prefix, rollout.group_index)
    if key == "gspo":
        assert expected > 1e-3, "the fixture must have a learning tax to compare against"
        assert measured == pytest.approx(expected, rel=1e-4)
    else:
        # Both are float noise: Σ_i Â_i = 0 up to rounding.
        assert measured < 1e-6 and expected < 1e-6


def test_demo_config_rejects_split_groups():
    with pytest.raises(ValueError, match="whole groups"):
        DemoConfig(prompts_per_step=6, mini_batches=4)
    with pytest.raises(ValueError, match="valid keys"):
        select_methods(["gspo", "ppo"])
