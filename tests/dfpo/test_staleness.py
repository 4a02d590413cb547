"""dfpo/verl/staleness.py: the per-step staleness diagnostics, against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from dfpo.verl.staleness import policy_lag_metrics, rollout_ratio_spread


def test_policy_lag_counts_versions_behind_the_oldest_weights_and_skips_padding():
    tags = [
        {"min_global_steps": 4, "max_global_steps": 4},  # sampled by the weights step 5 starts from
        {"min_global_steps": 2, "max_global_steps": 4},  # a partial rollout begun two versions back
        {"min_global_steps": 0, "max_global_steps": 0, "is_padding": True},
    ]
    assert policy_lag_metrics(tags, global_steps=5, local_update=1) == {
        "dfpo/staleness/policy_lag_mean": 1.0,
        "dfpo/staleness/policy_lag_max": 2.0,
        "dfpo/staleness/local_update": 1.0,
    }


def test_rollout_ratio_spread_is_the_mean_within_group_range_of_sequence_ratios():
    rollout = torch.zeros(5, 3, dtype=torch.float64)
    old = torch.tensor(
        [
            [0.2, 0.4, 9.0],  # group 0: mean log-ratio over 2 valid tokens 0.3
            [0.0, 0.0, 0.0],  # group 0: 0
            [0.1, 0.1, 0.1],  # group 1: 0.1
            [-0.2, 0.0, 0.0],  # group 1: mean over 1 valid token -0.2
            [5.0, 5.0, 5.0],  # group 2: a singleton has no spread
        ],
        dtype=torch.float64,
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 1]])
    groups = torch.tensor([0, 0, 1, 1, 2])
    expected = ((math.exp(0.3) - 1.0) + (math.exp(0.1) - math.exp(-0.2))) / 2
    spread = rollout_ratio_spread(old, rollout, mask, groups)["dfpo/staleness/rollout_ratio_spread"]
    assert spread == pytest.approx(expected, rel=1e-12)
    assert rollout_ratio_spread(rollout, rollout, mask, groups)["dfpo/staleness/rollout_ratio_spread"] == 0.0
