"""The cancellation-residual meters: what verl's actor loss gives each group's shared tokens.

The residual (:mod:`dfpo.algorithm.cancellation_residual`, where it is defined and computed) is
measured per mini-batch. All micro-batches of a mini-batch see the same parameters, so each
meter records, from the micro-batches :class:`dfpo.verl.loss_fn.DFPOLossFunction` sees, the rows
the residual needs, and the records are all-gathered over the data-parallel ranks once the
mini-batch is done (``take`` then ``metrics``, or ``reduce`` for both):

* :class:`ModulationResidualMeter`, for the baselines, from the effective modulation their loss
  gives each response (the learning tax; DFPO's own weights are measured in the pre-pass,
  :mod:`dfpo.verl.group_prepass`):

  - ``gspo`` (sequence-coupled): w_i = s_i/L_i, or 0 where GSPO's sequence clip zeroes the
    gradient of response i; ``dfpo/cancellation_residual_before``, ``dfpo/weight_asymmetry_before``
    and ``dfpo/sequence_clip_frac``. Groups that a mini-batch holds only partly are measured over
    the members it holds.
  - token-level losses (``vanilla`` GRPO, ``cispo`` GRPO-fix): ``dfpo/shared_token_clip_residual``,
    the mean over shared positions of groups with both signs (vanilla PPO clipping depends on the
    sign of Â_i; CISPO's detached clip does not, residual 0).

* :class:`GradientResidualMeter`, for every loss mode, from the gradient the returned loss gives
  the log-probs of each group's shared tokens. A shared position is the same token in the same
  context in every member, so log π_θ(y_t | x, y_<t) there is one function of θ for the whole
  group and the loss moves it through the sum of its members' gradients g_{i,t} = ∂L/∂log π_{i,t},
  taken by autograd from the loss verl backpropagates (only the graph between that loss and the
  model's log-probs is traversed, not the model), over the groups that a mini-batch holds whole.
  0 means the shared tokens get no net gradient: DFPO (Min-Replace, Orth-Proj) gives g_{i,t} =
  −Â_i W̃_i ρ_t / N with Σ_i Â_i W̃_i = 0, so its residual is rounding. GSPO (Â_i W_i) and the
  ``no stop-grad`` ablation (whose W̃(θ) adds a chain-rule term at every token) leave a residual
  well above it (tested above 1e-3; the ablation measured about 1e-2). Unlike
  ``dfpo/cancellation_residual_after``, which is computed from the group weights and is an
  identity for the transforms, this one is measured on the gradient path, so a regression there
  (a weight left differentiable, a wrong coefficient in the gradient but not the value) shows in
  the logs.

  Logged per mini-batch as ``dfpo/shared_token_grad_residual`` (``actor/`` prefix in verl's
  metrics), with ``dfpo/shared_token_grad_groups``, the number of whole groups with a shared
  prefix it was measured on, and why the others were not: ``dfpo/shared_token_grad_whole_groups``
  (groups the mini-batch holds whole), ``dfpo/shared_token_grad_prefix_groups`` (of those, groups
  whose responses share a prefix; the rest of them gave their shared tokens no gradient at all,
  i.e. all advantages 0: every response scored alike), and ``dfpo/shared_token_grad_eps``, the
  machine epsilon of the log-probs' dtype (the gradient comes back in it: float32 from verl's
  fp32 recipes and from flash-attn's cross-entropy on GPUs, 1.2e-7; bfloat16 where the log-probs
  are computed in it, 7.8e-3), which sets the rounding level of the residual. Not recorded when
  the loss has verl's KL term (``use_kl_loss``), whose gradient on a shared token does not cancel
  by design.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dfpo.algorithm.cancellation_residual import (
    clip_residual,
    gradient_residual,
    gspo_clipped,
    prefix_groups,
    shared_positions_clipped,
    weight_asymmetry,
    weight_residual,
    whole_groups,
)
from dfpo.algorithm.collectives import all_gather_objects
from dfpo.algorithm.group_statistics import RowStatistics, sequence_weights

SIGN_DEPENDENT_CLIP_LOSSES = ("vanilla",)
SIGN_FREE_CLIP_LOSSES = ("cispo",)


@dataclass
class ModulationResidualMeter:
    """Collects per-row records of one mini-batch's micro-batches; :meth:`metrics` gives the residuals."""

    sequence_rows: list[RowStatistics] = field(default_factory=list)
    sequence_clip: list[torch.Tensor] = field(default_factory=list)
    token_rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def record_gspo(self, rows: RowStatistics, clip_low: float, clip_high: float) -> None:
        """GSPO rows at the current θ (``rows.log_ratio`` = log s_i)."""
        self.sequence_rows.append(rows)
        self.sequence_clip.append(gspo_clipped(rows, clip_low, clip_high))

    def record_token_clip(
        self,
        group_id: torch.Tensor,
        seq_advantage: torch.Tensor,
        log_ratio: torch.Tensor,
        response_mask: torch.Tensor,
        prefix_len: torch.Tensor,
        clip_low: float,
        clip_high: float,
        sign_dependent: bool,
    ) -> None:
        """Token-level loss rows: per row, shared positions and how many are clipped for its sign."""
        n_shared, n_out = shared_positions_clipped(
            log_ratio, response_mask, prefix_len, clip_low, clip_high, sign_dependent
        )
        self.token_rows.append((group_id.cpu(), seq_advantage.detach().cpu(), n_shared.cpu(), n_out.cpu()))

    def reduce(self, dp_group) -> dict[str, float]:
        """Metrics over the mini-batch on every rank (collective: every rank must call it)."""
        return self.metrics(all_gather_objects(self.take(), dp_group))

    def take(self) -> tuple:
        """This rank's records of the mini-batch (picklable), cleared for the next one."""
        local = (self.sequence_rows, self.sequence_clip, self.token_rows)
        self.sequence_rows, self.sequence_clip, self.token_rows = [], [], []
        return local

    @staticmethod
    def metrics(parts: list[tuple]) -> dict[str, float]:
        """The mini-batch's metrics from every rank's :meth:`take`, in rank order."""
        metrics: dict[str, float] = {}
        seq_rows = [r for p in parts for r in p[0]]
        if seq_rows:
            rows = RowStatistics.cat(seq_rows)
            clipped = torch.cat([c for p in parts for c in p[1]])
            w = torch.where(clipped, torch.zeros_like(rows.log_ratio), sequence_weights(rows.log_ratio, rows.length))
            metrics["dfpo/cancellation_residual_before"] = weight_residual(
                rows.advantage, w, rows.group_index, rows.valid
            )
            metrics["dfpo/weight_asymmetry_before"] = weight_asymmetry(w, rows.group_index, rows.valid)
            metrics["dfpo/sequence_clip_frac"] = (
                float(clipped[rows.valid].float().mean()) if bool(rows.valid.any()) else 0.0
            )
        token_rows = [t for p in parts for t in p[2]]
        if token_rows:
            gid, adv, n_shared, n_out = (torch.cat([t[k] for t in token_rows]) for k in range(4))
            metrics["dfpo/shared_token_clip_residual"] = clip_residual(gid, adv, n_shared, n_out)
        return metrics


