"""compute_dfpo_loss against the plain-loop reference: values and gradients, every option."""

from __future__ import annotations

import itertools

import pytest
import torch

from dfpo import compute_dfpo_loss
from dfpo.algorithm.group_statistics import RowStatistics, row_statistics
from dfpo.algorithm.group_weights import compute_group_weights
from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from tests.dfpo.batches import random_batch
from tests.dfpo.reference import reference_dfpo_loss, reference_prefix_lengths

OPTIONS = list(
    itertools.product(
        ["min_replace", "orth_proj", "scale", "none"], ["all", "shared_prefix"], [True, False], [False, True]
    )
)


def _grad(loss, leaf):
    (g,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return torch.zeros_like(leaf) if g is None else g


@pytest.mark.parametrize("transform,scope,stop_grad,with_is", OPTIONS)
@pytest.mark.parametrize("seed", range(6))
def test_loss_and_gradient_match_reference(seed, transform, scope, stop_grad, with_is):
    b = random_batch(seed)
    kw = dict(transform=transform, scope=scope, stop_grad=stop_grad, scale=0.5, **b.kwargs(with_is))
    loss, _ = compute_dfpo_loss(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index, **kw)
    ref = reference_dfpo_loss(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index, **kw)
    ref = torch.as_tensor(ref, dtype=torch.float64)
    torch.testing.assert_close(loss.double(), ref.double() if ref.requires_grad else ref, rtol=1e-9, atol=1e-12)
    g = _grad(loss, b.log_prob)
    g_ref = _grad(ref, b.log_prob) if ref.requires_grad else torch.zeros_like(b.log_prob)
    torch.testing.assert_close(g, g_ref, rtol=1e-8, atol=1e-12)


def test_value_is_minus_mean_of_adv_times_weight_times_length():
    b = random_batch(11, empty_rows=False)
    loss, _ = compute_dfpo_loss(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index)
    rows = row_statistics(b.log_prob, b.old_log_prob, b.advantages, b.response_mask, b.group_index)
    gw = compute_group_weights(rows)
    expected = -(rows.advantage * gw.transformed * rows.length).sum() / len(rows.length)
    torch.testing.assert_close(loss, expected)


def test_gradient_is_the_stop_grad_linear_estimator():
    """∇L = −(1/N) Σ_i Σ_t Â_i W̃_i ρ_{i,t} ∇log π(y_{i,t}): with log π as the leaf, the gradient is −Â W̃ ρ m / N."""
    b = random_batch(5, empty_rows=False)
    loss, _ = compute_dfpo_loss(
        b.old_log_prob,
        b.log_prob,
        b.advantages,
        b.response_mask,
        b.group_index,
        rollout_is_weights=b.rollout_is_weights,
    )
    rows = row_statistics(b.log_prob, b.old_log_prob, b.advantages, b.response_mask, b.group_index)
    gw = compute_group_weights(rows)
    n = b.log_prob.shape[0]
    expected = -(rows.advantage * gw.transformed).unsqueeze(1) * b.rollout_is_weights * b.response_mask / n
    torch.testing.assert_close(_grad(loss, b.log_prob), expected)


@pytest.mark.parametrize("seed", range(8))
def test_shared_prefix_lengths_match_reference(seed):
    b = random_batch(seed)
    got = shared_prefix_lengths(b.group_index, b.responses, b.response_mask)
    ref = reference_prefix_lengths(b.responses, b.response_mask, b.group_index)
    for i in range(len(got)):
        if b.response_mask[i].sum() > 0:
            assert int(got[i]) == ref[int(b.group_index[i])]
        else:
            assert int(got[i]) == 0


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj", "scale", "none"])
@pytest.mark.parametrize("stop_grad", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_permuting_rows_permutes_the_gradient(seed, transform, stop_grad):
    b = random_batch(seed)
    kw = dict(transform=transform, stop_grad=stop_grad)
    loss, _ = compute_dfpo_loss(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index, **kw)
    g = _grad(loss, b.log_prob)
    perm = torch.randperm(b.log_prob.shape[0], generator=torch.Generator().manual_seed(seed))
    lp = b.log_prob.detach()[perm].clone().requires_grad_(True)
    loss_p, _ = compute_dfpo_loss(
        b.old_log_prob[perm], lp, b.advantages[perm], b.response_mask[perm], b.group_index[perm], **kw
    )
    torch.testing.assert_close(loss_p, loss)
    torch.testing.assert_close(_grad(loss_p, lp), g[perm])


@pytest.mark.parametrize("transform,scope,stop_grad,with_is", OPTIONS)
def test_loss_in_parts_with_shared_group_statistics_equals_whole(transform, scope, stop_grad, with_is):
    """Micro-batches / ranks: the same group statistics and global N give the same gradient."""
    b = random_batch(21, empty_rows=True)
    is_w = b.rollout_is_weights if with_is else None
    kw = dict(transform=transform, scope=scope, stop_grad=stop_grad, **b.kwargs(with_is))
    whole, _ = compute_dfpo_loss(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index, **kw)
    g_whole = _grad(whole, b.log_prob)

    prefix = shared_prefix_lengths(b.group_index, b.responses, b.response_mask) if scope == "shared_prefix" else None
    rows = row_statistics(b.log_prob, b.old_log_prob, b.advantages, b.response_mask, b.group_index, prefix, is_w)
    gw = compute_group_weights(rows, transform, 0.5, stop_grad)
    n = int(rows.valid.sum())
    B = b.log_prob.shape[0]
    parts = torch.randperm(B, generator=torch.Generator().manual_seed(3)).chunk(3)
    total = 0.0
    for idx in parts:
        loss, _ = compute_dfpo_loss(
            b.old_log_prob[idx],
            b.log_prob[idx],
            b.advantages[idx],
            b.response_mask[idx],
            b.group_index[idx],
            transform=transform,
            scope=scope,
            stop_grad=stop_grad,
            rollout_is_weights=None if is_w is None else is_w[idx],
            num_sequences=n,
            group_weights=gw.select(idx),
            prefix_len=None if prefix is None else prefix[idx],
        )
        total = total + loss
    torch.testing.assert_close(total, whole)
    torch.testing.assert_close(_grad(total, b.log_prob), g_whole)


def test_row_statistics_concatenate_and_select():
    b = random_batch(2)
    rows = row_statistics(b.log_prob, b.old_log_prob, b.advantages, b.response_mask, b.group_index)
    idx = torch.arange(len(rows.length))
    again = RowStatistics.cat([rows.select(idx[:2]), rows.select(idx[2:])])
    for name in ("group_index", "log_ratio", "length", "advantage", "scope_mass", "rest_mass"):
        torch.testing.assert_close(getattr(again, name), getattr(rows, name))


def test_errors_name_what_is_wrong():
    b = random_batch(1)
    args = (b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index)
    with pytest.raises(ValueError, match="valid transforms are"):
        compute_dfpo_loss(*args, transform="clip")
    with pytest.raises(ValueError, match="valid scopes are"):
        compute_dfpo_loss(*args, scope="prefix")
    with pytest.raises(ValueError, match="needs `responses`"):
        compute_dfpo_loss(*args, scope="shared_prefix")
    bad_adv = b.advantages.clone()
    bad_adv[0] = torch.arange(bad_adv.shape[1], dtype=bad_adv.dtype) + 1.0
    b.response_mask[0] = 1.0
    if bad_adv.shape[1] > 1:
        with pytest.raises(ValueError, match="one advantage per response"):
            compute_dfpo_loss(b.old_log_prob, b.log_prob, bad_adv, b.response_mask, b.group_index)
