"""verl workers with exact DFPO group statistics (subclasses; nothing in verl is modified).

* :class:`DFPOTrainingWorker` — verl's ``TrainingWorker`` that, once per ``update_actor`` step,
  tags every row with its group id and its group's common-prefix length (computed across ranks),
  and before each mini-batch's gradient pass runs :func:`dfpo.verl.group_prepass.exact_group_weights`
  and attaches W, W̃ (and the no-stop-grad coefficients) to the mini-batch rows. After each
  mini-batch it adds the ``dfpo/`` diagnostics to verl's metrics.
* :class:`DFPOActorRolloutRefWorker` — verl's ``ActorRolloutRefWorker`` using that actor and
  wrapping verl's actor loss with :class:`dfpo.verl.loss_fn.DFPOLossFunction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import tensordict_utils as tu
from verl.utils.device import get_device_name
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker
from verl.workers.utils.padding import response_from_nested

from dfpo.algorithm.collectives import all_gather_objects
from dfpo.algorithm.group_ids import group_ids
from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from dfpo.verl.group_prepass import StepRows, exact_group_weights
from dfpo.verl.loss_config import DFPOPolicyLossConfig
from dfpo.verl.loss_fn import (
    GRAD_COEF_FIELD,
    GROUP_ID_FIELD,
    PREFIX_LEN_FIELD,
    TRANSFORMED_WEIGHT_FIELD,
    WEIGHT_FIELD,
    DFPOLossFunction,
)
from dfpo.verl.residual_meters import ModulationResidualMeter as LearningTaxRecorder
from dfpo.verl.staleness import rollout_ratio_spread

ROW_ID_FIELD = "dfpo_row_id"
# Set by dfpo's trainers (dfpo/verl/trainer.py) in update_actor's meta: whether the trainer's old
# log-probs are log π at the parameters this update starts from — the one source of that fact.
# False in bypass mode and in the separate-async trainer's local updates after the first (old
# log-probs from the weights of its last parameter sync). Absent (update_actor called directly,
# not through dfpo's trainers): taken as true, i.e. the caller computed them with the actor.
OLD_LOG_PROBS_AT_STEP_PARAMS = "dfpo_old_log_probs_at_step_params"


@dataclass
class _Step:
    """What one ``train_mini_batch`` call (one training step on this rank) shares with its mini-batches."""

    data: Any  # the rank's step TensorDict (fields for forwarding rows again)
    rows: StepRows
    metrics: dict[str, float]
    old_log_probs_at_step_params: bool  # θ_old = θ at the first mini-batch (s = 1 exactly there)
    mini_batches_done: int = 0


def _uids(data) -> list:
    if "uid" not in data.keys():
        raise RuntimeError(
            "DFPO needs the batch's `uid` field (one id per prompt) in update_actor; verl's trainer provides it. "
            "If you call update_actor yourself, add `uid` as a NonTensorStack of strings."
        )
    uids = data["uid"]
    return uids.tolist() if hasattr(uids, "tolist") else list(uids)


def _prefix_metrics(rows: StepRows, dp_group) -> dict[str, float]:
    """Share of response tokens inside their group's common prefix, and the mean prefix length."""
    lengths = rows.response_mask.to(torch.bool).sum(-1)
    shared = torch.minimum(rows.prefix_len, lengths)
    per_group = {
        int(g): int(p) for g, p, n in zip(rows.group_id.tolist(), rows.prefix_len.tolist(), lengths.tolist()) if n > 0
    }
    parts = all_gather_objects((int(shared.sum()), int(lengths.sum()), per_group), dp_group)
    tokens_shared = sum(p[0] for p in parts)
    tokens = sum(p[1] for p in parts)
    groups: dict[int, int] = {}
    for p in parts:
        groups.update(p[2])
    return {
        "dfpo/shared_prefix_token_frac": tokens_shared / max(tokens, 1),
        "dfpo/common_prefix_len_mean": sum(groups.values()) / max(len(groups), 1),
    }


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


