"""What DFPO changes in verl's actor worker (subclasses; nothing in verl is modified).

Each departure from verl's behaviour is marked on its line with the verl method it overrides or
wraps; the work itself is done elsewhere:

* :class:`DFPOTrainingWorker` — verl's ``TrainingWorker`` that tags each training step's rows and
  runs the exact group pre-pass before each mini-batch's gradient pass
  (:mod:`dfpo.verl.group_prepass_wiring`), adds the ``dfpo/`` diagnostics to verl's metrics, and
  optionally measures the step's update (:mod:`dfpo.verl.update_kl_probe`).
* :class:`DFPOActorRolloutRefWorker` — verl's ``ActorRolloutRefWorker`` with that actor and verl's
  actor loss wrapped in :class:`dfpo.verl.loss_fn.DFPOLossFunction`.
* :class:`DFPODetachActorWorker` — the same for verl's separate-async ``DetachActorWorker``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from dfpo.operations import resource_meter
from dfpo.verl.group_prepass_wiring import (
    TrainingStep,
    attach_group_weights,
    forward_multiple,
    log_probs_at_current_params,
    tag_step,
)
from dfpo.verl.loss_fn import DFPOLossFunction
from dfpo.verl.resource_phases import metered_phases
from dfpo.verl.sequence_parallel import require_sequence_parallel_group
from dfpo.verl.update_kl_probe import update_kl_metrics


class DFPOTrainingWorker(TrainingWorker):
    """verl's TrainingWorker plus DFPO's per-step tagging, exact pre-pass and diagnostics."""

    _dfpo_config: Any = None
    _dfpo_loss: DFPOLossFunction | None = None
    _dfpo_step: TrainingStep | None = None

    def enable_dfpo(self, actor_config: Any, loss_fn: DFPOLossFunction) -> None:
        """Turn DFPO's bookkeeping on (called by :class:`DFPOActorRolloutRefWorker`)."""
        require_sequence_parallel_group(self.engine, getattr(self.engine_config, "ulysses_sequence_parallel_size", 1))
        self._dfpo_config = actor_config
        self._dfpo_loss = loss_fn

    def train_mini_batch(self, data):  # overrides TrainingWorker.train_mini_batch (one training step)
        if self._dfpo_loss is None:
            return super().train_mini_batch(data)
        dp_group = self.engine.get_data_parallel_group()
        self._dfpo_step = step = tag_step(data, dp_group)  # DFPO: rows tagged before verl's step
        try:
            output = super().train_mini_batch(data)
        finally:
            self._dfpo_step = None
        if getattr(self._dfpo_config.policy_loss, "dfpo_measure_update_kl", False):
            # DFPO: one more no-grad forward of every row after verl's step (collective: every rank)
            every_row = torch.arange(len(step.rows.group_id))
            new = self._log_probs_at_current_params(step, step.data, every_row, inside_update=False)
            update = update_kl_metrics(new, step.rows.old_log_prob, step.rows.response_mask, dp_group)
            if output is not None:
                tu.get(output, "metrics").update({key: [value] for key, value in update.items()})
        return output

    def train_batch(self, data):  # overrides TrainingWorker.train_batch (one mini-batch)
        step = self._dfpo_step
        if step is None:
            return super().train_batch(data)
        dp_group = self.engine.get_data_parallel_group()
        with resource_meter.phase("prepass"):  # the resource meter's phase (off unless DFPO_RESOURCE_LOG_DIR)
            metrics = attach_group_weights(  # DFPO: W, W̃ as row fields before verl's gradient pass
                step,
                data,
                loss_mode=self._dfpo_loss.loss_mode,
                options=self._dfpo_config.policy_loss,
                log_prob_fn=partial(self._log_probs_at_current_params, step, data),
                dp_group=dp_group,
                forward_multiple=forward_multiple(self.engine_config),
            )
        output = super().train_batch(data)
        metrics.update(self._dfpo_loss.reduce(dp_group, int(self._dfpo_config.rollout_n)))
        if output is not None:
            tu.get(output, "metrics").update(metrics)  # DFPO: dfpo/ diagnostics added to verl's metrics
        return output

    def _log_probs_at_current_params(
        self, step: TrainingStep, mini_batch, rows: torch.Tensor, inside_update: bool = True
    ) -> torch.Tensor:
        """The pre-pass's forward, through TrainingWorker.infer_batch (verl's no-grad path)."""
        return log_probs_at_current_params(self.infer_batch, self.engine, step, mini_batch, rows, inside_update)


@metered_phases  # the resource meter's phases around verl's methods (only with DFPO_RESOURCE_LOG_DIR)
class DFPOActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's ActorRolloutRefWorker with :class:`DFPOTrainingWorker` and DFPO's loss wrapper."""

    actor_worker_cls = DFPOTrainingWorker  # DFPO: replaces verl's TrainingWorker as the actor

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):  # wraps ActorRolloutRefWorker.init_model
        super().init_model()
        if self.actor is None or not isinstance(self.actor, DFPOTrainingWorker):
            return
        inner = self.loss_fn
        actor_config = inner.keywords["config"]
        loss_fn = DFPOLossFunction(inner, actor_config)  # DFPO: wraps verl's actor loss
        self.loss_fn = loss_fn
        self.actor.set_loss_fn(loss_fn)
        self.actor.enable_dfpo(actor_config, loss_fn)  # DFPO: the actor's tagging and pre-pass on


class DFPODetachActorWorker(DFPOActorRolloutRefWorker, DetachActorWorker):
    """verl's separate-async actor worker (``DetachActorWorker``: saves π_old to CPU and restores it
    for the old log-probs of later local updates) with DFPO's actor and loss."""
