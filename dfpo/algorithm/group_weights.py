"""The group step of DFPO: W̃ = T(W) over whole groups, with the no-stop-grad coefficients.

From the per-response :class:`~dfpo.algorithm.group_statistics.RowStatistics` of every member of
each group, :func:`compute_group_weights` computes W_i = s_i/L_i and its within-group transform
W̃ = T(W) (Min-Replace, Eq. 17, or Orth-Proj, Eq. 18: :mod:`dfpo.algorithm.transforms`), and for
the "no stop-grad" ablation the coefficients that carry the gradient of T(W(θ)) to each row. The
result, :class:`GroupWeights`, is detached and aligned with the rows, so a micro-batch's loss
(:func:`dfpo.algorithm.loss.dfpo_loss_from_group_weights`) can use the rows it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dfpo.algorithm.group_statistics import RowStatistics, sequence_weights
from dfpo.algorithm.transforms import apply_group_transform, check_transform


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
