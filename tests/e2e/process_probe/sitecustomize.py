"""A probe for the multi-node test: which processes of a Ray cluster ran verl, and how.

tests/e2e/test_multi_node_cpu.py starts every Ray node with this directory on ``PYTHONPATH`` and
``DFPO_PROCESS_PROBE_DIR`` set, so every Python process the nodes start (Ray's workers, and the
processes they spawn, with the recipe driver) imports this file at start-up. Once ``import verl``
has finished in a process — verl loads its ``verl.plugins`` entry points, ours among them, inside
that import — the probe writes one JSON record to ``$DFPO_PROCESS_PROBE_DIR/<pid>.json``: the
process, its Ray node and job (for Ray workers), ``VERL_PLATFORM``, and whether dfpo's plugin is
loaded, its ``dfpo`` loss registered in verl and its CPU backend activated. Processes that never
import verl write nothing. Nothing else is changed; another ``sitecustomize`` on ``sys.path`` is
still run.

With ``DFPO_PROCESS_PROBE_START=1`` as well (tests/e2e/test_slurm_cpu.py), every Python process also
writes ``start-<pid>.json`` as it starts, before anything it runs could change it: the CPUs it may
run on (``os.sched_getaffinity``), ``CUDA_VISIBLE_DEVICES`` and the SLURM job, step and restart
count it runs in.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_RECORDS = os.environ.get("DFPO_PROCESS_PROBE_DIR", "")


def _ray_context() -> dict:
    ray = sys.modules.get("ray")
    if ray is None:
        return {}
    try:
        if not ray.is_initialized():
            return {}
        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "job_id": context.get_job_id(),
            "worker_mode": int(context.worker.mode),
        }
    except Exception as error:  # a record without the node is still a record
        return {"ray_context_error": repr(error)}


def _record() -> None:
    plugin = sys.modules.get("dfpo.verl.plugin")
    activate = sys.modules.get("cpu_backend.activate")
    registered = False
    try:
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

        registered = "dfpo" in POLICY_LOSS_REGISTRY
    except Exception:
        pass
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv[:4],
        "verl_platform": os.environ.get("VERL_PLATFORM"),
        "plugin_loaded": plugin is not None,
        "dfpo_loss_registered": registered,
        "cpu_backend_active": bool(getattr(activate, "_ACTIVATED", False)),
        **_ray_context(),
    }
    path = os.path.join(_RECORDS, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


class _AfterVerlImport(importlib.abc.MetaPathFinder):
    """Finds ``verl`` as usual, then runs :func:`_record` right after its ``__init__`` ran."""

    def find_spec(self, name, path=None, target=None):
        if name != "verl":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_record(module):
            exec_module(module)
            try:
                _record()
            except Exception as error:  # never break the process under test
                print(f"dfpo process probe: no record: {error!r}", file=sys.stderr)

        spec.loader.exec_module = exec_and_record
        return spec


def _record_start() -> None:
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv,
        "cpus": sorted(os.sched_getaffinity(0)),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "rocr_visible_devices": os.environ.get("ROCR_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_step_id": os.environ.get("SLURM_STEP_ID"),
        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT", "0"),
    }
    path = os.path.join(_RECORDS, f"start-{os.getpid()}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


if _RECORDS and os.path.isdir(_RECORDS):
    sys.meta_path.insert(0, _AfterVerlImport())
    if os.environ.get("DFPO_PROCESS_PROBE_START") == "1":
        try:
            _record_start()
        except Exception as error:  # never break the process under test
            print(f"dfpo process probe: no start record: {error!r}", file=sys.stderr)


def _run_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this file shadows, if the interpreter has one."""
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == _HERE:
            continue
        candidate = os.path.join(entry or os.curdir, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_dfpo_shadowed_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_run_next_sitecustomize()
