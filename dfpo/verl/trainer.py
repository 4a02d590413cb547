"""verl's V1 PPO trainers with DFPO's actor worker: ``trainer.v1.trainer_mode=dfpo_sync``,
``dfpo_colocate_async`` or ``dfpo_separate_async``.

Each is verl's trainer of that mode (``sync``, ``colocate_async``, ``separate_async``) with three
changes, all through subclassing:

* the actor worker class — :class:`dfpo.verl.workers.DFPOActorRolloutRefWorker`, or for
  ``separate_async`` :class:`dfpo.verl.workers.DFPODetachActorWorker` (verl's ``DetachActorWorker``,
  which saves π_old to CPU, with DFPO's actor) — swapped in exactly as verl's own
  ``separate_async`` trainer swaps in its ``DetachActorWorker``; the reference-policy worker (a
  separate role when the actor does not hold it) keeps verl's class;
* ``trainer_mode`` reads as verl's mode name: verl branches on it (``"sync"`` or not: the replay
  buffer, the data loader's fetch size, TransferQueue checkpoints; ``trainer.v1.<mode>``: the
  separate-async ``parameter_sync_step``), so a DFPO mode behaves exactly as verl's;
* what the trainer computed as old log-probs reaches the actor: the first mini-batch of an update
  may skip DFPO's pre-pass forward (s_i = 1 exactly) only when the old log-probs are log π at the
  parameters the update starts from. In ``sync`` and ``colocate_async`` verl recomputes them just
  before each update; in ``separate_async`` only for the first of the ``parameter_sync_step``
  local updates of a sync cycle — the later ones get log π_old of the weights saved at the first
  (Decoupled PPO), while the parameters have moved; bypass mode (old = rollout log-probs) never.
  The worker asserts the flag against the batch
  (:func:`dfpo.verl.old_log_probs_flag.check_old_log_probs_at_step_params`).

And one setting: verl's replay buffer waits for the rollout's samples (of training and of
validation) in sleeps of its ``poll_interval`` (2 s, no config key in verl 0.9.1), so a
generation that takes 2.1 s costs 4; ``dfpo.sampler_poll_interval_s`` sets it (null: verl's 2 s;
the CPU platform's steps generate in 2-3 s and poll every 0.2 s).

Every step also logs ``dfpo/staleness/...`` (:mod:`dfpo.verl.staleness`), and ends the run early,
checkpointed, when the driver got SIGTERM (:mod:`dfpo.operations.preemption`).
"""

from __future__ import annotations

import ray
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from dfpo.operations.preemption import record_stop, stop_requested
from dfpo.verl.old_log_probs_flag import OLD_LOG_PROBS_AT_STEP_PARAMS
from dfpo.verl.staleness import policy_lag_metrics
from dfpo.verl.workers import DFPOActorRolloutRefWorker, DFPODetachActorWorker


def bypass_mode(config) -> bool:
    """verl 0.9.1's test in ``_compute_old_log_prob``: old log-probs = the rollout's."""
    rollout_corr = config.algorithm.get("rollout_correction", None)
    return bool(rollout_corr and rollout_corr.get("bypass_mode", False))


def sampler_poll_interval(config) -> float | None:
    """``dfpo.sampler_poll_interval_s``: seconds between the replay buffer's checks for finished
    samples (None: verl's own 2 s)."""
    interval = config.get("dfpo", {}).get("sampler_poll_interval_s")
    if interval is None:
        return None
    if not float(interval) > 0:
        raise ValueError(
            f"dfpo.sampler_poll_interval_s must be a positive number of seconds or null (verl's 2 s), got {interval!r}"
        )
    return float(interval)


