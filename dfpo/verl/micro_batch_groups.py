"""How the registered 7-argument ``dfpo`` loss learns group membership.

verl's policy-loss interface passes only (old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights). DFPO's full loss function
(:class:`dfpo.verl.loss_fn.DFPOLossFunction`, installed in the actor with ``set_loss_fn``) reads the
micro-batch's ``uid`` field — and the weights of the exact pre-pass when present — and publishes
them here for the duration of verl's ``ppo_loss`` call, which then calls the registered loss.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from dfpo.algorithm.group_weights import GroupWeights


@dataclass(frozen=True)
class MicroBatchGroups:
    """Group information of the rows of one micro-batch, in row order.

    Attributes:
        group_index: (B,) group id of each row.
        group_weights: W_i, W̃_i (and no-stop-grad coefficients) computed over whole groups by the
            exact pre-pass; None means "compute from this micro-batch", which must hold whole groups.
        prefix_len: (B,) common-prefix length of each row's group (for scope="shared_prefix").
    """

    group_index: torch.Tensor
    group_weights: GroupWeights | None = None
    prefix_len: torch.Tensor | None = None


_CURRENT: contextvars.ContextVar[MicroBatchGroups | None] = contextvars.ContextVar(
    "dfpo_micro_batch_groups", default=None
)


@contextlib.contextmanager
def micro_batch_groups(groups: MicroBatchGroups) -> Iterator[None]:
    """Publish ``groups`` to the registered ``dfpo`` loss while the block runs."""
    token = _CURRENT.set(groups)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_micro_batch_groups() -> MicroBatchGroups:
    """The groups of the micro-batch being computed, or a clear error when nobody published them."""
    groups = _CURRENT.get()
    if groups is None:
        raise RuntimeError(
            "The dfpo policy loss needs to know which responses form a group, which verl's 7-argument loss "
            "interface does not carry. Train with `python -m dfpo.main` (it installs dfpo's loss function in the "
            "actor), or call dfpo.compute_dfpo_loss directly with group_index."
        )
    return groups
