"""The trainer's word to the actor worker on what the old log-probs are, and the worker's check of it.

DFPO's pre-pass may skip its forward on the first mini-batch of an update (s_i = 1 exactly) only
when the old log-probs are log π at the parameters the update starts from. Only the trainer knows
that (dfpo's trainers, :mod:`dfpo.verl.trainer`, set :data:`OLD_LOG_PROBS_AT_STEP_PARAMS` in
``update_actor``'s meta); :func:`check_old_log_probs_at_step_params` asserts it against the batch,
so verl's rollout-correction bypass mode never passes for it.
"""

from __future__ import annotations

import torch

# Set by dfpo's trainers (dfpo/verl/trainer.py) in update_actor's meta: whether the trainer's old
# log-probs are log π at the parameters this update starts from — the one source of that fact.
# False in bypass mode and in the separate-async trainer's local updates after the first (old
# log-probs from the weights of its last parameter sync). Absent (update_actor called directly,
# not through dfpo's trainers): taken as true, i.e. the caller computed them with the actor.
OLD_LOG_PROBS_AT_STEP_PARAMS = "dfpo_old_log_probs_at_step_params"


def check_old_log_probs_at_step_params(old_log_probs, rollout_log_probs, mask) -> None:
    """Assert what :data:`OLD_LOG_PROBS_AT_STEP_PARAMS` = true claims, as far as this rank's batch shows.

    In bypass mode verl 0.9.1's ``_compute_old_log_prob`` copies the rollout's log-probs into
    ``old_log_probs`` (θ_old is then the rollout policy, not θ, so s ≠ 1 on the first mini-batch);
    otherwise the actor's ``compute_log_prob`` writes log π_θ, which differs from the rollout
    engine's. So old log-probs bitwise equal to ``rollout_log_probs`` on every valid token of the
    rank contradict the flag: a RuntimeError, never a wrong s = 1. A rank with only padding rows,
    or without rollout log-probs (bypass mode needs them), shows nothing to check.
    """
    if rollout_log_probs is None or not bool(mask.any()):
        return
    if torch.equal(old_log_probs[mask], rollout_log_probs.to(old_log_probs.dtype)[mask]):
        raise RuntimeError(
            f"dfpo: update_actor's {OLD_LOG_PROBS_AT_STEP_PARAMS} says the old log-probs are log π at the "
            "step's parameters, but on this rank they equal rollout_log_probs bitwise, as verl's "
            "rollout-correction bypass mode writes them. Train through dfpo's trainers "
            "(trainer.v1.trainer_mode=dfpo_sync, ...), which set the flag from the config, or set it to False."
        )