class _DFPOTrainer:
    """What every DFPO trainer adds to the verl trainer it derives from (see the module doc)."""

    dfpo_mode: str
    verl_mode: str
    dfpo_actor_worker_cls: type = DFPOActorRolloutRefWorker
    _old_log_probs_at_step_params: bool | None = None

    @property
    def trainer_mode(self) -> str:
        return self.verl_mode

    @trainer_mode.setter
    def trainer_mode(self, name: str) -> None:
        if name != self.dfpo_mode:
            raise ValueError(f"{type(self).__name__} runs trainer.v1.trainer_mode={self.dfpo_mode!r}, not {name!r}")

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        for role in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(self.dfpo_actor_worker_cls)

    def _build_replay_buffer(self):
        buffer = super()._build_replay_buffer()
        interval = sampler_poll_interval(self.config)
        if interval is not None:
            buffer.poll_interval = interval
        return buffer

    def old_log_probs_at_step_params(self) -> bool:
        """Whether ``_compute_old_log_prob`` writes log π at the parameters the update starts from."""
        return not bypass_mode(self.config)

    def _compute_old_log_prob(self, batch, metrics):
        self._old_log_probs_at_step_params = self.old_log_probs_at_step_params()
        return super()._compute_old_log_prob(batch, metrics)

    def _update_actor(self, batch, metrics):
        at_step_params, self._old_log_probs_at_step_params = self._old_log_probs_at_step_params, None
        # unknown (no old log-probs computed this step) counts as "other parameters": the pre-pass runs
        batch.extra_info[OLD_LOG_PROBS_AT_STEP_PARAMS] = bool(at_step_params)
        metrics.update(policy_lag_metrics(batch.tags, self.global_steps, self.local_trigger_step))
        return super()._update_actor(batch, metrics)

    def on_step_end(self):
        self.stop_if_preempted()
        super().on_step_end()

    def saved_this_step(self) -> bool:
        """verl's own test in ``fit`` for the checkpoint it has just saved (or not) this step."""
        save_freq = self.config.trainer.save_freq
        return save_freq > 0 and (self.global_steps >= self.total_training_steps or self.global_steps % save_freq == 0)

    def stop_if_preempted(self) -> None:
        """At verl's own checkpoint point of the step (before the weight sync): when the driver got
        SIGTERM, save this step unless verl just did, record it, and make it the last step."""
        request = stop_requested()
        if request is None:
            return
        if not self.saved_this_step():
            self._save_checkpoint()
        record_stop(request, self.global_steps)
        print(
            f"dfpo: the driver got SIGTERM: step {self.global_steps} is checkpointed and is the last step "
            "of this launch"
        )
        self.total_training_steps = self.global_steps  # verl's loop ends after this step as after its last


class DFPOSyncTrainer(_DFPOTrainer, PPOTrainerSync):
    """verl's ``sync`` trainer with DFPO's actor worker."""

    dfpo_mode, verl_mode = "dfpo_sync", "sync"


class DFPOColocateAsyncTrainer(_DFPOTrainer, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer (rollout and training share the ranks, partial rollouts
    carried across weight syncs) with DFPO's actor worker."""

    dfpo_mode, verl_mode = "dfpo_colocate_async", "colocate_async"


class DFPOSeparateAsyncTrainer(_DFPOTrainer, PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer (standalone rollout resources; ``parameter_sync_step``
    local updates per weight sync, Decoupled PPO) with DFPO's actor worker."""

    dfpo_mode, verl_mode = "dfpo_separate_async", "separate_async"
    dfpo_actor_worker_cls = DFPODetachActorWorker

    def old_log_probs_at_step_params(self) -> bool:
        # local update 0 computes at the current weights (saved as π_old); later ones restore π_old
        return super().old_log_probs_at_step_params() and self.local_trigger_step == 0


DFPO_TRAINERS = (DFPOSyncTrainer, DFPOColocateAsyncTrainer, DFPOSeparateAsyncTrainer)
# dfpo's trainer mode -> the verl V1 trainer mode it runs
DFPO_TRAINER_MODES = {trainer.dfpo_mode: trainer.verl_mode for trainer in DFPO_TRAINERS}

for _trainer in DFPO_TRAINERS:
    if TRAINER_REGISTRY.get(_trainer.dfpo_mode) is not _trainer:
        register_trainer(_trainer.dfpo_mode)(_trainer)
