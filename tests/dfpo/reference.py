"""Plain-loop reference of DFPO (docs/method.md §3), written for clarity, used only by tests.

Every quantity is built row by row and group by group with Python loops and autograd, with no
vectorised trick shared with the implementation under test: both forms of the product's loss, the
per-row :func:`dfpo.algorithm.loss.compute_dfpo_loss` (test_dfpo_loss.py) and the per-token
:func:`dfpo.algorithm.loss.dfpo_loss_per_token` (test_loss_per_token.py), are compared with it.
"""

from __future__ import annotations

import math

import torch

CLAMP = 10.0


def reference_prefix_lengths(responses, response_mask, group_index):
    """{group id: longest common prefix of the valid members' response tokens}."""
    B, T = responses.shape
    groups: dict[int, list[int]] = {}
    for i in range(B):
        if int(response_mask[i].sum()) > 0:
            groups.setdefault(int(group_index[i]), []).append(i)
    out = {}
    for g, members in groups.items():
        p = 0
        while True:
            if any(p >= T or not bool(response_mask[i, p]) for i in members):
                break
            if len({int(responses[i, p]) for i in members}) != 1:
                break
            p += 1
        out[g] = p
    return out


def reference_transform(w: list, adv: list, transform: str, scale: float) -> list:
    """T(w) of one group (lists of 0-d tensors / floats)."""
    if transform == "none":
        return list(w)
    if transform == "scale":
        return [scale * x for x in w]
    if transform == "min_replace":
        m = torch.stack(list(w)).min()
        return [m for _ in w]
    if transform == "orth_proj":
        dot = sum(a * x for a, x in zip(adv, w, strict=True))
        nn = sum(a * a for a in adv)
        if float(nn) <= 1e-12:
            return list(w)
        return [x - dot / nn * a for a, x in zip(adv, w, strict=True)]
    raise ValueError(transform)


def reference_dfpo_loss(
    old_log_prob,
    log_prob,
    advantages,
    response_mask,
    group_index,
    transform="min_replace",
    scope="all",
    stop_grad=True,
    scale=0.5,
    responses=None,
    rollout_is_weights=None,
    num_sequences=None,
):
    B, T = log_prob.shape
    valid_rows = [i for i in range(B) if int(response_mask[i].sum()) > 0]
    A, L, W = {}, {}, {}
    for i in valid_rows:
        toks = [t for t in range(T) if bool(response_mask[i, t])]
        A[i] = float(advantages[i, toks[0]])
        L[i] = len(toks)
        mean_delta = sum(log_prob[i, t].double() - old_log_prob[i, t].double() for t in toks) / L[i]
        log_s = torch.clamp(mean_delta, max=CLAMP)
        W[i] = torch.exp(log_s) / L[i]
    groups: dict[int, list[int]] = {}
    for i in valid_rows:
        groups.setdefault(int(group_index[i]), []).append(i)
    Wt = {}
    for members in groups.values():
        w = [W[i].detach() if stop_grad else W[i] for i in members]
        out = reference_transform(w, [A[i] for i in members], transform, scale)
        for i, x in zip(members, out, strict=True):
            Wt[i] = x
    prefix = reference_prefix_lengths(responses, response_mask, group_index) if scope == "shared_prefix" else None
    total = 0.0
    for i in valid_rows:
        for t in range(T):
            if not bool(response_mask[i, t]):
                continue
            in_scope = prefix is None or t < prefix[int(group_index[i])]
            u = Wt[i] if in_scope else (W[i].detach() if stop_grad else W[i])
            rho = 1.0 if rollout_is_weights is None else float(rollout_is_weights[i, t])
            unit = torch.exp(log_prob[i, t] - log_prob[i, t].detach())
            total = total - A[i] * u * rho * unit
    n = len(valid_rows) if num_sequences is None else num_sequences
    return total / max(n, 1)


def reference_group_advantages(rewards: list[float], uids: list, valid: list[bool], norm: bool, eps: float = 1e-6):
    """Group-relative outcome advantages with math.fsum, padding rows excluded."""
    groups: dict = {}
    for i, (u, v) in enumerate(zip(uids, valid, strict=True)):
        if v:
            groups.setdefault(u, []).append(i)
    adv = [0.0] * len(rewards)
    for members in groups.values():
        if len(members) < 2:
            continue
        r = [rewards[i] for i in members]
        mean = math.fsum(r) / len(r)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in r) / (len(r) - 1))
        for i in members:
            adv[i] = (rewards[i] - mean) / (std + eps) if norm else rewards[i] - mean
    return adv
