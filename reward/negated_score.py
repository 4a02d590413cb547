"""``reward/score.py`` with the training signal negated: the control run showing that the CPU
quickstart's learning is the reward's doing and that its learning test can fail.

``score`` becomes ``1 - score`` (binary rewards), which negates every group-normalised advantage
exactly: Â_i = (r_i - mean_j r_j) / std_j r_j turns into -Â_i. ``acc`` is left as it is, so verl's
validation still reports the true held-out accuracy. Selected by
``python scripts/study_quickstart_seeds.py --negate`` (the recorded control run) and by
``DFPO_LEARNING_TEST_NEGATE=1 bash scripts/test.sh tests/e2e/test_quickstart_cpu.py``, whose learning
test must then fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reward.score import compute_score as _compute_score  # noqa: E402


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    result = _compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    return {**result, "score": 1.0 - result["score"]}
