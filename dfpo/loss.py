"""The DFPO policy loss (arXiv 2604.13088): GSPO's sequence-coupled weights made exchangeable.

GSPO (seq-mean-token-mean) modulates every token of response i by W_i = s_i/L_i, different per
trajectory, so a token shared by the group gets Σ_i Â_i W_i ≠ 0: the learning tax. DFPO replaces
W by a within-group transform W̃ = T(W) (Min-Replace, Eq. 17, or Orth-Proj, Eq. 18) under
stop-gradient, and drops clipping from the gradient path (a linear estimator):

    ℓ_{i,t} = −Â_i · sg[W̃_i] · ρ_{i,t} · exp(log π_θ(y_{i,t}) − sg[log π_θ(y_{i,t})]) · m_{i,t}

    L(θ)  = (1/N) Σ_i Σ_t ℓ_{i,t}                       (N: sequences in the global mini-batch)
    ∇L(θ) = −(1/N) Σ_i Σ_t Â_i W̃_i ρ_{i,t} ∇ log π_θ(y_{i,t})      value: −(1/N) Σ_i Â_i W̃_i Σ_t ρ_{i,t}

ρ is verl's rollout-correction IS weight (1 when absent). With ``scope="shared_prefix"`` only the
tokens of the group's longest common prefix get W̃_i; the others keep W_i. With
``stop_grad=False`` (ablation) W̃_i(θ) = T(W(θ))_i stays differentiable; that gradient is applied
per row through the coefficients of :class:`dfpo.group_statistics.GroupWeights`, so it is exact
whichever micro-batch holds the other members of the group.
"""

from __future__ import annotations

import torch

from dfpo.group_statistics import (
    GroupWeights,
    RowStatistics,
    check_scope,
    compute_group_weights,
    group_weight_metrics,
    row_statistics,
    sequence_advantages,
    sequence_lengths,
    sequence_log_ratio,
    sequence_weights,
    shared_prefix_lengths,
    token_scope_masks,
)
from dfpo.transforms import check_transform


def dfpo_loss_from_group_weights(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    seq_advantages: torch.Tensor,
    group_weights: GroupWeights,
    *,
    prefix_len: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    num_sequences: float,
    dp_size: int = 1,
) -> torch.Tensor:
    """The DFPO loss of some rows, given their (detached) group weights computed over whole groups.

    This is the part that runs per micro-batch: summing it over any split of a mini-batch into
    parts (micro-batches, data-parallel ranks) with the same ``num_sequences`` gives the loss and
    gradient of the whole mini-batch. ``dp_size`` multiplies the result because data-parallel
    all-reduce averages gradients over ranks (as verl's ``agg_loss``).
    """
    dtype = log_prob.dtype
    mask = response_mask.to(torch.bool)
    in_scope, out_scope = token_scope_masks(mask, prefix_len)
    token_weight = torch.where(
        in_scope,
        group_weights.transformed.unsqueeze(-1),
        torch.where(out_scope, group_weights.weights.unsqueeze(-1), torch.zeros_like(group_weights.weights).unsqueeze(-1)),
    )
    coef = (seq_advantages.unsqueeze(-1) * token_weight).to(dtype)
    if rollout_is_weights is not None:
        coef = coef * rollout_is_weights.to(dtype)
    # exp(x − sg[x]) is 1 in value and ∇x in gradient: the linear, clipping-free estimator.
    unit = torch.exp(log_prob - log_prob.detach())
    token_loss = torch.where(mask, -coef * unit, torch.zeros_like(unit))
    total = token_loss.sum()
    if group_weights.grad_coef is not None:
        # Ablation "no stop-grad": add −c_j (W_j(θ) − sg[W_j(θ)]) per row (zero value, exact gradient).
        w_theta = sequence_weights(sequence_log_ratio(log_prob, old_log_prob, mask), sequence_lengths(mask))
        total = total - (group_weights.grad_coef * (w_theta - w_theta.detach())).sum().to(dtype)
    return total / num_sequences * dp_size


def compute_dfpo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    *,
    transform: str = "min_replace",
    scope: str = "all",
    stop_grad: bool = True,
    scale: float = 0.5,
    responses: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    num_sequences: float | None = None,
    group_weights: GroupWeights | None = None,
    prefix_len: torch.Tensor | None = None,
    dp_size: int = 1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DFPO loss and diagnostics of a (B, T) batch, as in verl's policy losses.

    Args:
        old_log_prob, log_prob, advantages, response_mask: (B, T) as verl stores them;
            ``advantages`` per token (constant over each response's valid tokens).
        group_index: (B,) LongTensor of group ids (one prompt = one group).
        transform: "min_replace" (default), "orth_proj", "scale" or "none".
        scope: "all" (default) or "shared_prefix" (needs ``responses``, the token ids).
        stop_grad: detach W̃ (DFPO); False is the "no stop-grad" ablation.
        scale: κ of the "scale" ablation.
        rollout_is_weights: optional (B, T) IS weights; multiply each token's loss.
        num_sequences: the global normalizer N (default: the non-empty rows of this batch).
        group_weights, prefix_len: statistics already computed over the whole groups (e.g. on
            every rank); by default they are computed from this batch, which then must hold
            whole groups.
        dp_size: data-parallel world size (the loss is multiplied by it, as verl's agg_loss).

    Returns:
        (loss, metrics); metrics are described in :func:`dfpo.group_statistics.group_weight_metrics`
        and are only computed when the group statistics come from this batch.
    """
    check_transform(transform)
    check_scope(scope)
    if log_prob.shape != old_log_prob.shape or log_prob.shape != response_mask.shape or advantages.shape != log_prob.shape:
        raise ValueError(
            "old_log_prob, log_prob, advantages and response_mask must have the same (B, T) shape; got "
            f"{tuple(old_log_prob.shape)}, {tuple(log_prob.shape)}, {tuple(advantages.shape)}, {tuple(response_mask.shape)}"
        )
    if group_index.shape != log_prob.shape[:1]:
        raise ValueError(f"group_index must have shape (B,) = {tuple(log_prob.shape[:1])}, got {tuple(group_index.shape)}")
    mask = response_mask.to(torch.bool)
    if scope == "shared_prefix" and prefix_len is None:
        if responses is None:
            raise ValueError('scope="shared_prefix" needs `responses` (the response token ids) to find each group\'s common prefix.')
        prefix_len = shared_prefix_lengths(responses, mask, group_index)
    if scope == "all":
        prefix_len = None

    metrics: dict[str, float] = {}
    if group_weights is None:
        rows: RowStatistics = row_statistics(
            log_prob, old_log_prob, advantages, mask, group_index, prefix_len, rollout_is_weights
        )
        group_weights = compute_group_weights(rows, transform, scale, stop_grad)
        metrics = group_weight_metrics(rows, group_weights)
        seq_adv = rows.advantage
    else:
        seq_adv = sequence_advantages(advantages, mask)
    if num_sequences is None:
        num_sequences = max(int(mask.any(dim=-1).sum()), 1)
    loss = dfpo_loss_from_group_weights(
        log_prob,
        old_log_prob,
        mask,
        seq_adv,
        group_weights,
        prefix_len=prefix_len,
        rollout_is_weights=rollout_is_weights,
        num_sequences=num_sequences,
        dp_size=dp_size,
    )
    return loss, metrics
