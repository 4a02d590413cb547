"""The paper's maths, torch only: W_i and its within-group transforms, the advantage, the loss.

:mod:`~dfpo.algorithm.transforms` (Min-Replace, Eq. 17; Orth-Proj, Eq. 18),
:mod:`~dfpo.algorithm.group_statistics` (W_i, the transformed W̃_i, per row and per group),
:mod:`~dfpo.algorithm.loss` (the DFPO policy loss), :mod:`~dfpo.algorithm.advantage` (the
group-relative outcome advantage), :mod:`~dfpo.algorithm.shared_prefix` (each group's common
response prefix). Nothing here imports verl: :mod:`dfpo.verl` plugs these into its trainer.
"""
