"""The cancellation residual: how much of the gradient of a token shared by a group is left over.

A group's responses share their first tokens (same history, same token), so such a token gets the
group sum Σ_i Â_i w_i ∇log π of its members' effective modulations w_i (the paper's learning
tax). The residual

    |Σ_i Â_i w_i| / Σ_i |Â_i w_i|          (0: the shared token's gradient cancels; 1: nothing does)

is averaged over groups. It is measured three ways, one function each (pure: torch only):

* :func:`weight_residual`, from per-response weights: DFPO's W before and after the transform
  (``dfpo/cancellation_residual_{before,after}``, with the other weight diagnostics of
  :func:`group_weight_metrics`), and GSPO's W_i with its sequence clip (:func:`gspo_clipped`).
* :func:`clip_residual`, for token-level losses (vanilla GRPO, CISPO): at a shared position every
  member has the same ratio r_t, so the modulation differs only through a clip that depends on
  the sign of Â_i (:func:`shared_positions_clipped`) — ``dfpo/shared_token_clip_residual``.
* :func:`gradient_residual`, from the gradient ∂L/∂log π the loss actually gives the shared
  positions — ``dfpo/shared_token_grad_residual``; it also sees a regression on the gradient path
  that the weights cannot show (e.g. the no-stop-grad ablation, whose weights still cancel).

The meters that collect these inputs from verl's loss function live in
:mod:`dfpo.verl.residual_meters`.
"""

from __future__ import annotations

import torch

from dfpo.algorithm.group_statistics import RowStatistics
from dfpo.algorithm.group_weights import GroupWeights
from dfpo.algorithm.transforms import compact_group_index, group_min, group_sum


def weight_residual(
    advantage: torch.Tensor, weights: torch.Tensor, group_index: torch.Tensor, valid: torch.Tensor
) -> float:
    """Mean over groups with Σ_i |Â_i w_i| > 0 of |Σ_i Â_i w_i| / Σ_i |Â_i w_i| (0.0 when none).

    All arguments are (B,); rows with ``valid`` False (empty responses) are not group members."""
    ids, num_groups = compact_group_index(group_index)
    w = torch.where(valid, weights, torch.zeros_like(weights))
    signed = group_sum(advantage * w, ids, num_groups)
    total = group_sum((advantage * w).abs(), ids, num_groups)
    has = total > 0
    residual = signed.abs() / total.clamp(min=1e-300)
    return float(residual[has].mean()) if bool(has.any()) else 0.0


def weight_asymmetry(weights: torch.Tensor, group_index: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean over groups with ≥ 2 valid members of (max_i w_i − min_i w_i) / |mean_i w_i| (0.0 when none)."""
    ids, num_groups = compact_group_index(group_index)
    size = group_sum(valid.to(torch.float64), ids, num_groups)
    multi = size >= 2
    w = torch.where(valid, weights, torch.zeros_like(weights))
    w_max = -group_min(-w, ids, num_groups, valid)
    w_min = group_min(w, ids, num_groups, valid)
    w_mean = group_sum(w, ids, num_groups) / size.clamp(min=1.0)
    asym = (w_max - w_min) / w_mean.abs().clamp(min=1e-30)
    return float(asym[multi].mean()) if bool(multi.any()) else 0.0


def group_weight_metrics(rows: RowStatistics, group_weights: GroupWeights, prefix: str = "dfpo/") -> dict[str, float]:
    """The weight diagnostics of a batch of whole groups (w = W before, W̃ after the transform).

    * ``weight_asymmetry_{before,after}``: :func:`weight_asymmetry`.
    * ``cancellation_residual_{before,after}``: :func:`weight_residual` — 0 when a token shared by
      the whole group cancels.
    * ``negative_weight_frac``: fraction of responses with w̃_i < 0 (Orth-Proj can produce them).
    * ``weight_{min,mean,max}``: of w̃ over responses.
    """
    valid = rows.valid
    metrics: dict[str, float] = {}
    for tag, w in (("before", group_weights.weights), ("after", group_weights.transformed)):
        metrics[f"{prefix}weight_asymmetry_{tag}"] = weight_asymmetry(w, rows.group_index, valid)
        metrics[f"{prefix}cancellation_residual_{tag}"] = weight_residual(rows.advantage, w, rows.group_index, valid)
    w_t = group_weights.transformed[valid]
    n_valid = max(int(valid.sum()), 1)
    metrics[f"{prefix}negative_weight_frac"] = float((w_t < 0).sum()) / n_valid
    metrics[f"{prefix}weight_min"] = float(w_t.min()) if w_t.numel() else 0.0
    metrics[f"{prefix}weight_mean"] = float(w_t.mean()) if w_t.numel() else 0.0
    metrics[f"{prefix}weight_max"] = float(w_t.max()) if w_t.numel() else 0.0
    return metrics


def gspo_clipped(rows: RowStatistics, clip_low: float, clip_high: float) -> torch.Tensor:
    """(B,) bool: GSPO's sequence clip zeroes the gradient of response i (Â_i > 0 and
    s_i > 1+ε_high, or Â_i < 0 and s_i < 1−ε_low); its effective weight is then 0, else s_i/L_i."""
    s = torch.exp(rows.log_ratio)
    return ((rows.advantage > 0) & (s > 1 + clip_high)) | ((rows.advantage < 0) & (s < 1 - clip_low))


def shared_positions_clipped(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    prefix_len: torch.Tensor,
    clip_low: float,
    clip_high: float,
    sign_dependent: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of a token-level loss: (shared positions, of them those clipped for one sign only).

    Vanilla PPO clipping depends on the sign of Â_i (r_t > 1+ε_high clips the positive members,
    r_t < 1−ε_low the negative ones), so a clipped shared position no longer cancels;
    ``sign_dependent=False`` (CISPO's detached clip) counts none."""
    positions = torch.arange(log_ratio.shape[-1], device=log_ratio.device).unsqueeze(0)
    shared = (positions < prefix_len.unsqueeze(-1)) & response_mask.to(torch.bool)
    r = torch.exp(log_ratio.detach().float())
    above = shared & (r > 1 + clip_high)
    below = shared & (r < 1 - clip_low)
    n_shared = shared.sum(-1)
    n_out = (above | below).sum(-1) if sign_dependent else torch.zeros_like(n_shared)
    return n_shared, n_out