class DFPOTrainingWorker(TrainingWorker):
    """verl's TrainingWorker plus DFPO's per-step tagging, exact pre-pass and diagnostics."""

    _dfpo_config: Any = None
    _dfpo_loss: DFPOLossFunction | None = None
    _dfpo_step: _Step | None = None

    def enable_dfpo(self, actor_config: Any, loss_fn: DFPOLossFunction) -> None:
        """Turn DFPO's bookkeeping on (called by :class:`DFPOActorRolloutRefWorker`)."""
        require_sequence_parallel_group(self.engine, getattr(self.engine_config, "ulysses_sequence_parallel_size", 1))
        self._dfpo_config = actor_config
        self._dfpo_loss = loss_fn

    # -- one training step -------------------------------------------------------------------
    def train_mini_batch(self, data):
        if self._dfpo_loss is None:
            return super().train_mini_batch(data)
        self._dfpo_step = step = self._prepare_step(data)
        try:
            output = super().train_mini_batch(data)
        finally:
            self._dfpo_step = None
        if getattr(self._dfpo_config.policy_loss, "dfpo_measure_update_kl", False):
            update = self._update_size(step)  # collective: every rank
            if output is not None:
                tu.get(output, "metrics").update({key: [value] for key, value in update.items()})
        return output

    def _update_size(self, step: _Step) -> dict[str, float]:
        """How far the step's update moved the policy on the step's response tokens, over every
        data-parallel rank, with r = log π_new − log π_old (π_new: the parameters after the update,
        one no-grad forward of every row):

            update_kl             = ½ Σ mask·r² / Σ mask   (KL(π_old ‖ π_new) to second order)
            update_log_ratio_mean =   Σ mask·r  / Σ mask

        The squared form is the update's size whatever its direction: on the very samples it was
        fitted to, the plain mean of −r is no KL estimate (the update raises some of their
        log-probs and lowers others; measured negative on a step whose next-step KL was 5e-3)."""
        rows = torch.arange(len(step.rows.group_id))
        new = self._log_probs_at_current_params(step, step.data, rows, inside_update=False)
        mask = step.rows.response_mask
        ratio = (new - step.rows.old_log_prob) * mask
        totals = torch.stack([0.5 * (ratio**2).sum(), ratio.sum(), mask.sum()]).to(torch.float64)
        dp_group = self.engine.get_data_parallel_group()
        if torch.distributed.is_initialized() and torch.distributed.get_world_size(dp_group) > 1:
            torch.distributed.all_reduce(totals, group=dp_group)
        tokens = totals[2].clamp(min=1)
        return {"dfpo/update_kl": float(totals[0] / tokens), "dfpo/update_log_ratio_mean": float(totals[1] / tokens)}

    def _prepare_step(self, data) -> _Step:
        dp_group = self.engine.get_data_parallel_group()
        gid = group_ids(_uids(data))
        fields = ["responses", "response_mask", "old_log_probs", "advantages"]
        for optional in ("rollout_is_weights", "rollout_log_probs"):
            if optional in data.keys():
                fields.append(optional)
        padded = data.select(*fields).to_padded_tensor()
        mask = padded["response_mask"].to(torch.bool)
        prefix = shared_prefix_lengths(gid, padded["responses"], mask, dp_group)
        data[GROUP_ID_FIELD] = gid
        data[PREFIX_LEN_FIELD] = prefix
        data[ROW_ID_FIELD] = torch.arange(len(gid))
        rows = StepRows(
            group_id=gid,
            old_log_prob=padded["old_log_probs"].cpu(),
            advantages=padded["advantages"].cpu(),
            response_mask=mask.cpu(),
            rollout_is_weights=padded["rollout_is_weights"].cpu() if "rollout_is_weights" in fields else None,
            prefix_len=prefix,
        )
        at_step_params = bool(tu.pop(data, key=OLD_LOG_PROBS_AT_STEP_PARAMS, default=True))
        if at_step_params:
            check_old_log_probs_at_step_params(padded["old_log_probs"], padded.get("rollout_log_probs", None), mask)
        metrics = _prefix_metrics(rows, dp_group)
        if "rollout_log_probs" in fields:
            metrics.update(
                rollout_ratio_spread(
                    rows.old_log_prob, padded["rollout_log_probs"].cpu(), rows.response_mask, gid, dp_group
                )
            )
        metrics["dfpo/old_log_probs_recomputed"] = float(at_step_params)
        return _Step(data=data, rows=rows, metrics=metrics, old_log_probs_at_step_params=at_step_params)

    # -- one mini-batch ------------------------------------------------------------------------
    def train_batch(self, data):
        step = self._dfpo_step
        if step is None:
            return super().train_batch(data)
        dp_group = self.engine.get_data_parallel_group()
        metrics = dict(step.metrics)
        options = self._dfpo_config.policy_loss
        if (
            self._dfpo_loss.loss_mode == "dfpo"
            and isinstance(options, DFPOPolicyLossConfig)
            and options.dfpo_exact_groups
        ):
            result = exact_group_weights(
                step.rows,
                data[ROW_ID_FIELD].cpu(),
                transform=options.dfpo_transform,
                scale=options.dfpo_scale,
                stop_grad=options.dfpo_stop_grad,
                scope_prefix=options.dfpo_scope == "shared_prefix",
                at_old_params=step.mini_batches_done == 0 and step.old_log_probs_at_step_params,
                log_prob_fn=partial(self._log_probs_at_current_params, step, data),
                dp_group=dp_group,
                forward_multiple=self._forward_multiple(),
            )
            data[WEIGHT_FIELD] = result.group_weights.weights
            data[TRANSFORMED_WEIGHT_FIELD] = result.group_weights.transformed
            if result.group_weights.grad_coef is not None:
                data[GRAD_COEF_FIELD] = result.group_weights.grad_coef
            metrics.update(result.metrics)
        step.mini_batches_done += 1
        output = super().train_batch(data)
        metrics.update(self._dfpo_loss.reduce(dp_group, int(self._dfpo_config.rollout_n)))
        if output is not None:
            tu.get(output, "metrics").update(metrics)
        return output

    def _forward_multiple(self) -> int:
        if self.engine_config.use_dynamic_bsz:
            return 1
        return int(self.engine_config.infer_micro_batch_size_per_gpu or 1)

    def _log_probs_at_current_params(
        self, step: _Step, mini_batch, rows: torch.Tensor, inside_update: bool = True
    ) -> torch.Tensor:
        """(n, T) log π_θ of step rows ``rows`` with one no-grad forward (verl's own infer path).

        When the rows are exactly the mini-batch's (mini-batches holding whole groups: the common
        case), the mini-batch itself is forwarded instead of re-selecting the rows from the step.
        """
        mini_rows = mini_batch[ROW_ID_FIELD].cpu()
        if rows.numel() == mini_rows.numel() and torch.equal(torch.sort(rows).values, torch.sort(mini_rows).values):
            sub = mini_batch.copy()
            order = torch.argsort(mini_rows)[torch.argsort(torch.argsort(rows))]
        else:
            sub = tu.index_select_tensor_dict(step.data, rows)
            order = None
        # inside train_mini_batch the engine holds the model loaded; after it, infer_batch loads it (offload)
        tu.assign_non_tensor(sub, compute_loss=False, calculate_entropy=False, disable_auto_offload=inside_update)
        output = self.infer_batch(sub)
        width = step.rows.old_log_prob.shape[-1]
        log_probs = None
        if output is not None:
            log_probs = response_from_nested(output["log_probs"], sub["response_mask"]).to_padded_tensor(0.0)
            log_probs = F.pad(log_probs, (0, width - log_probs.shape[-1])).to(torch.float32)
        log_probs = self._from_sequence_parallel_source(log_probs, (len(rows), width))
        return log_probs if order is None else log_probs[order]

    def _from_sequence_parallel_source(self, log_probs: torch.Tensor | None, shape: tuple[int, int]) -> torch.Tensor:
        """The log-probs on every rank. With Ulysses sequence parallelism (``SP_SIZE>1``) verl's
        ``infer_batch`` returns them on the first rank of each sequence-parallel group only
        (``is_mp_src_rank_with_outputs``); DFPO's group statistics need them on every rank, so
        that rank broadcasts them to its group."""
        group = getattr(self.engine, "ulysses_parallel_group", None)
        if group is None:
            if log_probs is None:
                raise RuntimeError(
                    "dfpo pre-pass: this rank got no log-probs back from infer_batch (a model-parallel rank of an engine dfpo does not know)"
                )
            return log_probs.cpu()
        device = get_device_name()
        buffer = (
            log_probs.to(device) if log_probs is not None else torch.empty(shape, dtype=torch.float32, device=device)
        )
        torch.distributed.broadcast(buffer, src=torch.distributed.get_global_rank(group, 0), group=group)
        return buffer.cpu()


