"""Statistics against exact formulas, enumeration, scipy and labelled cases."""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from evaluation.stats import (
    avg_at_k,
    bootstrap_ci,
    bootstrap_replicates,
    paired_bootstrap_test,
    pass_at_k,
    pass_at_k_ladder,
)


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """1 - C(n-c, k) / C(n, k) in exact rational arithmetic (C(m, k) = 0 for m < k)."""
    return 1 - Fraction(comb(n - c, k), comb(n, k))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 64).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_exact_combinatorial_formula(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k)[0] == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12)


@pytest.mark.parametrize("n", [1, 3, 5, 8])
def test_pass_at_k_is_the_probability_that_a_random_k_subset_holds_a_correct_sample(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            by_enumeration = sum(any(correct[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k)[0] == pytest.approx(by_enumeration, abs=1e-12)


def test_pass_at_k_hand_values_and_vectorisation():
    # n=4, c=1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2, pass@4 = 1
    assert pass_at_k(4, 1, 1)[0] == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2)[0] == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4)[0] == pytest.approx(1.0)
    np.testing.assert_allclose(pass_at_k([4, 4, 4], [0, 2, 4], 2), [0.0, 1 - 1 / 6, 1.0])


def test_pass_at_k_rejects_bad_input():
    with pytest.raises(ValueError, match="at least k samples"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k >= 1"):
        pass_at_k(3, 1, 0)


def test_pass_at_k_ladder():
    assert pass_at_k_ladder(32) == [1, 2, 4, 8, 16, 32]
    assert pass_at_k_ladder(12) == [1, 2, 4, 8, 12]
    assert pass_at_k_ladder(1) == [1]


def test_avg_at_k_hand_computed():
    correct = np.array([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=bool)
    assert avg_at_k(correct) == pytest.approx(6 / 12)
    with pytest.raises(ValueError):
        avg_at_k(np.array([1.0, 0.0]))


def test_bootstrap_of_one_seed_matches_scipy_percentile_bootstrap():
    rng = np.random.default_rng(3)
    per_problem = rng.beta(2, 3, size=40)
    ours = bootstrap_ci(per_problem, n_resamples=40_000, resample="problems", rng_seed=1)
    ref = scipy_stats.bootstrap(
        (per_problem,),
        np.mean,
        confidence_level=0.95,
        n_resamples=40_000,
        method="percentile",
        random_state=np.random.default_rng(2),
    )
    assert ours.estimate == pytest.approx(per_problem.mean())
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.004)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.004)


def _exact_two_way_distribution(x: np.ndarray) -> np.ndarray:
    """Every equally likely (seed indices, problem indices) draw of the two-way bootstrap."""
    n_s, n_p = x.shape
    values = []
    for s_idx in itertools.product(range(n_s), repeat=n_s):
        for p_idx in itertools.product(range(n_p), repeat=n_p):
            values.append(x[np.ix_(s_idx, p_idx)].mean())
    return np.array(values)


@pytest.mark.parametrize("resample", ["both", "problems", "seeds"])
def test_two_way_bootstrap_matches_exact_enumeration(resample):
    x = np.array([[0.0, 0.5, 1.0], [0.25, 0.25, 0.875]])
    if resample == "both":
        exact = _exact_two_way_distribution(x)
    elif resample == "problems":
        exact = np.array([x[:, list(p)].mean() for p in itertools.product(range(3), repeat=3)])
    else:
        exact = np.array([x[list(s), :].mean() for s in itertools.product(range(2), repeat=2)])
    reps = bootstrap_replicates(x, 200_000, resample, rng_seed=0)
    assert reps.mean() == pytest.approx(exact.mean(), abs=2e-3)
    assert reps.std() == pytest.approx(exact.std(), rel=0.02)
    for q in (0.025, 0.5, 0.975):
        # percentiles of a discrete distribution: compare through the exact CDF
        value = np.quantile(reps, q)
        assert np.mean(exact <= value + 1e-12) >= q - 0.01
        assert np.mean(exact < value - 1e-12) <= q + 0.01


def test_degenerate_data_gives_a_zero_width_interval():
    ci = bootstrap_ci(np.full((3, 5), 0.4), n_resamples=500)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((0.4, 0.4, 0.4))
    assert ci.half_width == pytest.approx(0.0)


def _synthetic_pair(shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """5 seeds x 30 problems of avg@32 per problem: shared difficulty, independent sampling noise."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(0.1, 0.9, size=30)

    def arm(delta: float) -> np.ndarray:
        p = np.clip(difficulty + delta + rng.normal(0, 0.03, size=(5, 1)), 0, 1)
        return rng.binomial(32, p) / 32

    return arm(shift), arm(0.0)


def test_paired_test_detects_a_real_improvement():
    method, baseline = _synthetic_pair(shift=0.06, seed=11)
    result = paired_bootstrap_test(method, baseline, n_resamples=20_000, rng_seed=0)
    assert result.delta.estimate == pytest.approx((method - baseline).mean())
    assert result.delta.excludes(0.0)
    assert result.delta.low > 0
    assert result.p_value < 0.01
    assert (result.n_seeds, result.n_problems) == (5, 30)


def test_paired_test_does_not_reject_when_there_is_no_difference():
    method, baseline = _synthetic_pair(shift=0.0, seed=12)
    result = paired_bootstrap_test(method, baseline, n_resamples=20_000, rng_seed=0)
    assert not result.delta.excludes(0.0)
    assert result.p_value > 0.05


def test_pairing_removes_problem_difficulty_variance():
    method, baseline = _synthetic_pair(shift=0.03, seed=13)
    paired = paired_bootstrap_test(method, baseline, n_resamples=10_000)
    unpaired_width = (
        bootstrap_ci(method, n_resamples=10_000).half_width + bootstrap_ci(baseline, n_resamples=10_000).half_width
    )
    assert paired.delta.half_width < 0.5 * unpaired_width


def test_constant_difference_gives_the_smallest_p_value_hand_computed():
    baseline = np.random.default_rng(0).uniform(size=(3, 10))
    result = paired_bootstrap_test(baseline + 0.1, baseline, n_resamples=999)
    assert result.delta.low == pytest.approx(0.1) and result.delta.high == pytest.approx(0.1)
    assert result.p_value == pytest.approx(1 / 1000)


def test_identical_arms_give_p_one():
    x = np.random.default_rng(1).uniform(size=(2, 7))
    assert paired_bootstrap_test(x, x.copy(), n_resamples=100).p_value == 1.0


def test_paired_problem_bootstrap_matches_scipy_paired_bootstrap():
    rng = np.random.default_rng(5)
    a, b = rng.uniform(size=50), rng.uniform(size=50)
    ours = paired_bootstrap_test(a, b, n_resamples=40_000, resample="problems")
    ref = scipy_stats.bootstrap(
        (a, b),
        lambda u, v, axis=-1: np.mean(u - v, axis=axis),
        paired=True,
        n_resamples=40_000,
        method="percentile",
        random_state=np.random.default_rng(9),
    )
    assert ours.delta.low == pytest.approx(ref.confidence_interval.low, abs=0.005)
    assert ours.delta.high == pytest.approx(ref.confidence_interval.high, abs=0.005)


def test_statistics_reject_malformed_input():
    with pytest.raises(ValueError, match="matching"):
        paired_bootstrap_test(np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="resample"):
        bootstrap_replicates(np.zeros((2, 2)), 10, "rows")
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(np.zeros(3), level=95)


def test_a_real_degradation_is_significant_too_two_sided():
    method, baseline = _synthetic_pair(shift=-0.1, seed=11)
    result = paired_bootstrap_test(method, baseline, n_resamples=20_000)
    assert result.delta.high < 0 and result.p_value < 0.01


def test_p_value_matches_the_two_sided_normal_approximation_for_a_moderate_effect():
    # one seed, 400 problems, differences ~ N(0.1, 1): z = 0.1 / (1 / sqrt(400)) ~ 2, p ~ 0.05
    rng = np.random.default_rng(21)
    d = rng.normal(0.0, 1.0, size=400)
    d = (d - d.mean()) / d.std() + 0.1
    result = paired_bootstrap_test(d, np.zeros_like(d), n_resamples=50_000, resample="problems")
    se = d.std() / np.sqrt(d.size)
    expected = 2 * scipy_stats.norm.sf(abs(d.mean()) / se)
    assert result.p_value == pytest.approx(expected, abs=0.008)


def test_a_single_resampled_seed_is_refused_not_reported_as_significant():
    """One seed per method with --resample seeds: every replicate equals the observed difference,
    which used to print a null pair as ``-4.6 [-4.6, -4.6] p<2e-04``."""
    from evaluation.stats import DegenerateBootstrapError

    rng = np.random.default_rng(0)
    method, baseline = rng.random((1, 30)), rng.random((1, 30))  # a true null pair, one seed each
    with pytest.raises(DegenerateBootstrapError, match="only 1 seed.*resample problems or both"):
        paired_bootstrap_test(method, baseline, n_resamples=500, resample="seeds")
    with pytest.raises(DegenerateBootstrapError, match="add problems"):
        bootstrap_ci(np.array([[0.5], [0.7]]), n_resamples=100, resample="problems")
    # one seed but problems resampled too: a proper bootstrap over problems
    test = paired_bootstrap_test(method, baseline, n_resamples=2000, resample="both")
    assert test.delta.high - test.delta.low > 0.05 and test.p_value > 0.05


def test_holm_adjustment_hand_computed_and_monotone():
    from evaluation.stats import holm_adjust

    # sorted 0.01, 0.02, 0.03, 0.5 -> 4*0.01, 3*0.02, max(0.06, 2*0.03), max(.., 1*0.5)
    np.testing.assert_allclose(holm_adjust([0.03, 0.5, 0.01, 0.02]), [0.06, 0.5, 0.04, 0.06])
    np.testing.assert_allclose(holm_adjust([0.4, 0.9]), [0.8, 0.9])
    assert holm_adjust([0.6, 0.7]).max() <= 1.0
    with pytest.raises(ValueError, match="p-values in"):
        holm_adjust([1.5])
