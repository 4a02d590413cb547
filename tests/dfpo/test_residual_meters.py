"""The cancellation residual from weights and from clipping (dfpo/algorithm/cancellation_residual.py) and the
meter that records it for the baselines (ModulationResidualMeter, dfpo/verl/residual_meters.py), on
hand-computed examples; the metric keys are the ones the docs, the quickstart and the run checks read."""

from __future__ import annotations

import math

import pytest
import torch

from dfpo.algorithm.cancellation_residual import clip_residual, group_weight_metrics, weight_residual
from dfpo.algorithm.group_statistics import RowStatistics
from dfpo.algorithm.group_weights import GroupWeights
from dfpo.verl.residual_meters import ModulationResidualMeter


def _rows(group, log_ratio, length, advantage) -> RowStatistics:
    f64 = dict(dtype=torch.float64)
    return RowStatistics(
        group_index=torch.tensor(group),
        log_ratio=torch.tensor(log_ratio, **f64),
        length=torch.tensor(length, **f64),
        advantage=torch.tensor(advantage, **f64),
        scope_mass=torch.tensor(length, **f64),
        rest_mass=torch.zeros(len(group), **f64),
    )


def test_weight_residual_averages_the_groups_with_a_signal():
    adv = torch.tensor([1.0, -1.0, 0.0, 0.0, 3.0], dtype=torch.float64)
    w = torch.tensor([2.0, 1.0, 5.0, 7.0, 9.0], dtype=torch.float64)
    group = torch.tensor([0, 0, 1, 1, 2])
    valid = torch.tensor([True, True, True, True, False])
    # group 0: |2 − 1| / (2 + 1); group 1: no signal (all Â 0); group 2: its only row is empty
    assert weight_residual(adv, w, group, valid) == pytest.approx(1 / 3)
    assert weight_residual(adv * 0, w, group, valid) == 0.0


def test_group_weight_metrics_keep_their_keys():
    rows = _rows([0, 0, 1, 1], [0.0, math.log(2.0), 0.0, 0.0], [2.0, 4.0, 1.0, 3.0], [1.0, -1.0, -1.0, 1.0])
    w = torch.tensor([0.5, 0.5, 1.0, 1 / 3], dtype=torch.float64)
    metrics = group_weight_metrics(rows, GroupWeights(w, torch.full_like(w, 0.25), None))
    assert set(metrics) == {
        "dfpo/weight_asymmetry_before",
        "dfpo/weight_asymmetry_after",
        "dfpo/cancellation_residual_before",
        "dfpo/cancellation_residual_after",
        "dfpo/negative_weight_frac",
        "dfpo/weight_min",
        "dfpo/weight_mean",
        "dfpo/weight_max",
    }
    assert metrics["dfpo/cancellation_residual_before"] == pytest.approx((0.0 + (2 / 3) / (4 / 3)) / 2)
    assert metrics["dfpo/cancellation_residual_after"] == 0.0
    assert metrics["dfpo/weight_asymmetry_before"] == pytest.approx((0.0 + (2 / 3) / (2 / 3)) / 2)


def test_gspos_sequence_clip_zeroes_a_weight_and_leaves_a_residual():
    """Â = (1, −1), L = 2 each; s_0 = 1.5 > 1 + 0.2 with Â_0 > 0 is clipped: w = (0, 1/2), residual 1
    (unclipped it would be |0.75 − 0.5| / 1.25 = 0.2)."""
    meter = ModulationResidualMeter()
    meter.record_gspo(_rows([0, 0], [math.log(1.5), 0.0], [2.0, 2.0], [1.0, -1.0]), clip_low=0.2, clip_high=0.2)
    assert meter.reduce(None) == {
        "dfpo/cancellation_residual_before": pytest.approx(1.0),
        "dfpo/weight_asymmetry_before": pytest.approx(2.0),
        "dfpo/sequence_clip_frac": 0.5,
    }
    meter.record_gspo(_rows([0, 0], [math.log(1.5), 0.0], [2.0, 2.0], [1.0, -1.0]), clip_low=0.2, clip_high=0.6)
    assert meter.reduce(None)["dfpo/cancellation_residual_before"] == pytest.approx(0.2)


@pytest.mark.parametrize("sign_dependent,expected", [(True, 0.5), (False, 0.0)])
def test_a_sign_dependent_clip_at_a_shared_position_leaves_a_residual(sign_dependent, expected):
    """Two shared positions, the first with r = e^0.5 > 1 + 0.2: vanilla PPO clips the positive member
    there only (residual 1 at that position, 0 at the other); CISPO's clip does not depend on the sign."""
    meter = ModulationResidualMeter()
    log_ratio = torch.tensor([[0.5, 0.0, 0.3], [0.5, 0.0, -0.9]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0])
    meter.record_token_clip(torch.tensor([0, 0]), adv, log_ratio, mask, torch.tensor([2, 2]), 0.2, 0.2, sign_dependent)
    assert meter.reduce(None) == {"dfpo/shared_token_clip_residual": expected}


def test_groups_without_both_signs_do_not_count_for_the_clip_residual():
    group = torch.tensor([0, 0, 1, 1])
    adv = torch.tensor([1.0, -1.0, 1.0, 0.0])
    assert clip_residual(group, adv, torch.tensor([4, 4, 2, 2]), torch.tensor([1, 1, 2, 2])) == 0.25
