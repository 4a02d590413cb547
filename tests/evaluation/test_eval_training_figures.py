"""The training figure: the panels a reader of a training run looks at (reward, held-out accuracy, the
shared-token residual GSPO's weights would leave against the one measured on the gradient, the
shared-prefix share), never the transformed weights' residual (0 by construction) as a measurement,
no panel of the other diagnostics (they stay in the logs), and titles that do not run into each other."""

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


AFTER = [2e-8, 3e-8, 0.0, 1e-8, 2e-8]  # DFPO's transformed weights: rounding, by construction
MEASURED = [4.4e-8, 5.5e-8, 6.6e-8]  # the gradient's residual, distinct from AFTER


def make_log(shift: float = 0.0) -> dict:
    return {
        "critic/score/mean": series([0.1, 0.2, 0.3, 0.4, 0.5 + shift]),
        "actor/entropy": series([1.0, 0.9, 0.8, 0.7, 0.6]),
        "response_length/mean": series([8, 8, 7, 7, 7]),
        "actor/grad_norm": series([0.5, 0.4, 0.6, 0.3, 0.2]),
        "actor/dfpo/cancellation_residual_before": series([0.3, 0.2, 0.0, 0.25, 0.2]),
        "actor/dfpo/cancellation_residual_after": series(AFTER),
        # measured where a step had a whole group with a shared prefix to measure (steps 1, 2, 4 or 2, 4)
        "actor/dfpo/shared_token_grad_residual": series(
            MEASURED[-2:] if shift else MEASURED, [2, 4] if shift else [1, 2, 4]
        ),
        "actor/dfpo/prepass_forward": series([0.0] * 5),
        "actor/dfpo/negative_weight_frac": series([0.0] * 5),
        "staleness/policy_lag_mean": series([0.0] * 5),
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


RESIDUAL_TITLE = "Shared-token residual: GSPO's weights would leave (solid), measured on the gradient (dashed)"
STORY_TITLES = [
    "Training reward (mean score)",
    "Validation acc, digit_sums_test (mean@1)",
    RESIDUAL_TITLE,
    "Shared-prefix share of response tokens",
]


def assert_the_residual_panel_shows_measurements_only(figure, logs) -> None:
    """Per method a solid line of GSPO's weights' residual and a dashed one of the measured residual (its
    mean over the seeds that measured a step); no line of the transformed weights' residual (an identity)."""
    (panel,) = [ax for ax in figure.axes if ax.get_title().replace("\n", " ") == RESIDUAL_TITLE]
    assert panel.get_yscale() == "log"
    solid = [line for line in panel.lines if line.get_linestyle() == "-"]
    dashed = [line for line in panel.lines if line.get_linestyle() == "--"]
    assert len(solid) == len(dashed) == len(logs), [line.get_linestyle() for line in panel.lines]
    for method_logs, line in zip(logs.values(), dashed, strict=True):
        by_step: dict[int, list[float]] = {}
        for log in method_logs:
            measured = log["actor/dfpo/shared_token_grad_residual"]
            for step, value in zip(measured.steps, measured.values, strict=True):
                by_step.setdefault(int(step), []).append(float(value))
        assert list(line.get_xdata()) == sorted(by_step)
        assert list(line.get_ydata()) == pytest.approx([np.mean(by_step[s]) for s in sorted(by_step)])
    after = {v for v in AFTER if v > 0}
    for line in panel.lines:
        assert not after & {float(y) for y in line.get_ydata()}, "the transformed weights' residual is drawn"


def test_the_figure_draws_what_a_reader_looks_at_and_leaves_the_rest_in_the_logs(tmp_path, figures):
    logs = {"DFPO (Min-Replace)": [make_log(), make_log(0.1)], "GSPO": [make_log(-0.1)]}
    story = plots.training_story(logs, "SmolLM2-135M-Instruct", tmp_path / "story.png")
    assert story.read_bytes()[:4] == b"\x89PNG"
    (story_fig,) = figures
    titles = [ax.get_title().replace("\n", " ") for ax in story_fig.axes if ax.get_visible()]
    assert titles == STORY_TITLES  # no entropy, length, gradient norm, pre-pass, staleness or weight panels
    assert_the_residual_panel_shows_measurements_only(story_fig, logs)
    residual = story_fig.axes[2]
    # GSPO's weights: the step with nothing to cancel (0) is not drawn on a log axis
    assert all(len(line.get_xdata()) == 4 for line in residual.lines if line.get_linestyle() == "-")
    # the band of two seeds and the mean of the DFPO reward
    assert story_fig.axes[0].lines[0].get_ydata()[-1] == pytest.approx(0.55)
    assert list(story_fig.axes[3].lines[0].get_ydata()) == [0.5] * 5
    assert not hasattr(plots, "training_diagnostics")


def test_a_figure_drawing_the_transformed_weights_residual_as_the_measurement_fails(tmp_path, figures, monkeypatch):
    """Mutant: the figure reading ``cancellation_residual_after`` (the identity) where the measured
    residual is logged, as the figure before this check drew it ("after the transform", dashed)."""
    logs = {"DFPO (Min-Replace)": [make_log()]}
    monkeypatch.setattr(plots, "MEASURED_RESIDUAL", "actor/dfpo/cancellation_residual_after")
    plots.training_story(logs, "m", tmp_path / "story.png")
    (figure,) = figures
    with pytest.raises(AssertionError):
        assert_the_residual_panel_shows_measurements_only(figure, logs)


def test_titles_do_not_overlap(tmp_path, figures):
    log = make_log()
    for i in range(4):  # long validation sources: seven panels, three to a row
        log[f"val-core/a_rather_long_benchmark_source_name_{i}/acc/mean@4"] = series([0.1, 0.2], VAL_STEPS)
    plots.training_story({"DFPO (Min-Replace)": [log], "GSPO": [log]}, "SmolLM2-135M-Instruct", tmp_path / "f.png")
    (figure,) = figures
    renderer = figure.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in figure.axes if ax.get_visible()]
    assert len(boxes) == 8
    for first, second in itertools.combinations(boxes, 2):
        assert not first.overlaps(second)
    for ax in figure.axes:
        if ax.get_visible():
            assert ax.title.get_window_extent(renderer).x0 >= 0
            assert ax.title.get_window_extent(renderer).x1 <= figure.bbox.x1


def test_nothing_to_draw_gives_no_figure(tmp_path):
    assert plots.training_story({"GSPO": [{"x": series([1.0] * 5)}]}, "m", tmp_path / "s.png") is None
