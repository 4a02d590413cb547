"""Learning-tax diagnostics of GSPO and GRPO runs, measured from the micro-batches they train on.

The paper's quantity is the group sum Σ_i Â_i w_{i,t*} of the effective modulation at a token
shared by the group; we report the cancellation residual |Σ_i Â_i w_i| / Σ_i |Â_i w_i| (0 = the
shared token's gradient cancels, 1 = nothing cancels). All micro-batches of a mini-batch see the
same parameters, so each micro-batch records its rows and the mini-batch's records are
all-gathered over the data-parallel ranks once the mini-batch is done:

* ``gspo`` (sequence-coupled): w_i = s_i/L_i · u_i with u_i = 0 when GSPO's sequence clip zeroes
  the gradient of response i (Â_i > 0 and s_i > 1+ε_high, or Â_i < 0 and s_i < 1−ε_low). Reported
  as ``dfpo/cancellation_residual_before`` and ``dfpo/weight_asymmetry_before``.
* token-level losses (``vanilla`` GRPO, ``cispo`` GRPO-fix): at a shared position every member
  has the same token ratio r_t (same history, same token), so with token-mean aggregation the
  modulation differs across members only through clipping. Vanilla PPO clipping depends on the
  sign of Â_i: if r_t > 1+ε_high the positive-advantage members are clipped, if r_t < 1−ε_low the
  negative ones, and the shared gradient no longer cancels (residual 1 at that position); CISPO's
  detached clip does not depend on Â_i (residual 0). Reported as
  ``dfpo/shared_token_clip_residual``: the mean over shared positions of groups with both signs.

Groups that a mini-batch holds only partly are measured over the members it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dfpo.algorithm.collectives import all_gather_objects
from dfpo.algorithm.group_statistics import GroupWeights, RowStatistics, group_weight_metrics, sequence_weights

SIGN_DEPENDENT_CLIP_LOSSES = ("vanilla",)
SIGN_FREE_CLIP_LOSSES = ("cispo",)


@dataclass
class LearningTaxRecorder:
    """Collects per-row records of one mini-batch's micro-batches; :meth:`reduce` gives metrics."""

    sequence_rows: list[RowStatistics] = field(default_factory=list)
    sequence_clip: list[torch.Tensor] = field(default_factory=list)
    token_rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def record_gspo(self, rows: RowStatistics, clip_low: float, clip_high: float) -> None:
        """GSPO rows at the current θ (``rows.log_ratio`` = log s_i)."""
        s = torch.exp(rows.log_ratio)
        clipped = ((rows.advantage > 0) & (s > 1 + clip_high)) | ((rows.advantage < 0) & (s < 1 - clip_low))
        self.sequence_rows.append(rows)
        self.sequence_clip.append(clipped)

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
        positions = torch.arange(log_ratio.shape[-1], device=log_ratio.device).unsqueeze(0)
        shared = (positions < prefix_len.unsqueeze(-1)) & response_mask.to(torch.bool)
        r = torch.exp(log_ratio.detach().float())
        above = shared & (r > 1 + clip_high)
        below = shared & (r < 1 - clip_low)
        n_shared = shared.sum(-1)
        n_out = (above | below).sum(-1) if sign_dependent else torch.zeros_like(n_shared)
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
            gw = GroupWeights(weights=w, transformed=w, grad_coef=None)
            full = group_weight_metrics(rows, gw)
            metrics["dfpo/cancellation_residual_before"] = full["dfpo/cancellation_residual_before"]
            metrics["dfpo/weight_asymmetry_before"] = full["dfpo/weight_asymmetry_before"]
            metrics["dfpo/sequence_clip_frac"] = (
                float(clipped[rows.valid].float().mean()) if bool(rows.valid.any()) else 0.0
            )
        token_rows = [t for p in parts for t in p[2]]
        if token_rows:
            gid = torch.cat([t[0] for t in token_rows])
            adv = torch.cat([t[1] for t in token_rows])
            n_shared = torch.cat([t[2] for t in token_rows])
            n_out = torch.cat([t[3] for t in token_rows])
            shared_total, out_total = 0, 0
            for g in torch.unique(gid):
                m = gid == g
                if not (bool((adv[m] > 0).any()) and bool((adv[m] < 0).any())):
                    continue
                first = int(torch.nonzero(m)[0, 0])  # shared positions and r_t are common to the group
                shared_total += int(n_shared[first])
                out_total += int(n_out[first])
            metrics["dfpo/shared_token_clip_residual"] = out_total / shared_total if shared_total else 0.0
        return metrics
