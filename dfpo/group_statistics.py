"""Per-response and per-group statistics of DFPO: W_i, the transformed W̃_i and the diagnostics.

Definitions (``spec`` §3 of this project; the paper's Eq. 17/18 live in :mod:`dfpo.transforms`):

    δ_{i,t} = log π_θ(y_{i,t}|h_{i,t}) − log π_old(y_{i,t}|h_{i,t}),      L_i = |y_i|
    s_i     = exp( clamp( (1/L_i) Σ_t δ_{i,t}, max=10 ) )                 (GSPO's sequence ratio)
    W_i     = s_i · λ_i,   λ_i = 1/L_i                                    (GSPO, seq-mean-token-mean)
    W̃      = T(W) within each group (uid)

The group step only needs a handful of scalars per response (:class:`RowStatistics`), so it can
run on the rows of one call, or on rows gathered from every micro-batch and data-parallel rank
(:mod:`dfpo.exact_update`), with the same code. Everything here is computed in float64: the
cancellation Σ_i Â_i W̃_i = 0 then holds to ~1e-16 relative.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from dfpo.transforms import apply_group_transform, check_transform, compact_group_index, group_min, group_sum

SCOPES: tuple[str, ...] = ("all", "shared_prefix")
"""Valid values of ``scope``: which tokens get W̃_i (the rest keep W_i)."""

LOG_RATIO_CLAMP_MAX = 10.0
"""Upper clamp of log s_i, as verl's ``gspo`` loss clamps its log-ratio."""

ADVANTAGE_CONSTANCY_TOL = 1e-3
"""Relative tolerance for "the advantage is the same on every token of a response"."""


def check_scope(scope: str) -> None:
    """Raise a ValueError naming the valid scopes when ``scope`` is not one of them."""
    if scope not in SCOPES:
        raise ValueError(f"Unknown DFPO scope {scope!r}; valid scopes are {list(SCOPES)}.")


def sequence_lengths(response_mask: torch.Tensor) -> torch.Tensor:
    """L_i: the number of valid response tokens of each row, as float64 (B,)."""
    return response_mask.to(torch.float64).sum(dim=-1)


def sequence_log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log s_i = clamp((1/L_i) Σ_t δ_{i,t}, max=10), float64 (B,), differentiable in ``log_prob``.

    Empty rows get log s_i = 0.
    """
    mask = response_mask.to(torch.float64)
    delta = (log_prob.to(torch.float64) - old_log_prob.to(torch.float64)) * mask
    mean = delta.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
    return torch.clamp(mean, max=LOG_RATIO_CLAMP_MAX)


def sequence_weights(log_ratio: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """W_i = s_i / L_i (0 on empty rows), from log s_i and L_i."""
    return torch.where(lengths > 0, torch.exp(log_ratio) / lengths.clamp(min=1.0), torch.zeros_like(log_ratio))


def sequence_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Â_i from verl's per-token advantages (B, T): the value on the response's valid tokens.

    DFPO is defined for sequence-level (outcome) advantages. A per-token advantage that varies
    within a response (GAE, token-level rewards) is an error, not something to average silently.
    """
    mask = response_mask.to(torch.bool)
    adv = advantages.to(torch.float64)
    count = mask.sum(dim=-1)
    mean = torch.where(mask, adv, torch.zeros_like(adv)).sum(dim=-1) / count.clamp(min=1)
    spread = torch.where(mask, (adv - mean.unsqueeze(-1)).abs(), torch.zeros_like(adv)).amax(dim=-1)
    bad = spread > ADVANTAGE_CONSTANCY_TOL * (1.0 + mean.abs())
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise ValueError(
            f"dfpo needs one advantage per response, but row {row} has per-token advantages that vary by "
            f"{float(spread[row]):.3g}. Use an outcome advantage estimator (algorithm.adv_estimator=dfpo or grpo)."
        )
    return mean


