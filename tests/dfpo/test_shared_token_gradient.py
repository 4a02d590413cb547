"""The cancellation residual measured from the loss's autograd gradient (dfpo/verl/residual_meters.py,
GradientResidualMeter; the residual itself: dfpo/algorithm/cancellation_residual.py, gradient_residual).

It must be rounding for DFPO's transforms under stop-gradient and well above it for GSPO's weights
and for the no-stop-grad ablation — whose weight-based residual (``cancellation_residual_after``)
is rounding too, which is why the gradient-based one exists."""

from __future__ import annotations

import pytest
import torch

from dfpo.algorithm.cancellation_residual import gradient_residual
from dfpo.algorithm.loss import compute_dfpo_loss
from dfpo.verl.residual_meters import GradientResidualMeter

GROUP_SIZE = 4
PREFIX = 3  # the first three response tokens are the same in every member of a group
LENGTHS = [[6, 4, 5, 3], [7, 5, 3, 6]]
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]


def _batch(seed: int = 0, lengths_by_group=LENGTHS):
    gen = torch.Generator().manual_seed(seed)
    rows = GROUP_SIZE * len(lengths_by_group)
    width = max(max(group) for group in lengths_by_group)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    advantages = torch.zeros(rows, width, dtype=torch.float64)
    group_index = torch.arange(len(lengths_by_group)).repeat_interleave(GROUP_SIZE)
    old = -torch.rand(rows, width, generator=gen, dtype=torch.float64) - 0.5
    new = old + 0.2 * torch.randn(rows, width, generator=gen, dtype=torch.float64)
    for g, (lengths, rewards) in enumerate(zip(lengths_by_group, REWARDS, strict=True)):
        r = torch.tensor(rewards, dtype=torch.float64)
        adv = (r - r.mean()) / (r.std() + 1e-6)
        for j, length in enumerate(lengths):
            i = g * GROUP_SIZE + j
            mask[i, :length] = True
            advantages[i, :length] = adv[j]
        # a shared position is the same token in the same context: one log-prob for the whole group
        rows_g = slice(g * GROUP_SIZE, (g + 1) * GROUP_SIZE)
        old[rows_g, :PREFIX] = old[g * GROUP_SIZE, :PREFIX]
        new[rows_g, :PREFIX] = new[g * GROUP_SIZE, :PREFIX]
    prefix_len = torch.full((rows,), PREFIX)
    return old, new.requires_grad_(True), advantages, mask, group_index, prefix_len


def _residual(
    transform: str, stop_grad: bool = True, split: bool = False, lengths_by_group=LENGTHS
) -> tuple[float, int, dict]:
    old, new, advantages, mask, group_index, prefix_len = _batch(lengths_by_group=lengths_by_group)
    loss, metrics = compute_dfpo_loss(old, new, advantages, mask, group_index, transform=transform, stop_grad=stop_grad)
    recorder = GradientResidualMeter()
    identity = lambda t: t  # noqa: E731  (the log-probs are already (B, T) response positions)
    if split:  # the same rows in two micro-batches, each with its own slice of the gradient
        (grad,) = torch.autograd.grad(loss, new)
        for part in (slice(0, 3), slice(3, None)):
            leaf = new.detach()[part].requires_grad_(True)
            recorder.record((leaf * grad[part]).sum(), leaf, identity, group_index[part], prefix_len[part])
    else:
        recorder.record(loss, new, identity, group_index, prefix_len)
    out = recorder.reduce(None, GROUP_SIZE)
    return out.get("dfpo/shared_token_grad_residual", float("nan")), int(out["dfpo/shared_token_grad_groups"]), metrics


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
def test_dfpos_loss_gives_the_shared_tokens_no_net_gradient(transform):
    residual, groups, _ = _residual(transform)
    assert groups == 2
    assert residual < 1e-12


