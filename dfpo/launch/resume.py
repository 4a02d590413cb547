"""A resumed run continues the run it resumes: its config is compared with the one that run recorded.

verl resumes from the newest checkpoint under ``trainer.default_local_dir`` whatever the relaunch's
settings are, so a rerun of a recipe with another learning rate, method or group size under the
same experiment name would silently continue the old run's weights and optimizer with the new
settings. ``python -m dfpo.main`` records the composed config of every launch that will train as
``<checkpoint dir>/dfpo_run_config.yaml`` (before Ray starts), and a launch that would resume from
a checkpoint there compares its own config with that record first: any difference outside the keys
that only manage the run (:data:`RUN_MANAGEMENT_KEYS`: how long it trains, how often it saves and
validates, logging, the Ray cluster) stops it before Ray, listing each key with both values and
what to do. ``dfpo.allow_config_change=true`` resumes anyway, saying the differences. A checkpoint
without a record (written by verl's own ``main_ppo``, or before this check existed) is resumed with
a note.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

RECORD_FILE = "dfpo_run_config.yaml"
# keys (and key prefixes, ending in '.') a resume may change: they manage the run, not what it computes
RUN_MANAGEMENT_KEYS = (
    "trainer.total_training_steps",
    "trainer.total_epochs",
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.val_before_train",
    "trainer.logger",
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep",
    "trainer.validation_data_dir",
    "trainer.rollout_data_dir",
    "ray_kwargs.",
    # dfpo's own keys (its record of the method and model, paths, the console log, the CPU
    # platform's requests): what they change in the run shows in verl's keys, which are compared
    "dfpo.",
)


class ResumeConfigChanged(ValueError):
    """The relaunch's config differs from the recorded one of the run it would resume."""


def flatten(container, prefix: str = "") -> dict[str, object]:
    """``{"a.b": value}`` for every leaf of a nested dict (an empty dict below the root is a leaf)."""
    out: dict[str, object] = {}
    if isinstance(container, dict):
        for key, value in container.items():
            out.update(flatten(value, f"{prefix}{key}."))
        if not container and prefix:
            out[prefix[:-1]] = {}
    else:
        out[prefix[:-1]] = container
    return out


def _compared(config) -> dict[str, object]:
    flat = flatten(OmegaConf.to_container(config, resolve=True))
    return {
        key: value
        for key, value in flat.items()
        if not any(
            key == managed or (managed.endswith(".") and key.startswith(managed)) for managed in RUN_MANAGEMENT_KEYS
        )
    }


def differences(recorded, current) -> dict[str, tuple[object, object]]:
    """Key -> (recorded value, current value) for every compared key that differs ('<absent>' where missing)."""
    old, new = _compared(recorded), _compared(current)
    return {
        key: (old.get(key, "<absent>"), new.get(key, "<absent>"))
        for key in sorted(old.keys() | new.keys())
        if old.get(key, "<absent>") != new.get(key, "<absent>")
    }


def _local(path: str) -> Path | None:
    return None if "://" in path else Path(os.path.abspath(path))


def check_resume_config(config, resume_folder: Path | None, say=print) -> None:
    """Compare ``config`` with the record in ``resume_folder`` (the folder of the checkpoint verl will
    resume from; None: nothing to resume). Raises ResumeConfigChanged naming every changed key."""
    if resume_folder is None:
        return
    record = resume_folder / RECORD_FILE
    if not record.is_file():
        say(
            f"dfpo: resuming from {resume_folder}, which has no {RECORD_FILE} (written by another launcher, or an "
            "older "
            "version): the run's settings cannot be compared with this launch's"
        )
        return
    changed = differences(OmegaConf.load(record), config)
    if not changed:
        return
    listing = "\n".join(f"  {key}: {old!r} -> {new!r}" for key, (old, new) in changed.items())
    if config.dfpo.get("allow_config_change", False):
        say(f"dfpo: resuming {resume_folder} with a changed config (dfpo.allow_config_change=true):\n{listing}")
        return
    raise ResumeConfigChanged(
        f"this launch would resume the run in {resume_folder}, recorded in {record}, with another config:\n{listing}\n"
        "verl would continue that run's weights and optimizer with these settings. Use another experiment name "
        "(EXPERIMENT_NAME, or trainer.experiment_name and trainer.default_local_dir) for a new run, restore the "
        "settings to continue the old one, set trainer.resume_mode=disable to start this one from scratch there, "
        "or dfpo.allow_config_change=true to resume with the change."
    )


def record_run_config(config) -> Path | None:
    """Write ``config`` (resolved) as the record of the run in ``trainer.default_local_dir``; returns
    its path (None for a remote checkpoint directory)."""
    folder = _local(str(config.trainer.default_local_dir))
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECORD_FILE
    partial = path.with_suffix(".yaml.partial")
    partial.write_text(OmegaConf.to_yaml(OmegaConf.create(OmegaConf.to_container(config, resolve=True))))
    os.replace(partial, path)
    return path
