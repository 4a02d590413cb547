"""Staleness diagnostics of a training batch (``dfpo/staleness/...``), logged every step.

Asynchronous training (verl's ``colocate_async`` and ``separate_async`` trainers) updates on
responses sampled by older policies. Two numbers say how old, and what it does to the sequence
ratios a GSPO-style loss sees:

* ``policy_lag_{mean,max}`` — policy versions between the weights that generated a response
  (the oldest, when a partial rollout spanned several) and the weights the step starts from:
  ``(global_steps − 1) − min_global_steps`` per response, as verl tags it (0 when synchronous);
  ``local_update`` — the separate-async trainer's local update index within one parameter sync
  (its old log-probs come from the weights at local update 0);
* ``rollout_ratio_spread`` — mean over groups of max_i s_i − min_i s_i, with
  s_i = exp(mean_t log π_old(y_it)/π_rollout(y_it)) the sequence ratio between the policy the
  trainer uses as old and the one that sampled: ~0 on-policy, growing with staleness. This is
  the spread of W_i = s_i/L_i that DFPO's transform removes (``dfpo/weight_asymmetry_before`` →
  ``_after`` reports it at the current parameters).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from dfpo.algorithm.collectives import all_gather_objects


def policy_lag_metrics(tags: Iterable[Mapping], global_steps: int, local_update: int = 0) -> dict[str, float]:
    """``dfpo/staleness/policy_lag_*`` of a batch from its TransferQueue tags (padding rows skipped)."""
    lags = [(global_steps - 1) - int(tag["min_global_steps"]) for tag in tags if not tag.get("is_padding", False)]
    return {
        "dfpo/staleness/policy_lag_mean": sum(lags) / len(lags) if lags else 0.0,
        "dfpo/staleness/policy_lag_max": float(max(lags)) if lags else 0.0,
        "dfpo/staleness/local_update": float(local_update),
    }


def sequence_log_ratios(log_p: torch.Tensor, log_q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) mean over each response's valid tokens of log p − log q (0 for an empty response)."""
    mask = mask.to(torch.bool)
    diff = torch.where(mask, log_p.double() - log_q.double(), torch.zeros((), dtype=torch.float64))
    return diff.sum(-1) / mask.sum(-1).clamp(min=1)


def rollout_ratio_spread(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    mask: torch.Tensor,
    group_id: torch.Tensor,
    dp_group=None,
) -> dict[str, float]:
    """``dfpo/staleness/rollout_ratio_spread`` over whole groups, whichever rank holds each member."""
    valid = mask.to(torch.bool).any(-1)
    s = sequence_log_ratios(old_log_probs, rollout_log_probs, mask).exp()
    local = [(int(g), float(v)) for g, v, ok in zip(group_id.tolist(), s.tolist(), valid.tolist(), strict=True) if ok]
    members: dict[int, list[float]] = {}
    for part in all_gather_objects(local, dp_group):
        for gid, value in part:
            members.setdefault(gid, []).append(value)
    spreads = [max(v) - min(v) for v in members.values() if len(v) >= 2]
    return {"dfpo/staleness/rollout_ratio_spread": sum(spreads) / len(spreads) if spreads else 0.0}
