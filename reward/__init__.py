"""Rule-based rewards for DFPO runs on verl 0.9.1: math answers and LiveCodeBench-style code.

The verl entry point is :func:`reward.score.compute_score` (and ``compute_score_async``);
select it with ``reward.custom_reward_function.path=<repo>/reward/score.py``.

Modules, one responsibility each:

* :mod:`reward.sources` -- the ``data_source`` names (shared with ``data_prep``);
* :mod:`reward.options` -- the ``reward_kwargs`` a run may set;
* :mod:`reward.outcome` -- verdicts, reasons, score conventions, the returned dict;
* :mod:`reward.math_answer` -- final-answer extraction and the exact comparison path;
* :mod:`reward.math_numbers` -- exact values of numeric answers (rationals, square roots, pi);
* :mod:`reward.math_verify_pool` / :mod:`reward.math_verify_worker` -- math-verify in
  worker processes forked from a warm server, each call bounded from its start;
* :mod:`reward.math_scoring` -- math scoring (extraction, exact path, cache, pool);
* :mod:`reward.sandbox` -- isolation for untrusted programs (``python -m reward.sandbox --check``);
* :mod:`reward.code_harness` -- the test runner executed inside the sandbox (LiveCodeBench's
  harness semantics);
* :mod:`reward.code_tests` -- LiveCodeBench test specification, running and comparison;
* :mod:`reward.sandbox_fusion` -- optional SandboxFusion HTTP backend.

Importing the package is cheap: nothing is started until the first score is computed.
"""
