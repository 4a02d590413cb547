"""``dfpo/update_kl``: how far one training step's update moved the policy (``dfpo_measure_update_kl``).

Measured on the step's own response tokens over every data-parallel rank, with
r = log π_new − log π_old (π_new: the parameters after the update, one no-grad forward of every
row, taken by the actor worker after verl's ``train_mini_batch``)::

    update_kl             = ½ Σ mask·r² / Σ mask   (KL(π_old ‖ π_new) to second order)
    update_log_ratio_mean =   Σ mask·r  / Σ mask

The squared form is the update's size whatever its direction: on the very samples it was fitted
to, the plain mean of −r is no KL estimate (the update raises some of their log-probs and lowers
others; measured negative on a step whose next-step KL was 5e-3). The weight-sync check of
:mod:`dfpo.operations.run_checks` compares it with the rollout's KL.
"""

from __future__ import annotations

import torch

from dfpo.algorithm.collectives import dp_world


def update_kl_metrics(
    new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, response_mask: torch.Tensor, dp_group=None
) -> dict[str, float]:
    """``dfpo/update_kl`` and ``dfpo/update_log_ratio_mean`` of (B, T) log-probs after and before the
    update (a collective: every rank of ``dp_group`` calls it)."""
    ratio = (new_log_probs - old_log_probs) * response_mask
    totals = torch.stack([0.5 * (ratio**2).sum(), ratio.sum(), response_mask.sum()]).to(torch.float64)
    if dp_world(dp_group)[1] > 1:
        torch.distributed.all_reduce(totals, group=dp_group)
    tokens = totals[2].clamp(min=1)
    return {"dfpo/update_kl": float(totals[0] / tokens), "dfpo/update_log_ratio_mean": float(totals[1] / tokens)}
