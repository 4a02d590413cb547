"""scripts/study_quickstart_seeds.py: the seeds it runs and the summary the learning test's bar is set from."""

from __future__ import annotations

import argparse

import pytest

from tests.script_modules import REPO_ROOT, load_script


def _study():
    return load_script("study_quickstart_seeds")


@pytest.mark.parametrize(
    "text, seeds", [("1-5", [1, 2, 3, 4, 5]), ("3", [3]), ("1,3,7", [1, 3, 7]), ("1-3,2,9", [1, 2, 3, 9])]
)
def test_seeds_are_ranges_and_lists(text, seeds):
    assert _study().parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "5-1", "1-b"])
def test_bad_seeds_are_refused_naming_the_part(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--seeds"):
        _study().parse_seeds(text)


def _run(seed, start, dfpo, low, met):
    held_out = {
        "start": {"avg@k": start, "ci95": [start - 0.03, start + 0.03]},
        "dfpo_min_replace": {"avg@k": dfpo, "ci95": [low, dfpo + 0.1]},
    }
    held_out.update(dfpo_gain=dfpo - start, target_met=met)
    return {"seed": seed, "quickstart": {"held_out": held_out}}


def test_the_summary_is_over_the_finished_seeds_and_names_the_failed_ones():
    runs = [_run(1, 0.10, 0.50, 0.38, True), {"seed": 2, "exit_status": 1}, _run(3, 0.12, 0.25, 0.15, False)]
    summary = _study().summary(runs)
    assert summary["seeds_finished"] == 2 and summary["seeds_failed"] == [2]
    assert summary["dfpo_gains"] == [0.4, 0.13] and summary["min_dfpo_gain"] == pytest.approx(0.13)
    assert summary["target_met_seeds"] == [1]
    assert summary["max_start"] == 0.12 and summary["min_dfpo_ci_low"] == 0.15


def test_the_memory_sampler_sees_a_child_process_allocate(tmp_path):
    """A child that holds ~300 MB for a while: the run's peak RSS (the tree's sum) includes it."""
    import subprocess
    import sys

    code = (
        "import time, sys; block = bytearray(300 * 2**20); block[::4096] = b'x' * len(block[::4096]); time.sleep(2.5)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"]
    )
    with _study().MemorySampler(parent.pid, interval=0.2) as memory:
        parent.wait()
    record = memory.record()
    assert record["samples"] >= 5
    assert record["run_rss_peak_gib"] > 0.29, record
    assert record["machine_used_peak_gib"] >= record["run_rss_peak_gib"] - 0.05, record
    assert record["largest_processes_at_the_run_peak_gib"][0][1] > 0.28, record


def test_the_learning_bar_is_set_from_the_seed_study():
    """tests/e2e/test_quickstart_cpu.py's bar against the study it names: five seeds of the
    quickstart's defaults (DFPO alone, ten steps, k = 8), every one finished; MIN_GAIN at most half
    the smallest gain and at least three times the widest half-width of a start's CI; the
    `target_met` assertion only if every seed met the bar. A bar raised past what the study shows,
    or a study at other settings, fails here."""
    import json

    from quickstart.pipeline import DEFAULT_K, DEFAULT_STEPS
    from tests.e2e import test_quickstart_cpu as learning

    study = json.loads((REPO_ROOT / "benchmarks" / "results" / learning.LEARNING_STUDY).read_text())
    runs = study["runs"]
    assert len(runs) >= 5 and study["summary"]["seeds_failed"] == [], study["summary"]
    for run in runs:
        quickstart = run["quickstart"]
        assert (quickstart["steps"], quickstart["held_out"]["k"]) == (DEFAULT_STEPS, DEFAULT_K), run["seed"]
        assert set(quickstart["training_seconds"]) == {"dfpo_min_replace"}, run["seed"]
    summary = study["summary"]
    assert learning.MIN_GAIN <= summary["min_dfpo_gain"] / 2, (learning.MIN_GAIN, summary["min_dfpo_gain"])
    half_widths = [
        (r["quickstart"]["held_out"]["start"]["ci95"][1] - r["quickstart"]["held_out"]["start"]["ci95"][0]) / 2
        for r in runs
    ]
    assert learning.MIN_GAIN >= 3 * max(half_widths), (learning.MIN_GAIN, half_widths)
    every_seed_met = len(summary["target_met_seeds"]) == len(runs)
    assert learning.TARGET_MET_IN_EVERY_SEED == every_seed_met, summary["target_met_seeds"]


def test_the_control_run_fails_the_learning_bar():
    """The negated reward's recorded run (docs/cpu.md) is below the bar the learning test asserts."""
    import json

    from tests.e2e import test_quickstart_cpu as learning

    control = json.loads((REPO_ROOT / "benchmarks" / "results" / learning.NEGATED_STUDY).read_text())
    assert control["runs"] and all("quickstart" in run for run in control["runs"])
    assert "negated_score.py" in control["runs"][0]["command"]
    for run in control["runs"]:
        assert run["quickstart"]["held_out"]["dfpo_gain"] < learning.MIN_GAIN, run["seed"]
