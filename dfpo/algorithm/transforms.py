"""Within-group weight transforms of DFPO (arXiv 2604.13088, Section "stop-gradient transforms").

A group is the G responses y_1..y_G sampled for one prompt, with group-relative advantages
Â_i (Σ_i Â_i = 0) and effective token modulations w_i = W_i. A shared step (same history, same
token) receives the group gradient

    1/G · Σ_i Â_i w_i ∇θ log π(a*|h*),

which vanishes only when Σ_i Â_i w_i = 0. The transforms make it vanish for every group:

* ``min_replace`` (Eq. 17):  w̃_i = min_j w_j            ⇒  Σ_i Â_i w̃_i = w_min Σ_i Â_i = 0.
* ``orth_proj``   (Eq. 18):  w̃ = w − (Âᵀw / ‖Â‖²) Â      ⇒  Âᵀw̃ = 0 (the mean of w is kept).
* ``scale``       (ablation "scale by 0.5"): w̃ = κ·w, keeps the asymmetry.
* ``none``        (control): w̃ = w.

Every function here is a pure tensor function over a *flat* batch: one weight and one advantage
per response, and ``group_index`` holding the group id of each response. Rows with ``valid`` False
(padding: an all-zero response mask) are not group members: they never enter a minimum or a
projection, and their transformed weight is 0.
"""

from __future__ import annotations

import torch

TRANSFORMS: tuple[str, ...] = ("min_replace", "orth_proj", "scale", "none")
"""Valid values of ``transform`` (config key ``policy_loss.dfpo_transform``)."""

ORTH_PROJ_MIN_NORM = 1e-12
"""‖Â‖² at or below which Orth-Proj leaves a group's weights unchanged (all advantages zero)."""


def check_transform(transform: str) -> None:
    """Raise a ValueError naming the valid transforms when ``transform`` is not one of them."""
    if transform not in TRANSFORMS:
        raise ValueError(f"Unknown DFPO transform {transform!r}; valid transforms are {list(TRANSFORMS)}.")


def compact_group_index(group_index: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to 0..K-1 (in order of first sorted id); returns (ids, K)."""
    if group_index.dim() != 1:
        raise ValueError(f"group_index must be 1-D (one id per response), got shape {tuple(group_index.shape)}")
    unique, inverse = torch.unique(group_index, return_inverse=True)
    return inverse, int(unique.numel())


def group_sum(values: torch.Tensor, group_ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Σ over the members of each group: returns a (K,) tensor (differentiable)."""
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return out.index_add(0, group_ids, values)


def group_min(values: torch.Tensor, group_ids: torch.Tensor, num_groups: int, valid: torch.Tensor) -> torch.Tensor:
    """min over the valid members of each group: (K,) tensor; +inf for a group with no valid member."""
    masked = torch.where(valid, values, torch.full_like(values, float("inf")))
    out = torch.full((num_groups,), float("inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, group_ids, masked, reduce="amin", include_self=True)


def apply_group_transform(
    weights: torch.Tensor,
    advantages: torch.Tensor,
    group_index: torch.Tensor,
    transform: str = "min_replace",
    scale: float = 0.5,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Apply a DFPO within-group transform T to per-response weights.

    Args:
        weights: (B,) effective modulations w_i (any float dtype; differentiable).
        advantages: (B,) sequence-level advantages Â_i.
        group_index: (B,) integer group id of each response.
        transform: one of :data:`TRANSFORMS`.
        scale: κ of the ``scale`` ablation (w̃ = κ·w).
        valid: optional (B,) bool, False for padding rows (excluded from every group statistic).

    Returns:
        (B,) transformed weights w̃ in the dtype of ``weights``; 0 on invalid rows. Gradients flow
        through the transform (DFPO detaches the result; the "no stop-grad" ablation does not).
    """
    check_transform(transform)
    if weights.shape != advantages.shape or weights.shape != group_index.shape:
        raise ValueError(
            "weights, advantages and group_index must all have shape (B,); got "
            f"{tuple(weights.shape)}, {tuple(advantages.shape)}, {tuple(group_index.shape)}"
        )
    if valid is None:
        valid = torch.ones_like(weights, dtype=torch.bool)
    valid = valid.to(torch.bool)
    zero = torch.zeros_like(weights)
    if transform == "none":
        return torch.where(valid, weights, zero)
    if transform == "scale":
        return torch.where(valid, weights * scale, zero)

    ids, num_groups = compact_group_index(group_index)
    if transform == "min_replace":
        # Eq. 17: w̃_i = min_{j in group} w_j (a sorted min, so ties and order do not matter).
        w_min = group_min(weights, ids, num_groups, valid)
        return torch.where(valid, w_min[ids], zero)

    # Eq. 18: w̃ = w − (Âᵀw / ‖Â‖²) Â, per group; ‖Â‖ = 0 leaves w unchanged.
    adv = torch.where(valid, advantages.to(weights.dtype), zero)
    w = torch.where(valid, weights, zero)
    dot = group_sum(adv * w, ids, num_groups)
    norm_sq = group_sum(adv * adv, ids, num_groups)
    has_norm = norm_sq > ORTH_PROJ_MIN_NORM
    coef = torch.where(has_norm, dot / torch.where(has_norm, norm_sq, torch.ones_like(norm_sq)), torch.zeros_like(dot))
    return torch.where(valid, w - coef[ids] * adv, zero)
