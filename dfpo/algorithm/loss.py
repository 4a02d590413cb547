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
``stop_grad=False`` (ablation) W̃_i(θ) = T(W(θ))_i stays differentiable.

Two forms of the same loss:

* :func:`dfpo_loss_per_token` is the formula above, line by line over (B, T) tensors, with each
  departure from verl's ``gspo`` loss marked; it is the definition, and needs whole groups.
* :func:`compute_dfpo_loss` (and :func:`dfpo_loss_from_group_weights`, its per-micro-batch part)
  is the production path: the tested optimisation of the per-token form, equal in value and
  gradient (tests/dfpo/test_loss_per_token.py), computed from per-row sums so that a micro-batch
  can use group weights computed over whole groups elsewhere; the no-stop-grad gradient is then
  applied per row through the coefficients of :class:`dfpo.algorithm.group_weights.GroupWeights`,
  exact whichever micro-batch holds the other members of the group.
"""

from __future__ import annotations

import torch

from dfpo.algorithm.cancellation_residual import group_weight_metrics
from dfpo.algorithm.group_statistics import (
    LOG_RATIO_CLAMP_MAX,
    TokenSums,
    check_scope,
    row_statistics_from_sums,
    sequence_advantages,
    sequence_weights,
    token_sums,
)
from dfpo.algorithm.group_weights import GroupWeights, compute_group_weights
from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from dfpo.algorithm.transforms import apply_group_transform, check_transform


def dfpo_loss_per_token(
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
    prefix_len: torch.Tensor | None = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """The DFPO loss of a (B, T) batch of whole groups, token by token, in the order of the objective.

    The definition that :func:`compute_dfpo_loss` computes from per-row sums: same arguments
    (without precomputed group weights), same value and gradient. It keeps (B, T) float64
    temporaries and needs every member of a group in the batch, so training uses the per-row form.
    Comments starting ``verl gspo:`` mark where it departs from verl's ``gspo`` policy loss
    (``compute_policy_loss_gspo`` in verl/trainer/ppo/core_algos.py).
    """
    check_transform(transform)
    check_scope(scope)
    prefix_len = _scope_prefix_len(scope, prefix_len, responses, response_mask, group_index, log_prob.device)
    mask = response_mask.to(torch.float64)
    valid = mask.sum(dim=-1) > 0

    # W_i = s_i / L_i: GSPO's sequence ratio s_i = exp((1/L_i) Σ_t δ_{i,t}) over the response length.
    delta = (log_prob.to(torch.float64) - old_log_prob.to(torch.float64)) * mask
    length = mask.sum(dim=-1)
    # verl gspo: clamps log(sg[s_i]·π/sg[π]) per token, which also zeroes a token's gradient when log s_i > 10
    log_s = torch.clamp(delta.sum(dim=-1) / length.clamp(min=1.0), max=LOG_RATIO_CLAMP_MAX)
    # verl gspo: its ratio is sg[s_i]·π/sg[π], and 1/L_i comes from seq-mean-token-mean, after the loss
    weights = sequence_weights(log_s, length)

    # W̃ = T(W) within each group, under stop-gradient: Eq. 17 (Min-Replace) or Eq. 18 (Orth-Proj).
    seq_adv = sequence_advantages(advantages, response_mask)
    if stop_grad:  # stop_grad=False is the "no stop-grad" ablation: W̃(θ) = T(W(θ)) is differentiated
        weights = weights.detach()  # verl gspo: sg[s_i] too, but the weight goes into no transform
    transformed = apply_group_transform(weights, seq_adv, group_index, transform, scale, valid)  # verl gspo: none

    # Each token's weight: W̃_i on the tokens in scope, W_i on the others (scope="shared_prefix").
    positions = torch.arange(mask.shape[-1], device=mask.device).unsqueeze(0)
    in_scope = torch.ones_like(mask, dtype=torch.bool) if prefix_len is None else positions < prefix_len.unsqueeze(-1)
    token_weight = torch.where(in_scope, transformed.unsqueeze(-1), weights.unsqueeze(-1))

    # The surrogate per token: ℓ_{i,t} = −Â_i · W̃_i · ρ_{i,t} · π_θ/sg[π_θ] · m_{i,t}.
    log_prob64 = log_prob.to(torch.float64)
    unit_ratio = torch.exp(log_prob64 - log_prob64.detach())  # value 1, gradient ∇log π_θ(y_{i,t})
    rho = 1.0 if rollout_is_weights is None else rollout_is_weights.to(torch.float64)
    # verl gspo: max(−Â·r, −Â·clip(r, 1−ε_low, 1+ε_high)); no clipping here, in value or gradient
    token_loss = -seq_adv.unsqueeze(-1) * token_weight * rho * unit_ratio * mask

    # Aggregation: L = (1/N) Σ_i Σ_t ℓ_{i,t}, N the sequences of the global mini-batch, times dp_size
    # (data-parallel all-reduce averages gradients over ranks, as verl's agg_loss).
    if num_sequences is None:
        num_sequences = max(int(valid.sum()), 1)
    # verl gspo: seq-mean-token-mean, Σ_i (1/L_i) Σ_t ℓ / N; here 1/L_i is inside W_i, before T
    loss = token_loss.sum() / num_sequences * dp_size
    return loss.to(torch.promote_types(log_prob.dtype, torch.float32))


def _scope_prefix_len(
    scope: str,
    prefix_len: torch.Tensor | None,
    responses: torch.Tensor | None,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    device: torch.device,
) -> torch.Tensor | None:
    """(B,) lengths of each row's group's common prefix for ``scope="shared_prefix"`` (computed ones on
    ``device``, the log-probs'), else None."""
    if scope == "all":
        return None
    if prefix_len is not None:
        return prefix_len
    if responses is None:
        raise ValueError(
            'scope="shared_prefix" needs `responses` (the response token ids) to find each group\'s common prefix.'
        )
    return shared_prefix_lengths(group_index, responses, response_mask, across_ranks=False).to(device)


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
        (loss, metrics); metrics are described in
        :func:`dfpo.algorithm.cancellation_residual.group_weight_metrics` and are only computed
        when the group statistics come from this batch.
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
            f"{tuple(old_log_prob.shape)}, {tuple(log_prob.shape)}, {tuple(advantages.shape)}, "
            f"{tuple(response_mask.shape)}"
        )
    if group_index.shape != log_prob.shape[:1]:
        raise ValueError(
            f"group_index must have shape (B,) = {tuple(log_prob.shape[:1])}, got {tuple(group_index.shape)}"
        )
    prefix_len = _scope_prefix_len(scope, prefix_len, responses, response_mask, group_index, log_prob.device)

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
