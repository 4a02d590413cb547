"""The compared methods as data: ``dfpo/config/method/<name>.yaml``, one Hydra config group file each.

``python -m dfpo.main method=<name>`` composes the file over verl's ``ppo_trainer`` (the recipes pass
it for you); this module reads the same files for everything else that needs a method's verl
settings without composing a whole trainer config (the demo). A new method is one new file there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from dfpo.launch import CONFIG_DIR

METHOD_DIR = CONFIG_DIR / "method"
_NAME = re.compile(r"[a-z0-9_]+")
_VERL_DEFAULT_CLIP = 0.2  # verl 0.9.1's actor clip_ratio_low / clip_ratio_high default


def method_names() -> tuple[str, ...]:
    """Every method with a config file, sorted."""
    return tuple(sorted(p.stem for p in METHOD_DIR.glob("*.yaml")))


@dataclass(frozen=True)
class MethodSelection:
    """The verl settings one method file selects."""

    name: str
    adv_estimator: str
    loss_mode: str
    loss_agg_mode: str
    clip_ratio_low: float = _VERL_DEFAULT_CLIP
    clip_ratio_high: float = _VERL_DEFAULT_CLIP
    dfpo_options: dict[str, Any] = field(default_factory=dict)
    """The ``dfpo_*`` keys of ``actor_rollout_ref.actor.policy_loss`` it sets."""


def load_method(name: str) -> MethodSelection:
    """The selection of ``dfpo/config/method/<name>.yaml``; an unknown name or a file without the
    keys every method must set raises ValueError naming the file."""
    path = METHOD_DIR / f"{name}.yaml"
    if not _NAME.fullmatch(name) or not path.is_file():
        raise ValueError(f"unknown method {name!r}: no file {path}; methods: {', '.join(method_names())}")
    config = OmegaConf.load(path)
    try:
        actor = config.actor_rollout_ref.actor
        policy_loss = actor.policy_loss
        selection = MethodSelection(
            name=name,
            adv_estimator=str(config.algorithm.adv_estimator),
            loss_mode=str(policy_loss.loss_mode),
            loss_agg_mode=str(actor.loss_agg_mode),
            clip_ratio_low=float(actor.get("clip_ratio_low", _VERL_DEFAULT_CLIP)),
            clip_ratio_high=float(actor.get("clip_ratio_high", _VERL_DEFAULT_CLIP)),
            dfpo_options={k: v for k, v in OmegaConf.to_container(policy_loss).items() if k.startswith("dfpo_")},
        )
    except Exception as error:  # a missing key: omegaconf's error names it
        raise ValueError(
            f"{path}: a method file must set algorithm.adv_estimator and actor_rollout_ref.actor's "
            f"loss_agg_mode and policy_loss.loss_mode ({error})"
        ) from error
    if config.get("dfpo", {}).get("method") != name:
        raise ValueError(f"{path}: set dfpo.method: {name} (the name runs and reports use)")
    return selection
