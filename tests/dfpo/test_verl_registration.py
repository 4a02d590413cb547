"""`import verl` alone registers dfpo — in a fresh interpreter and inside a Ray worker process."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = (
    "import verl\n"
    "from verl.trainer.ppo.core_algos import get_policy_loss_fn, get_adv_estimator_fn\n"
    "loss = get_policy_loss_fn('dfpo'); adv = get_adv_estimator_fn('dfpo')\n"
    "print(loss.__module__, adv.__module__)\n"
)


def test_fresh_interpreter_import_verl_registers_dfpo():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["dfpo.verl.plugin", "dfpo.algorithm.advantage"]


def test_importing_dfpo_alone_imports_no_verl_module():
    """What dfpo/__init__.py promises for its public tensor functions."""
    code = "import sys, dfpo\nprint(sorted(m for m in sys.modules if m == 'verl' or m.startswith('verl.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_plugins_disabled_then_external_modules_fallback(tmp_path):
    import os

    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none")
    off = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300, env=env)
    assert off.returncode != 0 and "Unsupported loss mode: dfpo" in off.stderr
    env["VERL_USE_EXTERNAL_MODULES"] = "dfpo.verl.plugin"
    on = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300, env=env)
    assert on.returncode == 0, on.stderr


@pytest.mark.slow
def test_ray_worker_process_sees_dfpo():
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:

        @ray.remote(num_cpus=1)
        def registered_in_worker():
            import os

            import verl  # noqa: F401
            from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY

            return os.getpid(), "dfpo" in POLICY_LOSS_REGISTRY, "dfpo" in ADV_ESTIMATOR_REGISTRY

        pid, has_loss, has_adv = ray.get(registered_in_worker.remote(), timeout=240)
    finally:
        ray.shutdown()
    import os

    assert pid != os.getpid()
    assert has_loss and has_adv