def require_sequence_parallel_group(engine: Any, sequence_parallel_size: int) -> None:
    """At start-up, with Ulysses sequence parallelism (``SP_SIZE>1``): verl's engine must expose its
    sequence-parallel process group as ``ulysses_parallel_group`` (verl 0.9.1's FSDP engine sets it
    in ``_init_device_mesh``), through which DFPO's pre-pass shares the log-probs that
    ``infer_batch`` returns on each group's first rank only. Without it, the other ranks would
    fail at the first step; this says so before any rollout."""
    if int(sequence_parallel_size or 1) > 1 and getattr(engine, "ulysses_parallel_group", None) is None:
        raise RuntimeError(
            f"dfpo: ulysses_sequence_parallel_size={sequence_parallel_size}, but verl's engine "
            f"({type(engine).__name__}) has no ulysses_parallel_group, which DFPO's pre-pass broadcasts the "
            "log-probs over (verl 0.9.1's FSDP engine sets it). Use verl==0.9.1's FSDP engine, or SP_SIZE=1."
        )


class DFPOActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's ActorRolloutRefWorker with :class:`DFPOTrainingWorker` and DFPO's loss wrapper."""

    actor_worker_cls = DFPOTrainingWorker

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        if self.actor is None or not isinstance(self.actor, DFPOTrainingWorker):
            return
        inner = self.loss_fn
        actor_config = inner.keywords["config"]
        loss_fn = DFPOLossFunction(inner, actor_config, LearningTaxRecorder())
        self.loss_fn = loss_fn
        self.actor.set_loss_fn(loss_fn)
        self.actor.enable_dfpo(actor_config, loss_fn)


class DFPODetachActorWorker(DFPOActorRolloutRefWorker, DetachActorWorker):
    """verl's separate-async actor worker (``DetachActorWorker``: saves π_old to CPU and restores it
    for the old log-probs of later local updates) with DFPO's actor and loss."""
