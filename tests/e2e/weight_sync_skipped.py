"""Test-only: a ``dfpo_sync`` run whose rollout never receives the trained weights.

tests/e2e/test_weight_sync_check_cpu.py launches its recipe with :data:`HOOK_OVERRIDE`, Ray's
``worker_process_setup_hook``: Ray runs :func:`install` in every worker process of the run before
any task, and once that process imports :mod:`dfpo.verl.trainer` (the TaskRunner does, to register
dfpo's trainers), ``DFPOSyncTrainer.on_step_end`` is replaced by :func:`on_step_end_without_weight_sync`.
The rollout then keeps sampling with the first weights: the broken run the weight-sync check
(:mod:`dfpo.operations.run_checks`) must fail. The other processes never import the trainer and pay
nothing; the production trainer carries no test branch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

TRAINER_MODULE = "dfpo.verl.trainer"
HOOK_OVERRIDE = "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=tests.e2e.weight_sync_skipped.install"
SAID = "dfpo test: the updated weights are NOT synced into the rollout (a test's broken run)"


def on_step_end_without_weight_sync(self) -> None:
    """``DFPOSyncTrainer.on_step_end`` without verl's weight sync (``PPOTrainerSync.on_step_end``'s
    ``checkpoint_manager.update_weights``, which also wakes the replicas it put to sleep after
    sampling: only that is kept)."""
    print(SAID, flush=True)
    self.stop_if_preempted()
    self.checkpoint_manager.wake_up_replicas()


def skip_weight_sync(trainer_module: ModuleType) -> None:
    trainer_module.DFPOSyncTrainer.on_step_end = on_step_end_without_weight_sync


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds :data:`TRAINER_MODULE` as usual, then runs :func:`skip_weight_sync` right after it ran."""

    def find_spec(self, name, path=None, target=None):
        if name != TRAINER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            skip_weight_sync(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    """Ray's ``worker_process_setup_hook``: skip the weight sync of this process's ``DFPOSyncTrainer``."""
    module = sys.modules.get(TRAINER_MODULE)
    if module is not None:
        skip_weight_sync(module)
    elif not any(isinstance(finder, _PatchAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
