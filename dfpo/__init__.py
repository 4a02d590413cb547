"""DFPO (arXiv 2604.13088, "Token Gradient Cancellation"; the paper never expands the acronym) for verl 0.9.1.

Public API (pure tensor functions: importing dfpo imports no verl module, but it requires the
supported verl release to be installed — :func:`dfpo.verl.version.check_verl_version`):

* :func:`apply_group_transform` — the within-group transforms Min-Replace (Eq. 17) and
  Orth-Proj (Eq. 18), plus the ablations ``scale`` and ``none``.
* :func:`compute_dfpo_loss` — the stop-gradient, clipping-free DFPO policy loss.
* :func:`compute_dfpo_outcome_advantage` — the group-relative advantage with exact zero sum.

Installing this package registers ``dfpo`` in verl's policy-loss and advantage-estimator registries
in every process that imports verl (entry point ``verl.plugins``: :mod:`dfpo.verl.plugin`).
"""

from dfpo.verl.version import SUPPORTED_VERL_VERSION, check_verl_version

check_verl_version()

# The public functions import torch; they are loaded on first use, so that the launchers
# (python -m dfpo.launch.recipe, dfpo.launch.recipe_knobs) start without it.
_PUBLIC = {
    "compute_dfpo_outcome_advantage": "dfpo.algorithm.advantage",
    "SCOPES": "dfpo.algorithm.group_statistics",
    "compute_dfpo_loss": "dfpo.algorithm.loss",
    "TRANSFORMS": "dfpo.algorithm.transforms",
    "apply_group_transform": "dfpo.algorithm.transforms",
}


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'dfpo' has no attribute {name!r}")


__all__ = [
    "SCOPES",
    "SUPPORTED_VERL_VERSION",
    "TRANSFORMS",
    "apply_group_transform",
    "compute_dfpo_loss",
    "compute_dfpo_outcome_advantage",
]
