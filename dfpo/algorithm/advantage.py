"""DFPO's group-relative outcome advantage (registered in verl as ``algorithm.adv_estimator=dfpo``).

    r_i = Σ_t R_{i,t}                                   (outcome reward of response i)
    Â_i = (r_i − mean_g r) / (std_g r + ε)              (std: unbiased, as verl's GRPO; optional)

computed in float64 so that Σ_{i in g} Â_i = 0 holds exactly up to float64 rounding — the
premise of every cancellation argument in the paper. Departures from verl's ``grpo`` estimator:

* singleton groups and groups whose rewards are all equal get Â = 0 exactly (verl's grpo gives a
  singleton Â = r_i);
* padding rows (all-zero response mask, e.g. the V1 trainer's ``pad…`` uids) are not group
  members and get Â = 0;
* the mean and std are computed in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dfpo.algorithm.group_ids import group_ids
from dfpo.algorithm.transforms import compact_group_index, group_sum

ADVANTAGE_EPSILON = 1e-6
"""ε in the std normalisation (verl's grpo default)."""


def compute_dfpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    norm_adv_by_std: bool = True,
    epsilon: float = ADVANTAGE_EPSILON,
) -> torch.Tensor:
    """Per-token advantages (B, T) in the dtype of ``token_level_rewards``; see the module doc."""
    if token_level_rewards.shape != response_mask.shape:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must have the same (B, T) shape"
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} uids for {token_level_rewards.shape[0]} responses")
    device = token_level_rewards.device
    mask = response_mask.to(torch.bool)
    valid = mask.any(dim=-1)
    rewards = token_level_rewards.to(torch.float64).sum(dim=-1)
    ids, num_groups = compact_group_index(
        group_ids(index.tolist() if isinstance(index, np.ndarray) else index).to(device)
    )
    count = group_sum(valid.to(torch.float64), ids, num_groups)
    mean = group_sum(torch.where(valid, rewards, 0.0), ids, num_groups) / count.clamp(min=1.0)
    centred = torch.where(valid, rewards - mean[ids], torch.zeros_like(rewards))
    if norm_adv_by_std:
        var = group_sum(centred * centred, ids, num_groups) / (count - 1.0).clamp(min=1.0)
        adv = centred / (var.sqrt()[ids] + epsilon)
    else:
        adv = centred
    adv = torch.where(valid & (count[ids] >= 2), adv, torch.zeros_like(adv))
    return (adv.unsqueeze(-1) * mask).to(token_level_rewards.dtype)


def dfpo_advantage_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's advantage-estimator interface: returns (advantages, returns), both (B, T).

    ``config`` is verl's ``algorithm`` config; ``norm_adv_by_std_in_grpo`` (default True) is
    honoured. ``index`` is the ``uid`` array, required: DFPO is group-relative.
    """
    if index is None:
        raise ValueError("algorithm.adv_estimator=dfpo needs the batch's `uid` array (one group per prompt)")
    norm = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    advantages = compute_dfpo_outcome_advantage(token_level_rewards, response_mask, index, norm_adv_by_std=norm)
    return advantages, advantages
