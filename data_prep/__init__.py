"""Dataset preparation for DFPO: math and code problem sets to verl's RL parquet.

Two command-line entry points write verl-shaped parquet files
(``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``):

* ``python -m data_prep.math`` -- DAPO-Math-17k, DeepScaleR, AIME 2024/2025, HMMT Feb 2025,
  MATH-500;
* ``python -m data_prep.code`` -- LiveCodeBench ``code_generation_lite`` releases,
  DeepCoder-Preview and PrimeIntellect verifiable-coding-problems;

plus ``python -m data_prep.contamination`` to report overlap between prepared files.
The ground truth written here is the format scored by ``reward/``.
"""
