"""Exact group statistics for one mini-batch, whichever micro-batch or rank holds each member.

DFPO's transform needs W_j = s_j/L_j of every member j of a group at the *current* parameters θ
(every mini-batch after the first is off-policy). verl spreads a group over micro-batches, ranks
and mini-batches, so before the gradient pass of each mini-batch:

1. the groups touched by the mini-batch on any rank are agreed on (one small all-gather);
2. each rank computes, for its rows of those groups, log π_θ with one no-grad forward — or takes
   s_j = 1 exactly when θ = θ_old (first mini-batch of the first epoch, log-probs recomputed by
   the actor), which costs no forward;
3. the per-row scalars (:class:`dfpo.algorithm.group_statistics.RowStatistics`) are all-gathered, the
   transform runs on whole groups, and each rank keeps W, W̃ (and the no-stop-grad coefficients)
   of its mini-batch rows, which the micro-batch losses then use.

When mini-batches hold whole groups (the common case), step 2 forwards exactly the mini-batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dfpo.algorithm.cancellation_residual import group_weight_metrics
from dfpo.algorithm.collectives import all_gather_objects, dp_world
from dfpo.algorithm.group_statistics import RowStatistics, row_statistics
from dfpo.algorithm.group_weights import GroupWeights, compute_group_weights


@dataclass
class StepRows:
    """This rank's rows of one training step, padded (B, T), with per-row group ids and prefixes."""

    group_id: torch.Tensor  # (B,) long
    old_log_prob: torch.Tensor  # (B, T)
    advantages: torch.Tensor  # (B, T)
    response_mask: torch.Tensor  # (B, T)
    rollout_is_weights: torch.Tensor | None  # (B, T) or None
    prefix_len: torch.Tensor  # (B,) long, the group's common prefix length


@dataclass
class PrepassResult:
    """W, W̃ (and c) for the mini-batch rows, in mini-batch row order, plus diagnostics."""

    group_weights: GroupWeights
    metrics: dict[str, float]


LogProbFn = Callable[[torch.Tensor], torch.Tensor]
"""Given step-row indices (every rank calls it with the same count), their (n, T) log π_θ."""


def _pad_to_common_count(rows: torch.Tensor, dp_group, multiple: int) -> tuple[torch.Tensor, int]:
    """Repeat the first row so every rank forwards the same number of rows (FSDP needs equal steps)."""
    counts = all_gather_objects(int(rows.numel()), dp_group)
    target = max(counts)
    target = -(-target // multiple) * multiple
    if rows.numel() < target:
        rows = torch.cat([rows, rows[:1].repeat(target - rows.numel())])
    return rows, target


def exact_group_weights(
    step: StepRows,
    mini_batch_rows: torch.Tensor,
    *,
    transform: str,
    scale: float,
    stop_grad: bool,
    scope_prefix: bool,
    at_old_params: bool,
    log_prob_fn: LogProbFn,
    dp_group=None,
    forward_multiple: int = 1,
) -> PrepassResult:
    """Group weights of the rows ``mini_batch_rows`` (indices into ``step``) over their whole groups."""
    start = time.perf_counter()
    rank, _ = dp_world(dp_group)
    local_groups = torch.unique(step.group_id[mini_batch_rows]).tolist()
    touched = set()
    for part in all_gather_objects(local_groups, dp_group):
        touched.update(part)
    touched_t = torch.tensor(sorted(touched), dtype=torch.long)
    needed = torch.nonzero(torch.isin(step.group_id, touched_t)).flatten()

    forwarded = 0
    if at_old_params:
        log_prob = step.old_log_prob[needed]  # θ = θ_old: s_j = 1 exactly, no forward
    else:
        padded, forwarded = _pad_to_common_count(needed, dp_group, forward_multiple)
        log_prob = log_prob_fn(padded)[: needed.numel()].to(step.old_log_prob.dtype)
    is_w = None if step.rollout_is_weights is None else step.rollout_is_weights[needed]
    prefix = step.prefix_len[needed] if scope_prefix else None
    rows = row_statistics(
        log_prob,
        step.old_log_prob[needed],
        step.advantages[needed],
        step.response_mask[needed],
        step.group_id[needed],
        prefix_len=prefix,
        rollout_is_weights=is_w,
    )

    gathered = all_gather_objects((rows, needed.tolist()), dp_group)
    all_rows = RowStatistics.cat([r for r, _ in gathered])
    weights = compute_group_weights(all_rows, transform, scale, stop_grad)
    offset = sum(len(ids) for _, ids in gathered[:rank])
    position = {int(row): offset + k for k, row in enumerate(gathered[rank][1])}
    take = torch.tensor([position[int(r)] for r in mini_batch_rows], dtype=torch.long)

    metrics = group_weight_metrics(all_rows, weights)
    total_needed = sum(len(ids) for _, ids in gathered)
    mb_rows = sum(all_gather_objects(int(mini_batch_rows.numel()), dp_group))
    metrics.update(
        {
            "dfpo/prepass_forward": 0.0 if at_old_params else 1.0,
            "dfpo/prepass_rows_per_mini_batch_row": (total_needed / max(mb_rows, 1)) if not at_old_params else 0.0,
            "dfpo/prepass_padding_rows": float(forwarded - needed.numel()) if not at_old_params else 0.0,
            "dfpo/prepass_time_s": time.perf_counter() - start,
        }
    )
    return PrepassResult(weights.select(take), metrics)
