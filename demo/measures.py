"""What the demo measures: the cancellation residual on shared positions, and probe drift.

**Cancellation residual (exact, per update).** Write the loss gradient as

    ∇θ L = Σ_i Σ_t c_{i,t} ∇θ log π_θ(y_{i,t} | h_{i,t}),    c_{i,t} = ∂L / ∂ log π_θ(y_{i,t} | h_{i,t}).

The coefficients c are read off autograd (the gradient of the loss with respect to the per-token
log-probability tensor the loss function receives), so they include everything the loss does:
clipping, sequence ratios, length normalisation, and — for the "no stop-grad" ablation — the
gradient through the transform. At a position t inside the group's longest common response prefix
every member has the same history and the same token, so ∇θ log π_θ(y_{i,t} | h_{i,t}) is one and
the same vector g_t for all members, and the shared positions' own gradient is exactly
(Σ_i c_{i,t}) g_t. The residual compares that sum with the sum of magnitudes:

    residual = Σ_groups Σ_{t in shared prefix} |Σ_i c_{i,t}|  /  Σ_groups Σ_{t in shared prefix} Σ_i |c_{i,t}|

0 means the shared positions' gradients cancel exactly; 1 means they all push the same way.

**Probe drift.** On a fixed probe (every prompt followed by the template header), the demo
records the log-probability of each header token and the entropy of the next-token distribution
at the header positions and at the answer position; drift is the change from the warm-start
policy. Drift is not zero under DFPO: parameters shared with the divergent positions (answer,
filler, EOS) still move, and that moves the header's probabilities; only the shared positions'
own gradient cancels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from demo.policy_model import token_entropy, token_log_probs
from demo.task import HEADER_LEN, HEADER_VARIANT_TOKENS, PromptBatch, header_block
from dfpo.algorithm.shared_prefix import shared_prefix_lengths


def group_common_prefix_lengths(
    responses: torch.Tensor, response_mask: torch.Tensor, group_index: torch.Tensor
) -> torch.Tensor:
    """(B,) length of the longest common response prefix of each row's group (valid tokens only):
    position t is shared when every member of the group has a valid token there and all those
    tokens are equal (and every earlier position is shared). The demo's batch holds whole groups, so
    this is :func:`dfpo.algorithm.shared_prefix.shared_prefix_lengths` without collectives."""
    return shared_prefix_lengths(group_index, responses, response_mask, across_ranks=False)


@dataclass(frozen=True)
class CancellationSums:
    """Numerator and denominator of the residual over some updates (add them up across updates)."""

    net: float
    """Σ_groups Σ_t |Σ_i c_{i,t}| over shared positions."""
    magnitude: float
    """Σ_groups Σ_t Σ_i |c_{i,t}| over shared positions."""
    shared_positions: int
    """Number of (group, position) pairs inside common prefixes."""

    def __add__(self, other: CancellationSums) -> CancellationSums:
        return CancellationSums(
            self.net + other.net, self.magnitude + other.magnitude, self.shared_positions + other.shared_positions
        )

    @property
    def residual(self) -> float | None:
        """net / magnitude, or None when no shared position carried any gradient."""
        return self.net / self.magnitude if self.magnitude > 0 else None


def cancellation_sums(coef: torch.Tensor, common_prefix: torch.Tensor, group_index: torch.Tensor) -> CancellationSums:
    """The residual's sums from the per-token coefficients ``coef`` = ∂L/∂log π (B, R).

    Computed in float64 from the float32 coefficients autograd produced.
    """
    coef = coef.detach().to(torch.float64)
    net = 0.0
    magnitude = 0.0
    positions = 0
    for group in torch.unique(group_index).tolist():
        rows = (group_index == group).nonzero().squeeze(1)
        length = int(common_prefix[rows[0]])
        if length == 0:
            continue
        block = coef[rows, :length]
        net += float(block.sum(dim=0).abs().sum())
        magnitude += float(block.abs().sum())
        positions += length
    return CancellationSums(net, magnitude, positions)


@dataclass(frozen=True)
class ProbeReading:
    """The policy on the fixed probe (every prompt + the template header)."""

    header_log_prob: torch.Tensor
    """(num_prompts, HEADER_LEN) log π of each header token."""
    header_log_odds: torch.Tensor
    """(num_prompts, HEADER_LEN) log π(header token) − log π(its variant spelling)."""
    header_entropy: float
    """Mean next-token entropy (nats) at the header positions."""
    answer_entropy: float
    """Mean next-token entropy (nats) at the answer position (right after the header)."""


@torch.no_grad()
def read_probe(model: torch.nn.Module, probe: PromptBatch) -> ProbeReading:
    """Evaluate ``model`` on the probe prompts followed by the header."""
    num = probe.tokens.shape[0]
    header = header_block(num)
    logits = model(input_ids=torch.cat([probe.tokens, header], dim=1)).logits
    start = probe.tokens.shape[1] - 1
    header_logits = logits[:, start : start + HEADER_LEN]
    answer_logits = logits[:, start + HEADER_LEN]
    header_log_prob = token_log_probs(header_logits, header)
    variant = torch.tensor(HEADER_VARIANT_TOKENS).expand(num, HEADER_LEN)
    return ProbeReading(
        header_log_prob=header_log_prob,
        header_log_odds=header_log_prob - token_log_probs(header_logits, variant),
        header_entropy=float(token_entropy(header_logits).mean()),
        answer_entropy=float(token_entropy(answer_logits.unsqueeze(1)).mean()),
    )


def header_drift(reading: ProbeReading, initial: ProbeReading) -> tuple[float, float]:
    """(mean |Δ log π|, mean Δ log π) of the header tokens from ``initial`` to ``reading`` (nats)."""
    delta = (reading.header_log_prob - initial.header_log_prob).to(torch.float64)
    return float(delta.abs().mean()), float(delta.mean())


def spelling_drift(reading: ProbeReading, initial: ProbeReading) -> tuple[float, float]:
    """(mean |Δ log-odds|, mean Δ log-odds) of header token vs its variant, from ``initial`` (nats)."""
    delta = (reading.header_log_odds - initial.header_log_odds).to(torch.float64)
    return float(delta.abs().mean()), float(delta.mean())


def length_reward_correlation(lengths: torch.Tensor, rewards: torch.Tensor) -> float | None:
    """Pearson correlation of response length and reward over a batch (None if either is constant)."""
    x = lengths.to(torch.float64)
    y = rewards.to(torch.float64)
    x = x - x.mean()
    y = y - y.mean()
    denom = float((x.square().sum() * y.square().sum()).sqrt())
    return float((x * y).sum()) / denom if denom > 0 else None
