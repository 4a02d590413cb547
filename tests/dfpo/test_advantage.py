"""The dfpo advantage estimator: exact zero sum per group, edge cases, agreement with verl's grpo."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

from dfpo import compute_dfpo_outcome_advantage
from tests.dfpo.reference import reference_group_advantages


def _rows(rewards, lengths, T=5):
    lengths = torch.tensor(lengths)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()
    trw = torch.zeros(len(rewards), T)
    for i, (r, n) in enumerate(zip(rewards, lengths.tolist(), strict=True)):
        if n:
            trw[i, n - 1] = r
    return trw, mask


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.integers(0, 4), st.floats(-3, 3, allow_nan=False), st.integers(0, 5)), min_size=1, max_size=24
    ),
    norm=st.booleans(),
)
def test_matches_reference_and_sums_to_zero(data, norm):
    uids = [f"u{g}" for g, _, _ in data]
    rewards = [r for _, r, _ in data]
    lengths = [n for _, _, n in data]
    trw, mask = _rows(rewards, lengths)
    trw64 = trw.double()
    adv = compute_dfpo_outcome_advantage(trw64, mask, np.array(uids, dtype=object), norm_adv_by_std=norm)
    seq = adv.sum(-1) / mask.sum(-1).clamp(min=1)
    ref = reference_group_advantages([float(x) for x in trw64.sum(-1)], uids, [n > 0 for n in lengths], norm)
    torch.testing.assert_close(seq, torch.tensor(ref, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    for u in set(uids):
        members = [i for i, x in enumerate(uids) if x == u]
        assert abs(float(seq[members].sum())) <= 1e-9 * (1 + float(seq[members].abs().sum()))
    # the advantage is written on every valid token and nowhere else
    assert bool((adv[mask == 0] == 0).all())


def test_singletons_all_equal_and_padding_rows_get_zero():
    rewards = [1.0, 0.7, 0.7, 0.7, 1.0, 0.0, 5.0]
    lengths = [3, 2, 4, 1, 5, 2, 0]
    uids = ["single", "eq", "eq", "eq", "g", "g", "pad3f2a"]
    trw, mask = _rows(rewards, lengths)
    adv = compute_dfpo_outcome_advantage(trw, mask, uids)
    seq = adv.sum(-1) / mask.sum(-1).clamp(min=1)
    assert seq[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert seq[4] > 0 > seq[5]
    assert float(seq[6]) == 0.0


def test_padding_rows_do_not_enter_group_statistics():
    trw, mask = _rows([1.0, 0.0, 9.0], [2, 3, 0])
    with_pad = compute_dfpo_outcome_advantage(trw, mask, ["a", "a", "a"])
    without = compute_dfpo_outcome_advantage(trw[:2], mask[:2], ["a", "a"])
    torch.testing.assert_close(with_pad[:2], without)


@pytest.mark.parametrize("norm", [True, False])
def test_agrees_with_verl_grpo_on_ordinary_groups(norm):
    g = torch.Generator().manual_seed(0)
    uids = np.array([f"p{i // 4}" for i in range(16)], dtype=object)
    trw, mask = _rows(
        torch.randint(0, 2, (16,), generator=g).float().tolist(), torch.randint(1, 6, (16,), generator=g).tolist()
    )
    ours = compute_dfpo_outcome_advantage(trw, mask, uids, norm_adv_by_std=norm)
    verl_adv, _ = compute_grpo_outcome_advantage(trw, mask, uids, norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(ours, verl_adv, rtol=1e-5, atol=1e-6)


def test_registered_estimator_honours_norm_adv_by_std_in_grpo():
    fn = get_adv_estimator_fn("dfpo")
    trw, mask = _rows([1.0, 0.0, 0.0, 0.0], [2, 2, 3, 1])
    uids = np.array(["a"] * 4, dtype=object)
    normed, returns = fn(
        token_level_rewards=trw,
        response_mask=mask,
        config=OmegaConf.create({"norm_adv_by_std_in_grpo": True}),
        index=uids,
    )
    plain, _ = fn(
        token_level_rewards=trw,
        response_mask=mask,
        config=OmegaConf.create({"norm_adv_by_std_in_grpo": False}),
        index=uids,
    )
    torch.testing.assert_close(returns, normed)
    assert float(plain[0, 0]) == pytest.approx(0.75)
    assert float(normed[0, 0]) == pytest.approx(0.75 / (0.5 + 1e-6), rel=1e-5)
    with pytest.raises(ValueError, match="uid"):
        fn(token_level_rewards=trw, response_mask=mask, config=None)
