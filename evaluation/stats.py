"""Statistics for reporting: avg@k, unbiased pass@k, bootstrap confidence intervals, paired tests.

Conventions used throughout:

* A *run* is one trained model (one method, one training seed) evaluated with k samples per
  problem. Its results reduce to a vector ``acc[p]`` = fraction of the k samples of problem p
  that are correct; avg@k of the run is ``acc.mean()``.
* Several training seeds of one method on one benchmark form a matrix ``X[s, p]`` (seeds x
  problems). The paper's Table 1 reports the mean over seeds of avg@k, i.e. ``X.mean()``, with a
  95% bootstrap confidence interval.
* The bootstrap resamples problems and, by default, seeds as well (a two-way bootstrap: the
  benchmark's problems and the training seeds are both finite samples). One replicate draws
  seed indices S* (S with replacement) and problem indices P* (P with replacement) and
  computes ``X[S*][:, P*].mean()``. This equals ``w_s^T X w_p / (S P)`` with multinomial
  count vectors, which is how it is computed here (vectorised over replicates).
* The paired test compares a method with a baseline on the *same* problems and the *same*
  seed labels: it bootstraps ``D = X_method - X_baseline`` with shared indices, so problem
  difficulty and seed effects cancel within each replicate.

Everything here is plain numpy and deterministic given ``rng_seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

ResampleAxes = Literal["problems", "seeds", "both"]
RESAMPLE_AXES: tuple[str, ...] = ("problems", "seeds", "both")


def avg_at_k(correct: np.ndarray) -> float:
    """avg@k: the mean correctness over all k samples of all problems.

    ``correct`` has shape (problems, k) with values in [0, 1] (booleans allowed). Every problem
    carries the same weight because every problem has the same k.
    """
    correct = np.asarray(correct, dtype=float)
    if correct.ndim != 2 or correct.size == 0:
        raise ValueError(f"avg_at_k expects a non-empty (problems, k) array, got shape {correct.shape}")
    return float(correct.mean())


def pass_at_k(n: np.ndarray | int, c: np.ndarray | int, k: int) -> np.ndarray:
    """Unbiased pass@k estimator (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``, per problem.

    ``n`` samples were drawn, ``c`` of them are correct, ``k <= n``. Evaluated with the
    numerically stable product ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which is exact in real
    arithmetic and never forms large binomials.
    """
    n_arr = np.atleast_1d(np.asarray(n, dtype=np.int64))
    c_arr = np.atleast_1d(np.asarray(c, dtype=np.int64))
    n_arr, c_arr = np.broadcast_arrays(n_arr, c_arr)
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if np.any(n_arr < k):
        raise ValueError(f"pass@{k} needs at least k samples per problem; smallest n is {int(n_arr.min())}")
    if np.any((c_arr < 0) | (c_arr > n_arr)):
        raise ValueError("pass@k needs 0 <= c <= n for every problem")
    out = np.empty(n_arr.shape, dtype=float)
    for idx, (ni, ci) in enumerate(zip(n_arr.ravel(), c_arr.ravel(), strict=True)):
        if ni - ci < k:
            out.flat[idx] = 1.0  # every k-subset contains a correct sample
        else:
            i = np.arange(ni - ci + 1, ni + 1, dtype=float)
            out.flat[idx] = 1.0 - float(np.prod(1.0 - k / i))
    return out


def pass_at_k_ladder(n: int) -> list[int]:
    """The k values to report for n samples: powers of two up to n, plus n itself."""
    ks = []
    k = 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks


@dataclass(frozen=True)
class BootstrapCI:
    """A point estimate with a percentile bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    level: float
    n_resamples: int
    resample: str

    @property
    def half_width(self) -> float:
        """Half the interval's width, for the ``mean ± x`` display of the paper's tables."""
        return (self.high - self.low) / 2.0

    def excludes(self, value: float) -> bool:
        """Whether ``value`` lies strictly outside the interval."""
        return value < self.low or value > self.high


@dataclass(frozen=True)
class PairedTest:
    """Paired bootstrap comparison of a method with a baseline (method minus baseline)."""

    delta: BootstrapCI
    p_value: float
    n_seeds: int
    n_problems: int


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (seeds, problems) matrix, got shape {np.shape(x)}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


class DegenerateBootstrapError(ValueError):
    """Every resampled axis has a single entry, so every replicate equals the observed value."""


def check_resampling(n_seeds: int, n_problems: int, resample: ResampleAxes) -> None:
    """Refuse a bootstrap whose resampled axes all have length 1.

    Resampling one seed (or one problem) with replacement always draws that same seed, so
    every replicate equals the observed mean: the interval has zero width and the paired
    test's p-value falls to its floor 1/(B+1) whatever the data. ``"both"`` with one seed is
    not degenerate: it is the bootstrap over problems.
    """
    sizes = {"seeds": n_seeds, "problems": n_problems}
    resampled = ["seeds", "problems"] if resample == "both" else [resample]
    if all(sizes[axis] < 2 for axis in resampled):
        raise DegenerateBootstrapError(
            f"cannot bootstrap over {' and '.join(resampled)}: there is only {n_seeds} seed(s) and {n_problems} "
            "problem(s), so every replicate would equal the observed value (zero-width interval, p at its floor); "
            + ("resample problems or both, or add seeds" if resample == "seeds" else "add problems")
        )


def holm_adjust(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm's step-down adjustment of a family of m p-values (Holm 1979).

    With the p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted values are
    ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting ``p~ < alpha`` controls the
    family-wise error rate at alpha under any dependence between the tests. Returned in the
    input order.
    """
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or np.any((p < 0) | (p > 1)) or not np.all(np.isfinite(p)):
        raise ValueError(f"holm_adjust expects a 1-D array of p-values in [0, 1], got {p!r}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def bootstrap_replicates(
    x: np.ndarray, n_resamples: int, resample: ResampleAxes = "both", rng_seed: int = 0
) -> np.ndarray:
    """Bootstrap replicates of the grand mean of a (seeds, problems) matrix.

    ``resample`` chooses which axes are drawn with replacement: ``"problems"`` (seeds fixed),
    ``"seeds"`` (problems fixed) or ``"both"`` (independently, the default). A degenerate
    choice (see :func:`check_resampling`) raises :class:`DegenerateBootstrapError`.
    """
    x = _as_matrix(x, "x")
    if resample not in RESAMPLE_AXES:
        raise ValueError(f"resample must be one of {RESAMPLE_AXES}, got {resample!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    n_s, n_p = x.shape
    check_resampling(n_s, n_p, resample)
    rng = np.random.default_rng(rng_seed)
    if resample in ("seeds", "both"):
        w_s = rng.multinomial(n_s, np.full(n_s, 1.0 / n_s), size=n_resamples).astype(float)
    else:
        w_s = np.ones((n_resamples, n_s))
    if resample in ("problems", "both"):
        w_p = rng.multinomial(n_p, np.full(n_p, 1.0 / n_p), size=n_resamples).astype(float)
    else:
        w_p = np.ones((n_resamples, n_p))
    # mean of X[S*][:, P*] == w_s^T X w_p / (n_s n_p)
    return np.einsum("bs,sp,bp->b", w_s, x, w_p, optimize=True) / (n_s * n_p)


def _percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return float(low), float(high)


def bootstrap_ci(
    x: np.ndarray,
    level: float = 0.95,
    n_resamples: int = 10_000,
    resample: ResampleAxes = "both",
    rng_seed: int = 0,
) -> BootstrapCI:
    """Grand mean of a (seeds, problems) matrix with a percentile bootstrap CI.

    A 1-D input is read as a single seed (one row), which reduces to the ordinary bootstrap
    of a mean over problems.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = _as_matrix(x, "x")
    reps = bootstrap_replicates(x, n_resamples, resample, rng_seed)
    low, high = _percentile_interval(reps, level)
    return BootstrapCI(float(x.mean()), low, high, level, n_resamples, resample)


def paired_bootstrap_test(
    method: np.ndarray,
    baseline: np.ndarray,
    level: float = 0.95,
    n_resamples: int = 10_000,
    resample: ResampleAxes = "both",
    rng_seed: int = 0,
) -> PairedTest:
    """Paired bootstrap test of ``mean(method) - mean(baseline)``.

    Both inputs are (seeds, problems) matrices whose rows are paired by seed label and whose
    columns are paired by problem. Each replicate draws one set of seed and problem indices
    and applies it to both, i.e. it bootstraps the difference matrix ``D``.

    The two-sided p-value tests H0: delta = 0 with the shifted bootstrap distribution
    (replicates re-centred on 0): ``p = (1 + #{|d* - d| >= |d|}) / (B + 1)``. The ``+1`` keeps
    p > 0 with a finite number of replicates, so the smallest attainable p is 1/(B+1).
    """
    a = _as_matrix(method, "method")
    b = _as_matrix(baseline, "baseline")
    if a.shape != b.shape:
        raise ValueError(
            f"paired test needs matching (seeds, problems) shapes, got method {a.shape} and baseline {b.shape}"
        )
    d = a - b
    reps = bootstrap_replicates(d, n_resamples, resample, rng_seed)
    observed = float(d.mean())
    low, high = _percentile_interval(reps, level)
    extreme = np.count_nonzero(np.abs(reps - observed) >= abs(observed))
    p_value = (1.0 + extreme) / (n_resamples + 1.0)
    ci = BootstrapCI(observed, low, high, level, n_resamples, resample)
    return PairedTest(delta=ci, p_value=float(p_value), n_seeds=d.shape[0], n_problems=d.shape[1])
