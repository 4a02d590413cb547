"""Each group's longest common response prefix, when the group's responses sit on several ranks.

The common prefix of all members is min_i LCP(y_ref, y_i) for any member y_ref. Three small
collectives per training step, instead of gathering every response on every rank:

1. every rank says which groups it holds; the lowest such rank owns the group's reference row;
2. owners send their reference rows (one row per group in total, not one per member);
3. every rank computes LCP(y_ref, y_i) for its own rows, and the per-group minimum is gathered.
"""

from __future__ import annotations

import numpy as np
import torch

from dfpo.distributed import all_gather_objects, dp_world


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


def shared_prefix_lengths_across_ranks(
    group_id: torch.Tensor, responses: torch.Tensor, response_mask: torch.Tensor, dp_group=None
) -> torch.Tensor:
    """(B,) long: the common-prefix length of each local row's group over all ranks (0 for padding).

    ``responses``/``response_mask`` are this rank's padded (B, T) response tokens and mask; a row's
    response is its tokens up to its first masked position.
    """
    rank, _ = dp_world(dp_group)
    mask = response_mask.to(torch.bool).cpu()
    lengths = torch.cumprod(mask.to(torch.long), dim=-1).sum(dim=-1)
    tokens = responses.cpu().numpy()
    gids = group_id.cpu().tolist()
    rows: dict[int, list[int]] = {}
    for i, g in enumerate(gids):
        if int(lengths[i]) > 0:
            rows.setdefault(g, []).append(i)

    holders = all_gather_objects(sorted(rows), dp_group)
    owner: dict[int, int] = {}
    for r, held in enumerate(holders):
        for g in held:
            owner.setdefault(g, r)
    mine = {g: tokens[rs[0], : int(lengths[rs[0]])].astype(np.int64) for g, rs in rows.items() if owner[g] == rank}
    refs: dict[int, np.ndarray] = {}
    for part in all_gather_objects(mine, dp_group):
        refs.update(part)
    local_min = {g: min(_lcp(refs[g], tokens[i, : int(lengths[i])]) for i in rs) for g, rs in rows.items()}
    prefix: dict[int, int] = {}
    for part in all_gather_objects(local_min, dp_group):
        for g, p in part.items():
            prefix[g] = min(p, prefix.get(g, p))
    out = [prefix[g] if int(lengths[i]) > 0 else 0 for i, g in enumerate(gids)]
    return torch.tensor(out, dtype=torch.long)
