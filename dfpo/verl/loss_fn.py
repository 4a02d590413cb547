"""DFPO's full loss function for verl's actor (``TrainingWorker.set_loss_fn``).

It wraps the loss function verl built for the actor (``ppo_loss`` — or the distillation loss —
with the actor config), so verl's entropy, KL-loss and rollout-correction behaviour is kept
unchanged, and around that call:

* for ``loss_mode=dfpo`` it publishes the micro-batch's group ids, prefix lengths and the exact
  group weights of the pre-pass (:mod:`dfpo.verl.micro_batch_groups`) to the registered 7-argument loss;
* for ``gspo``, ``vanilla`` and ``cispo`` it records the learning-tax diagnostics (the
  cancellation residual of the modulation their loss gives each response,
  :class:`dfpo.verl.residual_meters.ModulationResidualMeter`) from the same forward pass, at no
  extra model cost;
* for every loss mode it records the gradient the returned loss gives the log-probs of each
  group's shared tokens (:class:`dfpo.verl.residual_meters.GradientResidualMeter`: one autograd
  pass over the loss's own graph, not the model's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from verl.workers.utils.padding import no_padding_2_padding

from dfpo.algorithm.collectives import all_gather_objects
from dfpo.algorithm.group_statistics import row_statistics, sequence_advantages
from dfpo.algorithm.group_weights import GroupWeights
from dfpo.verl.micro_batch_groups import MicroBatchGroups, micro_batch_groups
from dfpo.verl.residual_meters import (
    SIGN_DEPENDENT_CLIP_LOSSES,
    SIGN_FREE_CLIP_LOSSES,
    GradientResidualMeter,
    ModulationResidualMeter,
)

GROUP_ID_FIELD = "dfpo_group_id"
PREFIX_LEN_FIELD = "dfpo_prefix_len"
WEIGHT_FIELD = "dfpo_weight"
TRANSFORMED_WEIGHT_FIELD = "dfpo_transformed_weight"
GRAD_COEF_FIELD = "dfpo_grad_coef"


class DFPOLossFunction:
    """``loss_fn(model_output, data, dp_group)`` as verl's engine calls it, per micro-batch."""

    def __init__(
        self,
        inner: Callable[..., Any],
        actor_config: Any,
        modulation: ModulationResidualMeter | None = None,
        gradients: GradientResidualMeter | None = None,
    ):
        self.inner = inner
        self.config = actor_config
        self.modulation = modulation if modulation is not None else ModulationResidualMeter()
        self.gradients = gradients if gradients is not None else GradientResidualMeter()

    @property
    def loss_mode(self) -> str:
        return self.config.policy_loss.get("loss_mode", "vanilla")

    def __call__(self, model_output, data, dp_group=None):
        if GROUP_ID_FIELD not in data.keys():
            raise RuntimeError(
                "dfpo's actor loss got a micro-batch without `dfpo_group_id`: the batch did not go through "
                "DFPOTrainingWorker.train_mini_batch (use `python -m dfpo.main`)."
            )
        group_id = data[GROUP_ID_FIELD]
        prefix_len = data[PREFIX_LEN_FIELD]
        if self.loss_mode == "dfpo":
            weights = None
            if TRANSFORMED_WEIGHT_FIELD in data.keys():
                coef = data[GRAD_COEF_FIELD].to(torch.float64) if GRAD_COEF_FIELD in data.keys() else None
                weights = GroupWeights(
                    data[WEIGHT_FIELD].to(torch.float64), data[TRANSFORMED_WEIGHT_FIELD].to(torch.float64), coef
                )
            with micro_batch_groups(
                MicroBatchGroups(group_index=group_id, group_weights=weights, prefix_len=prefix_len)
            ):
                output = self.inner(model_output=model_output, data=data, dp_group=dp_group)
        else:
            self._record_residuals(model_output, data, group_id, prefix_len)
            output = self.inner(model_output=model_output, data=data, dp_group=dp_group)
        if not getattr(
            self.config, "use_kl_loss", False
        ):  # the KL term's gradient on shared tokens does not cancel, by design
            loss = output[0] if isinstance(output, tuple) else output
            self.gradients.record(
                loss, model_output["log_probs"], lambda t: no_padding_2_padding(t, data), group_id, prefix_len
            )
        return output

    def reduce(self, dp_group, group_size: int) -> dict[str, float]:
        """Both meters' metrics of the mini-batch, from one gather over the data-parallel ranks
        (collective: every rank must call it once per mini-batch)."""
        parts = all_gather_objects((self.modulation.take(), self.gradients.take()), dp_group)
        return {
            **self.modulation.metrics([part[0] for part in parts]),
            **self.gradients.metrics([part[1] for part in parts], group_size),
        }

    def _record_residuals(self, model_output, data, group_id, prefix_len) -> None:
        mode = self.loss_mode
        if mode != "gspo" and mode not in SIGN_DEPENDENT_CLIP_LOSSES + SIGN_FREE_CLIP_LOSSES:
            return
        with torch.no_grad():
            log_prob = no_padding_2_padding(model_output["log_probs"], data).detach()
            padded = data.select("old_log_probs", "advantages", "response_mask").to_padded_tensor()
            mask = padded["response_mask"].to(torch.bool)
            clip = self.config.clip_ratio
            low = self.config.clip_ratio_low if self.config.clip_ratio_low is not None else clip
            high = self.config.clip_ratio_high if self.config.clip_ratio_high is not None else clip
            if mode == "gspo":
                rows = row_statistics(log_prob, padded["old_log_probs"], padded["advantages"], mask, group_id)
                self.modulation.record_gspo(rows, low, high)
            else:
                self.modulation.record_token_clip(
                    group_id,
                    sequence_advantages(padded["advantages"], mask),
                    log_prob - padded["old_log_probs"],
                    mask,
                    prefix_len,
                    low,
                    high,
                    sign_dependent=mode in SIGN_DEPENDENT_CLIP_LOSSES,
                )
