"""tests/e2e/weight_sync_skipped.py, the test-only hook behind the weight-sync check's broken run
(tests/e2e/test_weight_sync_check_cpu.py, serial): without Ray or a run, in a fresh interpreter as
Ray's ``worker_process_setup_hook`` runs it — before the trainer module is imported."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e import weight_sync_skipped
from tests.e2e.recipe_runs import REPO_ROOT

SCRIPT = """
import sys
from ray._private import ray_constants
from ray._private.runtime_env.setup_hook import load_and_execute_setup_hook, upload_worker_process_setup_hook_if_needed

# what ray.init does with the runtime env's hook, then each of its workers before any task
runtime_env = upload_worker_process_setup_hook_if_needed({"worker_process_setup_hook": sys.argv[1]}, None)
error = load_and_execute_setup_hook(runtime_env["env_vars"][ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR])
assert error is None, error
from tests.e2e import weight_sync_skipped as hook
assert "dfpo.verl.trainer" not in sys.modules  # the hook itself imports nothing heavy

from dfpo.verl import trainer
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

assert TRAINER_REGISTRY["dfpo_sync"] is trainer.DFPOSyncTrainer
assert trainer.DFPOSyncTrainer.on_step_end is hook.on_step_end_without_weight_sync
for other in (trainer.DFPOColocateAsyncTrainer, trainer.DFPOSeparateAsyncTrainer):
    assert other.on_step_end is trainer._DFPOTrainer.on_step_end, other

calls = []
class Manager:
    def wake_up_replicas(self):
        calls.append("wake_up_replicas")
    def update_weights(self, step):
        calls.append("update_weights")
class Stub:
    checkpoint_manager = Manager()
    def stop_if_preempted(self):
        calls.append("stop_if_preempted")
trainer.DFPOSyncTrainer.on_step_end(Stub())
assert calls == ["stop_if_preempted", "wake_up_replicas"], calls
"""


def test_the_hook_replaces_only_the_sync_trainers_weight_sync_once_the_trainer_is_imported():
    hook = weight_sync_skipped.HOOK_OVERRIDE.split("=", 1)[1]
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, hook], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert weight_sync_skipped.SAID in run.stdout
