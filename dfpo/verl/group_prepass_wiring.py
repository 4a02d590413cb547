"""The exact group pre-pass (:mod:`dfpo.verl.group_prepass`) wired into verl's ``update_actor`` batches.

* Once per training step, before verl's ``train_mini_batch`` (:func:`tag_step`): every row of the
  rank's step TensorDict gets its group id (from ``uid``), its group's common-prefix length
  (computed across ranks) and its row id as fields, which travel with it through verl's mini- and
  micro-batch splits; the step's rows (:class:`~dfpo.verl.group_prepass.StepRows`) and its
  ``dfpo/`` diagnostics are kept for its mini-batches.
* Before each mini-batch's gradient pass, before verl's ``train_batch``
  (:func:`attach_group_weights`): :func:`~dfpo.verl.group_prepass.exact_group_weights` over the
  mini-batch's groups, whose W, W̃ (and the no-stop-grad coefficients) become row fields that
  :class:`dfpo.verl.loss_fn.DFPOLossFunction` reads.
* The pre-pass's forward (:func:`log_probs_at_current_params`): log π_θ of chosen step rows through
  verl's own no-grad ``infer_batch``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import response_from_nested

from dfpo.algorithm.collectives import all_gather_objects
from dfpo.algorithm.group_ids import group_ids
from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from dfpo.verl.group_prepass import LogProbFn, StepRows, exact_group_weights
from dfpo.verl.loss_config import DFPOPolicyLossConfig
from dfpo.verl.loss_fn import (
    GRAD_COEF_FIELD,
    GROUP_ID_FIELD,
    PREFIX_LEN_FIELD,
    TRANSFORMED_WEIGHT_FIELD,
    WEIGHT_FIELD,
)
from dfpo.verl.old_log_probs_flag import OLD_LOG_PROBS_AT_STEP_PARAMS, check_old_log_probs_at_step_params
from dfpo.verl.sequence_parallel import log_probs_on_every_rank
from dfpo.verl.staleness import rollout_ratio_spread

ROW_ID_FIELD = "dfpo_row_id"


@dataclass
class TrainingStep:
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
        int(g): int(p)
        for g, p, n in zip(rows.group_id.tolist(), rows.prefix_len.tolist(), lengths.tolist(), strict=True)
        if n > 0
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


def tag_step(data, dp_group) -> TrainingStep:
    """Tag the rows of the rank's step TensorDict ``data`` (in place) and keep what its mini-batches share.

    Pops :data:`~dfpo.verl.old_log_probs_flag.OLD_LOG_PROBS_AT_STEP_PARAMS` from ``data``'s meta
    (and checks it against the batch); a collective over ``dp_group``."""
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
    return TrainingStep(data=data, rows=rows, metrics=metrics, old_log_probs_at_step_params=at_step_params)


def attach_group_weights(
    step: TrainingStep,
    mini_batch,
    *,
    loss_mode: str,
    options: Any,
    log_prob_fn: LogProbFn,
    dp_group,
    forward_multiple: int,
) -> dict[str, float]:
    """Before ``mini_batch``'s gradient pass: with DFPO's loss and ``dfpo_exact_groups``, its rows'
    W, W̃ (and c) as fields of ``mini_batch``. Counts the mini-batch as done; returns the step's
    diagnostics with the pre-pass's (a collective over ``dp_group``)."""
    metrics = dict(step.metrics)
    if loss_mode == "dfpo" and isinstance(options, DFPOPolicyLossConfig) and options.dfpo_exact_groups:
        result = exact_group_weights(
            step.rows,
            mini_batch[ROW_ID_FIELD].cpu(),
            transform=options.dfpo_transform,
            scale=options.dfpo_scale,
            stop_grad=options.dfpo_stop_grad,
            scope_prefix=options.dfpo_scope == "shared_prefix",
            at_old_params=step.mini_batches_done == 0 and step.old_log_probs_at_step_params,
            log_prob_fn=log_prob_fn,
            dp_group=dp_group,
            forward_multiple=forward_multiple,
        )
        mini_batch[WEIGHT_FIELD] = result.group_weights.weights
        mini_batch[TRANSFORMED_WEIGHT_FIELD] = result.group_weights.transformed
        if result.group_weights.grad_coef is not None:
            mini_batch[GRAD_COEF_FIELD] = result.group_weights.grad_coef
        metrics.update(result.metrics)
    step.mini_batches_done += 1
    return metrics


def forward_multiple(engine_config) -> int:
    """The row count the pre-pass's forwards are padded to a multiple of (verl's infer micro-batch)."""
    if engine_config.use_dynamic_bsz:
        return 1
    return int(engine_config.infer_micro_batch_size_per_gpu or 1)


def log_probs_at_current_params(
    infer_batch: Callable,
    engine: Any,
    step: TrainingStep,
    mini_batch,
    rows: torch.Tensor,
    inside_update: bool = True,
) -> torch.Tensor:
    """(n, T) log π_θ of step rows ``rows`` with one no-grad forward (verl's own ``infer_batch``).

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
    output = infer_batch(sub)
    width = step.rows.old_log_prob.shape[-1]
    log_probs = None
    if output is not None:
        log_probs = response_from_nested(output["log_probs"], sub["response_mask"]).to_padded_tensor(0.0)
        log_probs = F.pad(log_probs, (0, width - log_probs.shape[-1])).to(torch.float32)
    log_probs = log_probs_on_every_rank(engine, log_probs, (len(rows), width))
    return log_probs if order is None else log_probs[order]
