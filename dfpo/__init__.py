"""DFPO — Drift-Fixing Policy Optimization (arXiv 2604.13088) for verl 0.9.1.

Public API (pure tensor functions: importing dfpo imports no verl module, but it requires the
supported verl release to be installed — :func:`dfpo.verl_version.check_verl_version`):

* :func:`apply_group_transform` — the within-group transforms Min-Replace (Eq. 17) and
  Orth-Proj (Eq. 18), plus the ablations ``scale`` and ``none``.
* :func:`compute_dfpo_loss` — the stop-gradient, clipping-free DFPO policy loss.
* :func:`compute_dfpo_outcome_advantage` — the group-relative advantage with exact zero sum.

Installing this package registers ``dfpo`` in verl's policy-loss and advantage-estimator registries
in every process that imports verl (entry point ``verl.plugins``: :mod:`dfpo.verl_plugin`).
"""

from dfpo.verl_version import SUPPORTED_VERL_VERSION, check_verl_version

check_verl_version()

from dfpo.advantage import compute_dfpo_outcome_advantage  # noqa: E402
from dfpo.group_statistics import SCOPES  # noqa: E402
from dfpo.loss import compute_dfpo_loss  # noqa: E402
from dfpo.transforms import TRANSFORMS, apply_group_transform  # noqa: E402

__all__ = [
    "SCOPES",
    "SUPPORTED_VERL_VERSION",
    "TRANSFORMS",
    "apply_group_transform",
    "compute_dfpo_loss",
    "compute_dfpo_outcome_advantage",
]
