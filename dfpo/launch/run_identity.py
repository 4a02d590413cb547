"""A training run's identity: what its composed config is a function of, as one digest.

``python -m dfpo.main`` composes its config from three things only: the Hydra overrides of the
launch, dfpo's config files (``dfpo/config/**.yaml``: the trainer defaults, the method, model and
platform files) and verl's own ``ppo_trainer`` config (fixed by verl's version), resolved on the
launching machine. :func:`config_digest` hashes
exactly those, less what only names the run or places its outputs (its experiment name, wherever
it appears, the launch's time stamp in the file log's name, and the output root where it writes
and finds what it built there: an output root copied or moved elsewhere keeps its runs' names). Two launches
with the same digest compose the same config; anything that changes a composed value — a knob, a
method file, an extra override, the number of ranks, a dtype — changes it. Inputs a config does
not show (a dataset's content, a model built in code) are passed as ``extra``. What the launching
machine resolves by itself (a CPU rank's threads, from its cores) is not in the digest; a dtype is,
once the caller passes it as a knob (the quickstart does).

The quickstart names its runs with it, so that a rerun reuses a checkpoint or an evaluation only
when it would compute the same thing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from collections.abc import Iterable

from dfpo.launch import CONFIG_DIR
from dfpo.operations.training_logs import LAUNCH_STAMP

_LAUNCH_TIME = re.compile(LAUNCH_STAMP)  # the recipes' file log: <name>.<UTC time>.jsonl (dfpo_launch_time)
_NAME = "<experiment>"
_OUTPUT_ROOT = "<output root>"


def config_digest(
    overrides: Iterable[str], experiment_name: str, extra: Iterable[str] = (), output_root: str | None = None
) -> str:
    """sha256 (hex) of the launch's ``overrides`` (with ``experiment_name``, the launch time and
    ``output_root`` taken out), dfpo's config files, verl's version and ``extra``. What the run reads
    from under ``output_root`` (a model or data it built there) must be identified by ``extra``."""
    if not experiment_name:
        raise ValueError("config_digest needs the experiment name the overrides carry (it is taken out of them)")
    digest = hashlib.sha256()

    def add(text: str) -> None:
        digest.update(text.encode())
        digest.update(b"\0")

    for override in overrides:
        if output_root:
            override = override.replace(output_root.rstrip("/"), _OUTPUT_ROOT)
        add(_LAUNCH_TIME.sub(".<launch time>.jsonl", override.replace(experiment_name, _NAME)))
    for path in sorted(CONFIG_DIR.rglob("*.yaml")):
        add(path.relative_to(CONFIG_DIR).as_posix())
        add(path.read_text())
    add(f"verl=={importlib.metadata.version('verl')}")
    for item in extra:
        add(item)
    return digest.hexdigest()


def tracker_run_id(project_name: str, experiment_name: str, checkpoint_dir: str) -> str:
    """The experiment tracker's run id of an experiment (W&B's ``WANDB_RUN_ID``): the same for every
    launch that resumes it (a requeued SLURM job, a relaunch after a node loss), so that a resumed
    run continues its tracker run instead of starting a new one (verl#2783). It is a function of the
    project, the experiment name and the checkpoint folder (what ``resume_mode=auto`` resumes from);
    W&B allows ``[A-Za-z0-9_-]``, at most 64 characters: the experiment name so cleaned and cut,
    then 12 hex digits of the sha256 of all three."""
    if not project_name or not experiment_name or not checkpoint_dir:
        raise ValueError(
            "tracker_run_id needs trainer.project_name, trainer.experiment_name and trainer.default_local_dir"
        )
    digest = hashlib.sha256("\0".join((project_name, experiment_name, checkpoint_dir)).encode()).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9_-]+", "-", experiment_name).strip("-")[:51]
    return f"{readable}-{digest}" if readable else digest
