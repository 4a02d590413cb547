"""Registers ``dfpo`` in verl's policy-loss and advantage-estimator registries.

Loaded by every ``import verl`` through the ``verl.plugins`` entry point of this package
(pyproject.toml), so the driver, the Ray TaskRunner and every worker actor know the names without
any environment variable. Fallbacks: ``VERL_USE_EXTERNAL_MODULES=dfpo.verl.plugin`` or
``actor_rollout_ref.model.external_lib=dfpo.verl.plugin``.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est, register_policy_loss

from dfpo.algorithm.advantage import dfpo_advantage_estimator
from dfpo.algorithm.loss import compute_dfpo_loss
from dfpo.algorithm.transforms import compact_group_index, group_sum
from dfpo.verl.loss_config import dfpo_options
from dfpo.verl.micro_batch_groups import current_micro_batch_groups
from dfpo.verl.version import check_verl_version

check_verl_version()

DFPO_NAME = "dfpo"


def _check_whole_groups(group_index: torch.Tensor, valid: torch.Tensor, group_size: int) -> None:
    """Without the exact pre-pass, every group must be whole inside the micro-batch."""
    ids, num_groups = compact_group_index(group_index)
    sizes = group_sum(valid.to(torch.float64), ids, num_groups)
    short = (sizes > 0) & (sizes < group_size)
    if bool(short.any()):
        raise RuntimeError(
            f"dfpo: a micro-batch holds {int(sizes[short][0])} of the {group_size} responses of a group, so the "
            "group's statistics are incomplete. Set actor_rollout_ref.actor.policy_loss.dfpo_exact_groups=true (the "
            "default of `python -m dfpo.main`): verl's length balancing and dynamic micro-batching split groups."
        )


@register_policy_loss(DFPO_NAME)
def compute_policy_loss_dfpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's policy-loss interface for DFPO (see :mod:`dfpo.algorithm.loss` for the objective).

    The policy-gradient term is always normalised by the number of sequences of the global
    mini-batch (``config.global_batch_info["global_batch_size"]``, times ``dp_size``): the 1/L_i of
    seq-mean-token-mean is already inside W_i. ``loss_agg_mode`` still governs verl's entropy and
    KL terms. Group membership comes from :mod:`dfpo.verl.micro_batch_groups`.
    """
    options = dfpo_options(config)
    groups = current_micro_batch_groups()
    mask = response_mask.to(torch.bool)
    info = dict(getattr(config, "global_batch_info", None) or {})
    dp_size = int(info.get("dp_size") or 1)
    num_sequences = info.get("global_batch_size")
    if num_sequences is None and dp_size > 1:
        raise ValueError("dfpo: global_batch_info['global_batch_size'] is required when dp_size > 1")
    prefix_len = groups.prefix_len if options.dfpo_scope == "shared_prefix" else None
    if options.dfpo_scope == "shared_prefix" and prefix_len is None:
        raise RuntimeError("dfpo: scope=shared_prefix needs the per-row common-prefix lengths (`dfpo_prefix_len`).")
    if groups.group_weights is None:
        _check_whole_groups(groups.group_index, mask.any(dim=-1), int(config.rollout_n))
    loss, metrics = compute_dfpo_loss(
        old_log_prob,
        log_prob,
        advantages,
        mask,
        groups.group_index,
        transform=options.dfpo_transform,
        scope=options.dfpo_scope,
        stop_grad=options.dfpo_stop_grad,
        scale=options.dfpo_scale,
        rollout_is_weights=rollout_is_weights,
        num_sequences=None if num_sequences is None else float(num_sequences),
        group_weights=groups.group_weights,
        prefix_len=prefix_len,
        dp_size=dp_size,
    )
    with torch.no_grad():
        negative_approx_kl = (log_prob - old_log_prob).masked_fill(~mask, 0.0)
        ppo_kl = -negative_approx_kl.sum() / mask.sum().clamp(min=1)
    metrics["actor/ppo_kl"] = float(ppo_kl)
    metrics["actor/pg_clipfrac"] = 0.0  # the DFPO estimator has no clipping in its gradient path
    metrics["actor/pg_clipfrac_lower"] = 0.0
    return loss, metrics


if ADV_ESTIMATOR_REGISTRY.get(DFPO_NAME) is not dfpo_advantage_estimator:
    register_adv_est(DFPO_NAME)(dfpo_advantage_estimator)
