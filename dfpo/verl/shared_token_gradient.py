"""The cancellation residual of the gradient the actor's loss actually produces.

A group's longest common response prefix holds the same tokens in the same context in every
member, so log π_θ(y_t | x, y_<t) at a shared position t is one function of θ for the whole group
and the loss moves it through the sum of its members' gradients. With g_{i,t} = ∂L/∂log π_{i,t},
taken by autograd from the loss verl backpropagates (only the graph between that loss and the
model's log-probs is traversed, not the model), over the groups that a mini-batch holds whole:

    residual = mean over groups with Σ_{t<P} Σ_i |g_{i,t}| > 0 of
               Σ_{t<P} |Σ_i g_{i,t}|  /  Σ_{t<P} Σ_i |g_{i,t}|          (P: the group's prefix length)

0 means the shared tokens get no net gradient: DFPO (Min-Replace, Orth-Proj) gives g_{i,t} =
−Â_i W̃_i ρ_t / N with Σ_i Â_i W̃_i = 0, so its residual is rounding. GSPO (Â_i W_i) and the
``no stop-grad`` ablation (whose W̃(θ) adds a chain-rule term at every token) leave a residual
well above it (tested above 1e-3; the ablation measured about 1e-2). Unlike
``dfpo/cancellation_residual_after``, which is computed from the group weights and is an identity
for the transforms, this one is measured on the gradient path, so a regression there (a weight
left differentiable, a wrong coefficient in the gradient but not the value) shows in the logs.

Logged per mini-batch as ``dfpo/shared_token_grad_residual`` (``actor/`` prefix in verl's
metrics), with ``dfpo/shared_token_grad_groups``, the number of whole groups with a shared prefix
it was measured on, and why the others were not: ``dfpo/shared_token_grad_whole_groups`` (groups
the mini-batch holds whole), ``dfpo/shared_token_grad_prefix_groups`` (of those, groups whose
responses share a prefix; the rest of them gave their shared tokens no gradient at all, i.e. all
advantages 0: every response scored alike), and ``dfpo/shared_token_grad_eps``, the machine epsilon of the log-probs'
dtype (the gradient comes back in it: float32 from verl's fp32 recipes and from flash-attn's
cross-entropy on GPUs, 1.2e-7; bfloat16 where the log-probs are computed in it, 7.8e-3), which
sets the rounding level of the residual. Not recorded when the loss has verl's KL term (``use_kl_loss``), whose gradient
on a shared token does not cancel by design.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dfpo.algorithm.collectives import all_gather_objects


def shared_token_gradient_residual(
    group_id: torch.Tensor, prefix_len: torch.Tensor, grad: torch.Tensor, group_size: int
) -> tuple[float, int]:
    """(mean residual, number of groups measured) of rows given as (B,) group ids, (B,) prefix
    lengths and (B, T') gradients w.r.t. the response log-probs (T' ≥ the longest prefix).

    Only groups with exactly ``group_size`` rows and a non-empty shared prefix count; a group
    whose shared tokens get no gradient at all (Σ|g| = 0, e.g. equal rewards) is left out."""
    residuals = []
    for rows in _prefix_groups(group_id, prefix_len, group_size):
        shared = grad[rows, : int(prefix_len[rows][0])].to(torch.float64)
        total = shared.abs().sum()
        if float(total) == 0.0:
            continue
        residuals.append(float(shared.sum(dim=0).abs().sum() / total))
    return (sum(residuals) / len(residuals) if residuals else 0.0), len(residuals)


def _whole_groups(group_id: torch.Tensor, group_size: int) -> list[torch.Tensor]:
    """Row masks of the groups present with exactly ``group_size`` rows."""
    return [rows for rows in (group_id == g for g in torch.unique(group_id)) if int(rows.sum()) == group_size]


def _prefix_groups(group_id: torch.Tensor, prefix_len: torch.Tensor, group_size: int) -> list[torch.Tensor]:
    """Row masks of the whole groups whose responses share a non-empty prefix."""
    return [rows for rows in _whole_groups(group_id, group_size) if int(prefix_len[rows][0]) > 0]


@dataclass
class SharedTokenGradientRecorder:
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
        residual, groups = shared_token_gradient_residual(group_id, prefix_len, grad, group_size)
        counts = {
            "dfpo/shared_token_grad_groups": float(groups),
            "dfpo/shared_token_grad_whole_groups": float(len(_whole_groups(group_id, group_size))),
            "dfpo/shared_token_grad_prefix_groups": float(len(_prefix_groups(group_id, prefix_len, group_size))),
            **eps,
        }
        return counts if groups == 0 else {"dfpo/shared_token_grad_residual": residual, **counts}