def clip_residual(
    group_id: torch.Tensor, advantage: torch.Tensor, n_shared: torch.Tensor, n_clipped: torch.Tensor
) -> float:
    """Over the groups with advantages of both signs: clipped shared positions / shared positions.

    A clipped shared position leaves residual 1 (one sign's members are clipped), the others 0.
    Shared positions and r_t are common to the group, so each group counts its first row."""
    shared_total, out_total = 0, 0
    for g in torch.unique(group_id):
        m = group_id == g
        if not (bool((advantage[m] > 0).any()) and bool((advantage[m] < 0).any())):
            continue
        first = int(torch.nonzero(m)[0, 0])
        shared_total += int(n_shared[first])
        out_total += int(n_clipped[first])
    return out_total / shared_total if shared_total else 0.0


def gradient_residual(
    group_id: torch.Tensor, prefix_len: torch.Tensor, grad: torch.Tensor, group_size: int
) -> tuple[float, int]:
    """(mean residual, number of groups measured) of rows given as (B,) group ids, (B,) prefix
    lengths and (B, T') gradients g_{i,t} w.r.t. the response log-probs (T' ≥ the longest prefix):

        mean over groups of  Σ_{t<P} |Σ_i g_{i,t}|  /  Σ_{t<P} Σ_i |g_{i,t}|      (P: the prefix length)

    Only groups with exactly ``group_size`` rows and a non-empty shared prefix count; a group
    whose shared tokens get no gradient at all (Σ|g| = 0, e.g. equal rewards) is left out."""
    residuals = []
    for rows in prefix_groups(group_id, prefix_len, group_size):
        shared = grad[rows, : int(prefix_len[rows][0])].to(torch.float64)
        total = shared.abs().sum()
        if float(total) == 0.0:
            continue
        residuals.append(float(shared.sum(dim=0).abs().sum() / total))
    return (sum(residuals) / len(residuals) if residuals else 0.0), len(residuals)


def whole_groups(group_id: torch.Tensor, group_size: int) -> list[torch.Tensor]:
    """Row masks of the groups present with exactly ``group_size`` rows."""
    return [rows for rows in (group_id == g for g in torch.unique(group_id)) if int(rows.sum()) == group_size]


def prefix_groups(group_id: torch.Tensor, prefix_len: torch.Tensor, group_size: int) -> list[torch.Tensor]:
    """Row masks of the whole groups whose responses share a non-empty prefix."""
    return [rows for rows in whole_groups(group_id, group_size) if int(prefix_len[rows][0]) > 0]
