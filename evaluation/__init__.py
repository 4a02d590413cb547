"""Evaluation and reporting for DFPO runs.

* ``python -m evaluation.generate``: sample k responses per problem with vLLM or
  transformers, score them with ``reward/``, write per-sample JSONL and a summary (resumable).
* ``python -m evaluation.report``: combine runs (models x methods x seeds) into the paper's
  tables (mean over seeds with 95% bootstrap CIs, paired bootstrap tests against a baseline,
  group-size deltas) and plots (training curves from verl's logs, accuracy bars).

Importing this package is cheap: heavy libraries load inside the functions that need them.
"""