def shared_prefix_lengths(responses: torch.Tensor, response_mask: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """P_g for each row: the length of its group's longest common response prefix (long, (B,)).

    The common prefix of all valid members equals min_i LCP(y_first, y_i), where y_first is the
    group's first valid member. Padding rows get 0 and do not shorten their group's prefix.
    """
    mask = response_mask.to(torch.bool)
    valid = mask.any(dim=-1)
    ids, num_groups = compact_group_index(group_index)
    rows = torch.arange(responses.shape[0], device=responses.device)
    big = responses.shape[0]
    first = torch.full((num_groups,), big, dtype=torch.long, device=responses.device)
    first = first.scatter_reduce(0, ids, torch.where(valid, rows, torch.full_like(rows, big)), reduce="amin")
    ref_row = first[ids].clamp(max=big - 1)
    same = (responses == responses[ref_row]) & mask & mask[ref_row]
    lcp = torch.cumprod(same.to(torch.long), dim=-1).sum(dim=-1)
    prefix = torch.full((num_groups,), responses.shape[-1], dtype=torch.long, device=responses.device)
    prefix = prefix.scatter_reduce(0, ids, torch.where(valid, lcp, torch.full_like(lcp, responses.shape[-1])), reduce="amin")
    return torch.where(valid, prefix[ids], torch.zeros_like(lcp))


def token_scope_masks(response_mask: torch.Tensor, prefix_len: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(in_scope, out_of_scope) bool masks (B, T): tokens that get W̃_i and tokens that keep W_i."""
    mask = response_mask.to(torch.bool)
    if prefix_len is None:
        return mask, torch.zeros_like(mask)
    positions = torch.arange(mask.shape[-1], device=mask.device).unsqueeze(0)
    in_prefix = positions < prefix_len.unsqueeze(-1)
    return mask & in_prefix, mask & ~in_prefix


@dataclass(frozen=True)
class RowStatistics:
    """What the group step needs of each response: scalars, cheap to gather across ranks.

    ``scope_mass`` a_i = Σ_{t in scope} ρ_{i,t} and ``rest_mass`` b_i = Σ_{t not in scope} ρ_{i,t}
    (ρ = rollout IS weight, 1 when absent) weight the gradient of W̃_i and W_i in the
    no-stop-grad ablation; with stop-gradient they only enter the diagnostics.
    """

    group_index: torch.Tensor  # (B,) long
    log_ratio: torch.Tensor  # (B,) float64, log s_i (detached)
    length: torch.Tensor  # (B,) float64, L_i
    advantage: torch.Tensor  # (B,) float64, Â_i
    scope_mass: torch.Tensor  # (B,) float64, a_i
    rest_mass: torch.Tensor  # (B,) float64, b_i

    @property
    def valid(self) -> torch.Tensor:
        """Rows with at least one response token (padding rows are not group members)."""
        return self.length > 0

    def select(self, index: torch.Tensor) -> RowStatistics:
        """The rows ``index`` (a LongTensor or bool mask)."""
        return RowStatistics(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def cat(parts: list[RowStatistics]) -> RowStatistics:
        """Rows of several parts, in order."""
        return RowStatistics(**{f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(RowStatistics)})


def row_statistics(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    prefix_len: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> RowStatistics:
    """The :class:`RowStatistics` of a (B, T) batch at the parameters that produced ``log_prob``."""
    in_scope, out_scope = token_scope_masks(response_mask, prefix_len)
    rho = torch.ones_like(response_mask, dtype=torch.float64) if rollout_is_weights is None else rollout_is_weights.to(torch.float64)
    return RowStatistics(
        group_index=group_index.to(torch.long),
        log_ratio=sequence_log_ratio(log_prob.detach(), old_log_prob, response_mask),
        length=sequence_lengths(response_mask),
        advantage=sequence_advantages(advantages, response_mask),
        scope_mass=(rho * in_scope).sum(dim=-1),
        rest_mass=(rho * out_scope).sum(dim=-1),
    )


@dataclass(frozen=True)
class GroupWeights:
    """Detached per-response weights after the group step, aligned with the rows they came from.

    ``grad_coef`` c_j = ∂/∂W_j Σ_i Â_i (a_i T(W)_i + b_i W_i) is set for the no-stop-grad ablation:
    the loss adds −c_j · (W_j(θ) − sg[W_j(θ)]) per row, which reproduces exactly the gradient of
    differentiating through T(W(θ)) even when the group's rows are in other micro-batches.
    """

    weights: torch.Tensor  # (B,) float64, W_i
    transformed: torch.Tensor  # (B,) float64, W̃_i
    grad_coef: torch.Tensor | None  # (B,) float64 or None (stop-gradient)

    def select(self, index: torch.Tensor) -> GroupWeights:
        """The rows ``index`` (a LongTensor or bool mask)."""
        coef = None if self.grad_coef is None else self.grad_coef[index]
        return GroupWeights(self.weights[index], self.transformed[index], coef)


def compute_group_weights(
    rows: RowStatistics, transform: str = "min_replace", scale: float = 0.5, stop_grad: bool = True
) -> GroupWeights:
    """W = s/L, W̃ = T(W) per group, and the no-stop-grad coefficients, over *whole* groups."""
    check_transform(transform)
    valid = rows.valid
    weights = sequence_weights(rows.log_ratio, rows.length)
    if stop_grad:
        transformed = apply_group_transform(weights, rows.advantage, rows.group_index, transform, scale, valid)
        return GroupWeights(weights, transformed, None)
    leaf = weights.detach().clone().requires_grad_(True)
    transformed = apply_group_transform(leaf, rows.advantage, rows.group_index, transform, scale, valid)
    objective = (rows.advantage * (rows.scope_mass * transformed + rows.rest_mass * leaf)).sum()
    (coef,) = torch.autograd.grad(objective, leaf)
    return GroupWeights(weights, transformed.detach(), coef)


def group_weight_metrics(rows: RowStatistics, group_weights: GroupWeights, prefix: str = "dfpo/") -> dict[str, float]:
    """Learning-tax diagnostics of a batch of whole groups.

    * ``weight_asymmetry_{before,after}``: mean over groups with ≥ 2 members of
      (max_i w_i − min_i w_i) / |mean_i w_i|.
    * ``cancellation_residual_{before,after}``: mean over groups with Σ|Â_i w_i| > 0 of
      |Σ_i Â_i w_i| / Σ_i |Â_i w_i| — 0 when a token shared by the whole group cancels.
    * ``negative_weight_frac``: fraction of responses with w̃_i < 0 (Orth-Proj can produce them).
    * ``weight_{min,mean,max}``: of w̃ over responses.
    """
    valid = rows.valid
    ids, num_groups = compact_group_index(rows.group_index)
    ones = valid.to(torch.float64)
    size = group_sum(ones, ids, num_groups)
    multi = size >= 2
    metrics: dict[str, float] = {}
    for tag, w in (("before", group_weights.weights), ("after", group_weights.transformed)):
        w = torch.where(valid, w, torch.zeros_like(w))
        w_max = -group_min(-w, ids, num_groups, valid)
        w_min = group_min(w, ids, num_groups, valid)
        w_mean = group_sum(w, ids, num_groups) / size.clamp(min=1.0)
        asym = (w_max - w_min) / w_mean.abs().clamp(min=1e-30)
        metrics[f"{prefix}weight_asymmetry_{tag}"] = float(asym[multi].mean()) if bool(multi.any()) else 0.0
        signed = group_sum(rows.advantage * w, ids, num_groups)
        total = group_sum((rows.advantage * w).abs(), ids, num_groups)
        has = total > 0
        residual = signed.abs() / total.clamp(min=1e-300)
        metrics[f"{prefix}cancellation_residual_{tag}"] = float(residual[has].mean()) if bool(has.any()) else 0.0
    w_t = group_weights.transformed[valid]
    n_valid = max(int(valid.sum()), 1)
    metrics[f"{prefix}negative_weight_frac"] = float((w_t < 0).sum()) / n_valid
    metrics[f"{prefix}weight_min"] = float(w_t.min()) if w_t.numel() else 0.0
    metrics[f"{prefix}weight_mean"] = float(w_t.mean()) if w_t.numel() else 0.0
    metrics[f"{prefix}weight_max"] = float(w_t.max()) if w_t.numel() else 0.0
    return metrics
