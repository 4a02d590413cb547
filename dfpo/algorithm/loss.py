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
per row through the coefficients of :class:`dfpo.algorithm.group_statistics.GroupWeights`, so it is exact
whichever micro-batch holds the other members of the group.
"""

from __future__ import annotations

import torch

from dfpo.algorithm.group_statistics import (
    GroupWeights,
    TokenSums,
    check_scope,
    compute_group_weights,
    group_weight_metrics,
    row_statistics_from_sums,
    sequence_advantages,
    sequence_weights,
    token_sums,
)
from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from dfpo.algorithm.transforms import check_transform


def dfpo_loss_from_group_weights(
    sums: TokenSums,
    seq_advantages: torch.Tensor,
    group_weights: GroupWeights,
    *,
    num_sequences: float,
    dp_size: int = 1,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The DFPO loss of some rows, given their (detached) group weights computed over whole groups.

    This is the part that runs per micro-batch: summing it over any split of a mini-batch into
    parts (micro-batches, data-parallel ranks) with the same ``num_sequences`` gives the loss and
    gradient of the whole mini-batch. ``dp_size`` multiplies the result because data-parallel
    all-reduce averages gradients over ranks (as verl's ``agg_loss``).

    With k_i = −Â_i W̃_i on tokens in scope and −Â_i W_i outside (both detached), the loss is
    Σ_i k_i·(S_i − sg[S_i]) + Σ_i k_i·Σ_t ρ_{i,t}, where S_i = Σ_t m ρ δ: its value is
    −Σ_i Â_i W̃_i Σ_t ρ and its gradient −Σ_i Σ_t Â_i W̃_i ρ ∇log π — the linear, clipping-free
    estimator, computed from per-row sums (no (B, T) temporaries beyond :func:`token_sums`).
    """
    acc = sums.grad_all.dtype
    k_in = -(seq_advantages * group_weights.transformed)
    k_out = -(seq_advantages * group_weights.weights)
    value = (k_in * sums.mass_in + k_out * (sums.mass_all - sums.mass_in)).sum()
    total = (k_in.to(acc) * (sums.grad_in - sums.grad_in.detach())).sum().to(torch.float64)
    if sums.grad_in is not sums.grad_all:  # scope="shared_prefix": tokens after the prefix keep W_i
        grad_out = sums.grad_all - sums.grad_in
        total = total + (k_out.to(acc) * (grad_out - grad_out.detach())).sum().to(torch.float64)
    if group_weights.grad_coef is not None:
        # Ablation "no stop-grad": add −c_j (W_j(θ) − sg[W_j(θ)]) per row (zero value, exact gradient).
        w_theta = sequence_weights(sums.log_ratio, sums.length)
        total = total - (group_weights.grad_coef * (w_theta - w_theta.detach())).sum()
    return ((total + value) / num_sequences * dp_size).to(dtype)


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
        (loss, metrics); metrics are described in :func:`dfpo.algorithm.group_statistics.group_weight_metrics`
        and are only computed when the group statistics come from this batch.
    """
    check_transform(transform)
    check_scope(scope)
    if (
        log_prob.shape != old_log_prob.shape
        or log_prob.shape != response_mask.shape
        or advantages.shape != log_prob.shape
    ):
        raise ValueError(
            "old_log_prob, log_prob, advantages and response_mask must have the same (B, T) shape; got "
            f"{tuple(old_log_prob.shape)}, {tuple(log_prob.shape)}, {tuple(advantages.shape)}, {tuple(response_mask.shape)}"
        )
    if group_index.shape != log_prob.shape[:1]:
        raise ValueError(
            f"group_index must have shape (B,) = {tuple(log_prob.shape[:1])}, got {tuple(group_index.shape)}"
        )
    if scope == "shared_prefix" and prefix_len is None:
        if responses is None:
            raise ValueError(
                'scope="shared_prefix" needs `responses` (the response token ids) to find each group\'s common prefix.'
            )
        prefix_len = shared_prefix_lengths(group_index, responses, response_mask, across_ranks=False).to(
            log_prob.device
        )
    if scope == "all":
        prefix_len = None

    sums = token_sums(log_prob, old_log_prob, response_mask, rollout_is_weights, prefix_len)
    metrics: dict[str, float] = {}
    if group_weights is None:
        rows = row_statistics_from_sums(sums, advantages, response_mask, group_index)
        group_weights = compute_group_weights(rows, transform, scale, stop_grad)
        metrics = group_weight_metrics(rows, group_weights)
        seq_adv = rows.advantage
    else:
        seq_adv = sequence_advantages(advantages, response_mask)
    if num_sequences is None:
        num_sequences = max(int((sums.length > 0).sum()), 1)
    loss = dfpo_loss_from_group_weights(
        sums,
        seq_adv,
        group_weights,
        num_sequences=num_sequences,
        dp_size=dp_size,
        dtype=torch.promote_types(log_prob.dtype, torch.float32),
    )
    return loss, metrics
