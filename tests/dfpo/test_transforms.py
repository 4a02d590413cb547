"""The within-group transforms (Eq. 17, Eq. 18, ablations) as properties over random groups."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dfpo import apply_group_transform
from tests.dfpo.reference import reference_transform

group_sizes = st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=5)


def _groups(sizes, seed, zero_sum=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat([torch.full((s,), k * 3 + 1) for k, s in enumerate(sizes)]).long()
    w = torch.rand(len(ids), generator=g, dtype=torch.float64) * 2 + 1e-3
    a = torch.randn(len(ids), generator=g, dtype=torch.float64)
    if zero_sum:
        for k in ids.unique():
            m = ids == k
            a[m] = a[m] - a[m].mean() if int(m.sum()) > 1 else 0.0
    perm = torch.randperm(len(ids), generator=g)
    return w[perm], a[perm], ids[perm]


@settings(max_examples=60, deadline=None)
@given(sizes=group_sizes, seed=st.integers(0, 10_000))
def test_min_replace_and_orth_proj_cancel_every_group(sizes, seed):
    w, a, ids = _groups(sizes, seed)
    for transform in ("min_replace", "orth_proj"):
        wt = apply_group_transform(w, a, ids, transform)
        for k in ids.unique():
            m = ids == k
            assert abs(float((a[m] * wt[m]).sum())) <= 1e-12 * float((a[m].abs() * w[m]).sum() + 1)


@settings(max_examples=60, deadline=None)
@given(sizes=group_sizes, seed=st.integers(0, 10_000), kappa=st.floats(0.1, 2.0))
def test_transforms_match_reference_per_group(sizes, seed, kappa):
    w, a, ids = _groups(sizes, seed, zero_sum=False)
    for transform in ("min_replace", "orth_proj", "scale", "none"):
        wt = apply_group_transform(w, a, ids, transform, scale=kappa)
        for k in ids.unique():
            m = torch.nonzero(ids == k).flatten()
            ref = reference_transform([w[i] for i in m], [a[i] for i in m], transform, kappa)
            torch.testing.assert_close(wt[m], torch.stack([torch.as_tensor(x, dtype=torch.float64) for x in ref]))


@settings(max_examples=40, deadline=None)
@given(sizes=group_sizes, seed=st.integers(0, 10_000))
def test_min_replace_never_enlarges_and_orth_proj_keeps_the_mean(sizes, seed):
    w, a, ids = _groups(sizes, seed)
    mr = apply_group_transform(w, a, ids, "min_replace")
    op = apply_group_transform(w, a, ids, "orth_proj")
    assert bool((mr <= w).all())
    for k in ids.unique():
        m = ids == k
        torch.testing.assert_close(op[m].mean(), w[m].mean())


def test_padding_rows_are_not_group_members():
    w = torch.tensor([0.5, 0.01, 0.7, 0.9], dtype=torch.float64)
    a = torch.tensor([1.0, 5.0, -1.0, 0.0], dtype=torch.float64)
    ids = torch.tensor([4, 4, 4, 9])
    valid = torch.tensor([True, False, True, True])
    mr = apply_group_transform(w, a, ids, "min_replace", valid=valid)
    assert mr.tolist() == [0.5, 0.0, 0.5, 0.9]
    op = apply_group_transform(w, a, ids, "orth_proj", valid=valid)
    assert op[1] == 0.0 and abs(float(op[0] - op[2])) < 1e-15  # projection over the two members only
    assert op[3] == 0.9  # ‖Â‖ = 0: unchanged


def test_orth_proj_can_produce_negative_weights():
    """Eq. 18 as written: a small weight with a large advantage goes negative (reported, not clamped)."""
    w = torch.tensor([1.0, 0.01, 0.01], dtype=torch.float64)
    a = torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64)
    out = apply_group_transform(w, a, torch.zeros(3, dtype=torch.long), "orth_proj")
    assert float(out[1]) < 0
    assert abs(float((a * out).sum())) < 1e-15
