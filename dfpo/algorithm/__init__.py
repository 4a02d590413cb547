"""The paper's maths (torch and numpy, no verl): W_i, its within-group transforms, the advantage, the loss.

:mod:`~dfpo.algorithm.transforms` (Min-Replace, Eq. 17; Orth-Proj, Eq. 18),
:mod:`~dfpo.algorithm.group_statistics` (W_i, Â_i and the per-response statistics),
:mod:`~dfpo.algorithm.group_weights` (the group step W̃ = T(W)), :mod:`~dfpo.algorithm.loss` (the
DFPO policy loss, per token and per row), :mod:`~dfpo.algorithm.cancellation_residual` (how much
of a shared token's gradient is left: the learning-tax diagnostics), :mod:`~dfpo.algorithm.advantage` (the
group-relative outcome advantage), :mod:`~dfpo.algorithm.shared_prefix` (each group's common
response prefix), :mod:`~dfpo.algorithm.group_ids` (group ids from verl's ``uid`` strings) and
:mod:`~dfpo.algorithm.collectives` (the few gathers the exact statistics need across data-parallel
ranks, through torch.distributed). Nothing here imports verl (tests/test_import_layers.py): :mod:`dfpo.verl`
plugs these into its trainer.
"""