def test_gspos_weights_leave_a_residual():
    residual, groups, _ = _residual("none")
    assert groups == 2 and residual > 1e-3  # rounding is 1e-16 here


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
def test_the_no_stop_grad_ablation_is_caught_on_the_gradient_where_the_weight_residual_is_blind(transform):
    residual, _, metrics = _residual(transform, stop_grad=False)
    assert metrics["dfpo/cancellation_residual_after"] < 1e-12  # the weights still cancel exactly
    assert residual > 1e-3  # the gradient does not (measured: about 1e-2)


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
def test_the_ablation_cancels_too_where_a_group_s_responses_have_equal_lengths(transform):
    """Its extra gradient on a shared token is Σ_j ∂F/∂W_j · W_j/L_j with F = Σ_i Â_i L_i W̃_i(W): for
    equal L it is F/L (Euler: both transforms are homogeneous of degree 1), and F is the transform's
    own cancellation, 0. Why a run whose responses all reach the length limit cannot show the
    ablation (docs/exactness.md)."""
    equal, groups, _ = _residual(transform, stop_grad=False, lengths_by_group=[[5, 5, 5, 5], [6, 6, 6, 6]])
    assert groups == 2 and equal < 1e-12
    one_longer, _, _ = _residual(transform, stop_grad=False, lengths_by_group=[[5, 5, 5, 6], [6, 6, 6, 6]])
    assert one_longer > 1e-3


def test_micro_batch_split_gives_the_same_residual():
    whole, _, _ = _residual("none")
    split, groups, _ = _residual("none", split=True)
    assert groups == 2 and split == pytest.approx(whole, rel=1e-12)


def test_only_whole_groups_with_a_shared_gradient_count():
    gid = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    prefix = torch.tensor([2, 2, 1, 1, 1, 0, 0])
    grad = torch.tensor([[1.0, 2.0], [-1.0, -1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [3.0, 3.0], [1.0, 1.0]])
    # group 0: |0| + |1| over 1 + 2 + 1 + 1 = 1/5; group 1 has 3 rows (not 2); group 2 shares nothing
    residual, groups = gradient_residual(gid, prefix, grad, group_size=2)
    assert (residual, groups) == (pytest.approx(0.2), 1)
    zero = torch.zeros_like(grad)
    assert gradient_residual(gid, prefix, zero, group_size=2) == (0.0, 0)


def test_the_metrics_say_why_a_group_was_not_measured():
    """Whole groups (0, 2, 3), of them with a shared prefix (0, 3), of them with a gradient (0):
    a mini-batch that measured nothing tells a split group from a group without a shared prefix
    from a group whose responses all scored alike."""
    gid = torch.tensor([0, 0, 1, 2, 2, 3, 3])
    prefix = torch.tensor([2, 2, 1, 0, 0, 1, 1])
    grad = torch.tensor([[1.0, 2.0], [-1.0, -1.0], [1.0, 0.0], [3.0, 3.0], [1.0, 1.0], [0.0, 5.0], [0.0, 5.0]])
    recorder = GradientResidualMeter(rows=[(gid, prefix, grad)], eps=1e-7)
    out = recorder.reduce(None, 2)
    assert out == {
        "dfpo/shared_token_grad_residual": pytest.approx(0.2),
        "dfpo/shared_token_grad_groups": 1.0,
        "dfpo/shared_token_grad_whole_groups": 3.0,
        "dfpo/shared_token_grad_prefix_groups": 2.0,
        "dfpo/shared_token_grad_eps": 1e-7,
    }
    recorder = GradientResidualMeter(rows=[(gid, prefix, torch.zeros_like(grad))], eps=1e-7)
    assert recorder.reduce(None, 2) == {
        "dfpo/shared_token_grad_groups": 0.0,
        "dfpo/shared_token_grad_whole_groups": 3.0,
        "dfpo/shared_token_grad_prefix_groups": 2.0,
        "dfpo/shared_token_grad_eps": 1e-7,
    }


def test_no_gradient_is_recorded_outside_autograd():
    recorder = GradientResidualMeter()
    old, new, advantages, mask, group_index, prefix_len = _batch()
    with torch.no_grad():
        loss, _ = compute_dfpo_loss(old, new, advantages, mask, group_index)
    recorder.record(loss, new, lambda t: t, group_index, prefix_len)
    assert recorder.rows == [] and recorder.reduce(None, GROUP_SIZE) == {}