@dataclass
class GradientResidualMeter:
    """Collects each micro-batch's gradients at shared positions; :meth:`reduce` per mini-batch."""

    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    eps: float = 0.0  # the largest machine epsilon of the log-probs recorded since the last reduce

    def record(
        self, loss: torch.Tensor, log_probs: torch.Tensor, to_padded, group_id: torch.Tensor, prefix_len: torch.Tensor
    ) -> None:
        """``log_probs`` as the model returned them (the tensor the loss was computed from);
        ``to_padded`` maps a tensor of that layout to (B, T) response positions."""
        if not (
            torch.is_grad_enabled()
            and isinstance(loss, torch.Tensor)
            and loss.requires_grad
            and log_probs.requires_grad
        ):
            return
        (grad,) = torch.autograd.grad(loss, log_probs, retain_graph=True, allow_unused=True)
        self.eps = max(self.eps, torch.finfo(log_probs.dtype).eps)
        width = int(prefix_len.max()) if prefix_len.numel() else 0
        if grad is None:  # the loss does not depend on the log-probs at all
            padded = torch.zeros(len(group_id), width, dtype=torch.float64)
        else:
            padded = to_padded(grad).detach()[:, :width].to(torch.float64)
        self.rows.append((group_id.detach().cpu(), prefix_len.detach().cpu(), padded.cpu()))

    def reduce(self, dp_group, group_size: int) -> dict[str, float]:
        """The mini-batch's metrics on every rank (collective: every rank must call it)."""
        return self.metrics(all_gather_objects(self.take(), dp_group), group_size)

    def take(self) -> tuple:
        """This rank's records of the mini-batch (picklable), cleared for the next one."""
        local = (self.rows, self.eps)
        self.rows, self.eps = [], 0.0
        return local

    @staticmethod
    def metrics(parts: list[tuple], group_size: int) -> dict[str, float]:
        """The mini-batch's metrics from every rank's :meth:`take`, in rank order."""
        rows = [r for part in parts for r in part[0]]
        if not rows:
            return {}
        eps = {"dfpo/shared_token_grad_eps": max(part[1] for part in parts)}
        width = max(r[2].shape[1] for r in rows)
        grad = torch.cat([torch.nn.functional.pad(r[2], (0, width - r[2].shape[1])) for r in rows])
        group_id, prefix_len = torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])
        residual, groups = gradient_residual(group_id, prefix_len, grad, group_size)
        counts = {
            "dfpo/shared_token_grad_groups": float(groups),
            "dfpo/shared_token_grad_whole_groups": float(len(whole_groups(group_id, group_size))),
            "dfpo/shared_token_grad_prefix_groups": float(len(prefix_groups(group_id, prefix_len, group_size))),
            **eps,
        }
        return counts if groups == 0 else {"dfpo/shared_token_grad_residual": residual, **counts}
