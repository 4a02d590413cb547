"""Per-response statistics of DFPO: the definitions, their checks and the containers that carry them.

Definitions (docs/method.md §3):

    δ_{i,t} = log π_θ(y_{i,t}|h_{i,t}) − log π_old(y_{i,t}|h_{i,t}),      L_i = |y_i|
    s_i     = exp( clamp( (1/L_i) Σ_t δ_{i,t}, max=10 ) )                 (GSPO's sequence ratio)
    W_i     = s_i · λ_i,   λ_i = 1/L_i                                    (GSPO, seq-mean-token-mean)
    Â_i     = the advantage of response i (one per response: checked)

The group step W̃ = T(W) (:mod:`dfpo.algorithm.group_weights`, Eq. 17/18 in
:mod:`dfpo.algorithm.transforms`) only needs a handful of scalars per response
(:class:`RowStatistics`), so it can run on the rows of one call, or on rows gathered from every
micro-batch and data-parallel rank (:func:`dfpo.verl.group_prepass.exact_group_weights`), with the
same code. Everything here is computed in float64: the cancellation Σ_i Â_i W̃_i = 0 then holds
to ~1e-16 relative.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

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


def sequence_weights(log_ratio: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """W_i = s_i / L_i (0 on empty rows), from log s_i and L_i."""
    return torch.where(lengths > 0, torch.exp(log_ratio) / lengths.clamp(min=1.0), torch.zeros_like(log_ratio))


def sequence_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Â_i from verl's per-token advantages (B, T): the value on the response's valid tokens (float64).

    DFPO is defined for sequence-level (outcome) advantages. A per-token advantage that varies
    within a response (GAE, token-level rewards) is an error, not something to average silently;
    the check uses the within-row variance (two reductions, no (B, T) temporaries kept).
    """
    if advantages.dtype in (torch.float16, torch.bfloat16):
        advantages = advantages.float()  # squares of 8-bit mantissas would fake a within-row spread
    mask = response_mask.to(advantages.dtype)
    masked = advantages * mask
    count = response_mask.to(torch.bool).sum(dim=-1).clamp(min=1).to(torch.float64)
    mean = masked.sum(dim=-1, dtype=torch.float64) / count
    mean_sq = (masked * advantages).sum(dim=-1, dtype=torch.float64) / count
    var = (mean_sq - mean * mean).clamp(min=0.0)
    bad = var > (ADVANTAGE_CONSTANCY_TOL**2) * (1.0 + mean * mean)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise ValueError(
            f"dfpo needs one advantage per response, but row {row} has per-token advantages with standard deviation "
            f"{float(var[row].sqrt()):.3g}. Use an outcome advantage estimator (algorithm.adv_estimator=dfpo or grpo)."
        )
    return mean


@dataclass(frozen=True)
class TokenSums:
    """The per-row sums over tokens that DFPO needs, from one or a few passes over (B, T).

    With δ = log π_θ − log π_old, m the mask, ρ the rollout IS weight (1 when absent) and "in" the
    tokens in scope (all tokens, or the group's common prefix):

    * ``delta_sum``  D_i = Σ_t m δ            (differentiable: gives log s_i = D_i / L_i)
    * ``grad_all``   S_i = Σ_t m ρ δ          (differentiable: ∇S_i = Σ_t m ρ ∇log π)
    * ``grad_in``    S_i^in = Σ_{t in} m ρ δ  (differentiable)
    * ``mass_all``, ``mass_in``: Σ_t m ρ and Σ_{t in} m ρ (float64, detached)
    * ``length``     L_i (float64)
    """

    delta_sum: torch.Tensor
    grad_all: torch.Tensor
    grad_in: torch.Tensor
    mass_all: torch.Tensor
    mass_in: torch.Tensor
    length: torch.Tensor

    @property
    def log_ratio(self) -> torch.Tensor:
        """log s_i = clamp(D_i / L_i, max=10) in float64 (differentiable); 0 on empty rows."""
        return torch.clamp(self.delta_sum.to(torch.float64) / self.length.clamp(min=1.0), max=LOG_RATIO_CLAMP_MAX)


def token_sums(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    prefix_len: torch.Tensor | None = None,
) -> TokenSums:
    """:class:`TokenSums` of a (B, T) batch; one pass without IS weights and prefix scope."""
    acc = torch.float64 if log_prob.dtype == torch.float64 else torch.float32
    bool_mask = response_mask.to(torch.bool)
    length = bool_mask.sum(dim=-1).to(torch.float64)
    delta = (log_prob - old_log_prob) * response_mask.to(log_prob.dtype)
    delta_sum = delta.sum(dim=-1, dtype=acc)
    if rollout_is_weights is None:
        grad_all, weighted, mass_all = delta_sum, delta, length
    else:
        rho = rollout_is_weights.to(log_prob.dtype)
        weighted = delta * rho
        grad_all = weighted.sum(dim=-1, dtype=acc)
        mass_all = (rho * response_mask.to(rho.dtype)).sum(dim=-1, dtype=torch.float64)
    if prefix_len is None:
        grad_in, mass_in = grad_all, mass_all
    else:
        in_prefix = (torch.arange(delta.shape[-1], device=delta.device).unsqueeze(0) < prefix_len.unsqueeze(-1)).to(
            delta.dtype
        )
        grad_in = (weighted * in_prefix).sum(dim=-1, dtype=acc)
        if rollout_is_weights is None:
            mass_in = (response_mask.to(delta.dtype) * in_prefix).sum(dim=-1, dtype=torch.float64)
        else:
            mass_in = (rho * response_mask.to(rho.dtype) * in_prefix).sum(dim=-1, dtype=torch.float64)
    return TokenSums(delta_sum, grad_all, grad_in, mass_all, mass_in, length)


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
    sums = token_sums(log_prob.detach(), old_log_prob, response_mask, rollout_is_weights, prefix_len)
    return row_statistics_from_sums(sums, advantages, response_mask, group_index)


def row_statistics_from_sums(
    sums: TokenSums, advantages: torch.Tensor, response_mask: torch.Tensor, group_index: torch.Tensor
) -> RowStatistics:
    """:class:`RowStatistics` from already computed :class:`TokenSums` (detached here)."""
    return RowStatistics(
        group_index=group_index.to(torch.long),
        log_ratio=sums.log_ratio.detach(),
        length=sums.length,
        advantage=sequence_advantages(advantages, response_mask),
        scope_mass=sums.mass_in,
        rest_mass=sums.mass_all - sums.mass_in,
    )
