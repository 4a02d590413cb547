"""P_g, each group's longest common response prefix (the tokens ``scope="shared_prefix"`` covers).

The common prefix of all members is min_i LCP(y_ref, y_i) for any member y_ref. When the group's
responses sit on several ranks, three small collectives per training step, instead of gathering
every response on every rank:

1. every rank says which groups it holds; the lowest such rank owns the group's reference row;
2. owners send their reference rows (one row per group in total, not one per member);
3. every rank computes LCP(y_ref, y_i) for its own rows, and the per-group minimum is gathered.

With one process (or ``across_ranks=False``: a batch that holds whole groups) the collectives are
the identity and the same steps give the batch's own P_g.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from dfpo.algorithm.collectives import all_gather_objects, dp_world


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


def shared_prefix_lengths(
    group_id: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    dp_group=None,
    *,
    across_ranks: bool = True,
) -> torch.Tensor:
    """(B,) long, on the CPU: the common-prefix length of each local row's group (0 for padding).

    ``responses``/``response_mask`` are this rank's padded (B, T) response tokens and mask; a row's
    response is its tokens up to its first masked position. The group's members are its rows on
    every rank of ``dp_group`` or, with ``across_ranks=False``, the rows given here (no collective).
    """
    if across_ranks:
        rank, _ = dp_world(dp_group)
        gather = partial(all_gather_objects, group=dp_group)
    else:
        rank, gather = 0, lambda obj: [obj]
    mask = response_mask.to(torch.bool).cpu()
    lengths = torch.cumprod(mask.to(torch.long), dim=-1).sum(dim=-1)
    tokens = responses.cpu().numpy()
    gids = group_id.cpu().tolist()
    rows: dict[int, list[int]] = {}
    for i, g in enumerate(gids):
        if int(lengths[i]) > 0:
            rows.setdefault(g, []).append(i)

    holders = gather(sorted(rows))
    owner: dict[int, int] = {}
    for r, held in enumerate(holders):
        for g in held:
            owner.setdefault(g, r)
    mine = {g: tokens[rs[0], : int(lengths[rs[0]])].astype(np.int64) for g, rs in rows.items() if owner[g] == rank}
    refs: dict[int, np.ndarray] = {}
    for part in gather(mine):
        refs.update(part)
    local_min = {g: min(_lcp(refs[g], tokens[i, : int(lengths[i])]) for i in rs) for g, rs in rows.items()}
    prefix: dict[int, int] = {}
    for part in gather(local_min):
        for g, p in part.items():
            prefix[g] = min(p, prefix.get(g, p))
    out = [prefix[g] if int(lengths[i]) > 0 else 0 for i, g in enumerate(gids)]
    return torch.tensor(out, dtype=torch.long)
