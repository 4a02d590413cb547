"""The training figures: the story panels a reader wants first, the other dfpo/ diagnostics in a
second figure, and titles that do not run into each other."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dfpo.operations.training_logs import MetricSeries
from evaluation import plots

STEPS = np.arange(1, 6)
VAL_STEPS = np.array([0, 5])


def series(values, steps=STEPS):
    return MetricSeries(np.asarray(steps), np.asarray(values, dtype=float))


def make_log(shift: float = 0.0) -> dict:
    return {
        "critic/score/mean": series([0.1, 0.2, 0.3, 0.4, 0.5 + shift]),
        "actor/entropy": series([1.0, 0.9, 0.8, 0.7, 0.6]),
        "response_length/mean": series([8, 8, 7, 7, 7]),
        "actor/grad_norm": series([0.5, 0.4, 0.6, 0.3, 0.2]),
        "actor/dfpo/cancellation_residual_before": series([0.3, 0.2, 0.0, 0.25, 0.2]),
        "actor/dfpo/cancellation_residual_after": series([2e-8, 3e-8, 0.0, 1e-8, 2e-8]),
        "actor/dfpo/weight_asymmetry_before": series([0.1] * 5),
        "actor/dfpo/shared_prefix_token_frac": series([0.5] * 5),
        "val-core/digit_sums_test/acc/mean@1": series([0.3, 0.6 + shift], VAL_STEPS),
        "val-core/digit_sums_test/acc/best@4/mean": series([0.5, 0.7], VAL_STEPS),
        "val-core/digit_sums_test/reward/mean@1": series([0.3, 0.6], VAL_STEPS),
        "val-aux/digit_sums_test/score/mean@1": series([0.3, 0.6], VAL_STEPS),
    }


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures the functions draw, kept open for inspection."""
    import matplotlib.pyplot as plt

    close = plt.close
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for figure in kept:
        close(figure)


def test_validation_keys_are_the_mean_accuracy_per_source():
    assert plots.validation_keys(make_log()) == ["val-core/digit_sums_test/acc/mean@1"]
    only_reward = {"val-core/x/reward/mean@4": series([0.1], [0])}
    assert plots.validation_keys(only_reward) == ["val-core/x/reward/mean@4"]


def test_story_figure_draws_the_story_and_diagnostics_the_rest(tmp_path, figures):
    logs = {"DFPO (Min-Replace)": [make_log(), make_log(0.1)], "GSPO": [make_log(-0.1)]}
    story = plots.training_story(logs, "SmolLM2-135M-Instruct", tmp_path / "story.png")
    diagnostics = plots.training_diagnostics(logs, "SmolLM2-135M-Instruct", tmp_path / "diag.png")
    assert story.read_bytes()[:4] == diagnostics.read_bytes()[:4] == b"\x89PNG"
    story_fig, diag_fig = figures
    titles = [ax.get_title().replace("\n", " ") for ax in story_fig.axes if ax.get_visible()]
    assert titles == [
        "Training reward (mean score)",
        "Validation acc, digit_sums_test (mean@1)",
        "Learning-tax residual: before (solid) / after (dashed) the transform",
        "Entropy of the policy (per token)",
        "Response length (tokens, mean)",
        "Gradient norm (before clipping)",
    ]
    residual = story_fig.axes[2]
    assert residual.get_yscale() == "log"
    # before and after for each method; the step with nothing to cancel (0) is not drawn on a log axis
    assert len(residual.lines) == 4 and all(len(line.get_xdata()) == 4 for line in residual.lines)
    # the band of two seeds and the mean of the DFPO reward
    assert story_fig.axes[0].lines[0].get_ydata()[-1] == pytest.approx(0.55)
    diag_titles = {ax.get_title().replace("\n", "") for ax in diag_fig.axes if ax.get_visible()}
    assert diag_titles == {"actor/dfpo/shared_prefix_token_frac", "actor/dfpo/weight_asymmetry_before"}


@pytest.mark.parametrize("which", ["story", "diagnostics"])
def test_titles_do_not_overlap(tmp_path, figures, which):
    log = make_log()
    for i in range(8):  # long metric names, as the dfpo/ diagnostics have
        log[f"actor/dfpo/staleness/a_rather_long_metric_name_number_{i}"] = series([0.1] * 5)
    draw = plots.training_story if which == "story" else plots.training_diagnostics
    draw({"DFPO (Min-Replace)": [log], "GSPO": [log]}, "SmolLM2-135M-Instruct", tmp_path / "f.png")
    (figure,) = figures
    renderer = figure.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in figure.axes if ax.get_visible()]
    assert len(boxes) >= 6
    for first, second in itertools.combinations(boxes, 2):
        assert not first.overlaps(second)
    for ax in figure.axes:
        if ax.get_visible():
            assert ax.title.get_window_extent(renderer).x0 >= 0
            assert ax.title.get_window_extent(renderer).x1 <= figure.bbox.x1


def test_nothing_to_draw_gives_no_figure(tmp_path):
    assert plots.training_story({"GSPO": [{"x": series([1.0] * 5)}]}, "m", tmp_path / "s.png") is None
    assert (
        plots.training_diagnostics({"GSPO": [{"critic/score/mean": series([1.0] * 5)}]}, "m", tmp_path / "d.png")
        is None
    )
