"""Stable integer group ids from verl's ``uid`` strings, identical on every rank and process."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def uid_to_group_id(uid: object) -> int:
    """A signed 63-bit id of ``uid`` (blake2b; Python's ``hash`` differs between processes)."""
    digest = hashlib.blake2b(str(uid).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=False) >> 1


def group_ids(uids: Iterable[object]) -> torch.Tensor:
    """(B,) LongTensor of :func:`uid_to_group_id` of each uid."""
    return torch.tensor([uid_to_group_id(u) for u in uids], dtype=torch.long)
