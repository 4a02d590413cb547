"""A reward for the end-to-end test whose scoring fails on purpose for some problems.

Loaded by verl's reward workers from its file path (``reward.custom_reward_function.path``). It
is the product's ``reward.score.compute_score``, with the scorer underneath it
(``reward.score.score_response``) replaced so that it raises for some ground truths and never
returns for others — inside the product's own guard, as an unforeseen scorer fault would be.
"""

from __future__ import annotations

import time

import reward.score as score

RAISES_FOR = {"0", "1"}  # 0+0 is held out (validation), 0+1 and 1+0 are trained on
HANGS_FOR = {"7", "8"}  # 4+3 is held out, 3+4 and 4+4 are trained on

_real_score_response = score.score_response


def _faulty_score_response(kind, solution_str, ground_truth, options):
    if str(ground_truth) in RAISES_FOR:
        raise RuntimeError(f"injected scorer fault for ground truth {ground_truth!r}")
    if str(ground_truth) in HANGS_FOR:
        time.sleep(3600)
    return _real_score_response(kind, solution_str, ground_truth, options)


score.score_response = _faulty_score_response
compute_score = score.compute_score
