"""The CPU backend's lazy activation: each piece in place once verl's module it touches is imported.

The backend's verl plugin runs in every process of a CPU run (about a dozen per launch). It hooks
each registration and patch to the import of its verl module instead of importing those modules
(verl's checkpoint engines pull in vLLM's distributed package: about 2 s a process on 2 cores).
These tests hold both halves: ``import verl`` stays light, and whichever way a process then reaches
a module, what the backend does there is done before verl can look it up or copy it.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import types

import pytest

from cpu_backend import activate as local_activate
from cpu_backend import import_hooks
from tests.cpu.subprocess_probe import run_probe

CPU = {"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_PLUGINS": "auto"}
HEAVY = ["verl.checkpoint_engine", "verl.workers.engine_workers", "verl.workers.engine", "vllm"]

STATE = r"""
import json, sys

def state():
    def loaded(name):
        return sys.modules.get(name)
    out = {}
    engine = loaded("verl.workers.engine")
    if engine is not None:
        out["cpu_engine"] = "cpu" in engine.EngineRegistry._engines["language_model"].get("fsdp2", {})
    workers = loaded("verl.workers.engine_workers")
    if workers is not None:
        out["gloo"] = getattr(workers.initialize_global_process_group_ray, "__dfpo_gloo__", False)
    replica = loaded("verl.workers.rollout.replica")
    if replica is not None:
        out["local_replica"] = "local" in replica.RolloutReplicaRegistry._registry
    base = loaded("verl.workers.rollout.base")
    if base is not None:
        out["local_adapter"] = ("local", "async") in base._ROLLOUT_REGISTRY
    checkpoint = loaded("verl.checkpoint_engine.base")
    if checkpoint is not None:
        out["local_checkpoint_engine"] = "local" in checkpoint.CheckpointEngineRegistry._registry
    fsdp_utils = loaded("verl.utils.fsdp_utils")
    if fsdp_utils is not None:
        out["copies"] = getattr(fsdp_utils.fsdp2_sharded_save_to_cpu, "__dfpo_copies__", False)
    ulysses = loaded("verl.utils.ulysses")
    if ulysses is not None:
        out["gloo_all_to_all"] = ulysses.all_to_all_tensor.__module__ == "cpu_backend.gloo_all_to_all"
    monkey_patch = loaded("verl.models.transformers.monkey_patch")
    if monkey_patch is not None:
        out["varlen_kernel"] = monkey_patch._flash_attention_forward.__module__ == "cpu_backend.varlen_attention"
    return out
"""

EVERY_PIECE = {
    "cpu_engine": True,
    "gloo": True,
    "local_replica": True,
    "local_adapter": True,
    "local_checkpoint_engine": True,
    "copies": True,
    "gloo_all_to_all": True,
    "varlen_kernel": True,
}


def _probe(body: str, env: dict[str, str] = CPU) -> dict:
    return run_probe(STATE + textwrap.dedent(body), env)


@pytest.mark.slow
def test_import_verl_stays_light_and_each_module_imported_later_gets_its_pieces():
    """In one fresh CPU process: ``import verl`` imports none of the heavy modules and leaves a hook
    per module; then the checkpoint-engine package, then the engine workers (which pull in the
    engine, the rollout registries, fsdp utils), then every module: each piece verl has is in
    place at each step, and no hook is left. Mutants: activate_on_import() activating eagerly ->
    the heavy modules are loaded; a module dropped from ON_IMPORT -> its piece is missing."""
    found = _probe(
        f"""
        import importlib, verl
        from cpu_backend import activate, import_hooks
        steps = {{"import verl": {{
            "active": activate._ACTIVATED,
            "heavy": [name for name in {HEAVY!r} if name in sys.modules],
            "hooked": sorted(hook.name for hook in import_hooks.pending()),
            "platform_registered": sys.modules["verl.plugin.platform"].PlatformRegistry.get("cpu") is not None,
        }}}}
        for module in ["verl.checkpoint_engine", "verl.workers.engine_workers", *activate.ON_IMPORT]:
            importlib.import_module(module)
            steps[module] = state()
        steps["pending"] = [hook.name for hook in import_hooks.pending()]
        print(json.dumps(steps))
        """
    )
    assert found.pop("import verl") == {
        "active": True,
        "heavy": [],
        "hooked": sorted(local_activate.ON_IMPORT),
        "platform_registered": True,
    }
    assert found["verl.checkpoint_engine"]["local_checkpoint_engine"] is True
    assert found["verl.workers.engine_workers"]["gloo"] is True
    assert found.pop("pending") == []
    for module, state in found.items():
        assert state == {piece: True for piece in state}, (module, state)
    assert found["verl.experimental.separation.engine_workers"] == EVERY_PIECE


@pytest.mark.slow
def test_the_other_ways_in_and_a_changed_internal_failing_every_import_and_the_driver():
    """In one fresh CPU process, a module at a time: one named in the first import statement (the
    plugin runs on ``import verl`` before it), packages whose ``__init__`` import the module while
    partly initialized (``verl.workers.rollout``, ``verl.models.transformers``): each piece is in
    place. Then a verl whose engine_workers changed (its check made to fail before the plugin
    loaded): its import raises with the name, again at the next import (the hook stays while its
    callback fails), and the driver's activate() raises it too. Mutants: the callback run before
    the module's code -> the import fails (no registry yet); the hook leaving sys.meta_path before
    its callback ran -> the second import returns engine_workers unpatched; activate() without its
    own check -> the driver does not raise."""
    found = _probe(
        """
        from cpu_backend import verl_internals  # imports nothing of verl

        def changed(module):
            raise verl_internals.VerlInternalsChanged("the changed verl.workers.engine_workers")

        verl_internals.CHECKS["verl.workers.engine_workers"] = changed
        import verl.utils.ulysses
        import importlib
        steps = {"verl.utils.ulysses": state()}
        for module in ["verl.models.transformers", "verl.utils.fsdp_utils", "verl.workers.rollout",
                       "verl.workers.engine"]:
            importlib.import_module(module)
            steps[module] = state()
        errors = []
        for attempt in range(2):
            try:
                import verl.workers.engine_workers
                errors.append(None)
            except verl_internals.VerlInternalsChanged as error:
                errors.append(str(error))
        from cpu_backend import activate
        try:
            activate.activate()
            errors.append(None)
        except verl_internals.VerlInternalsChanged as error:
            errors.append(str(error))
        steps["errors"] = errors
        steps["engine_workers imported"] = "verl.workers.engine_workers" in sys.modules
        print(json.dumps(steps))
        """
    )
    assert found.pop("errors") == ["the changed verl.workers.engine_workers"] * 3
    assert found.pop("engine_workers imported") is False
    assert found["verl.utils.ulysses"] == {"gloo_all_to_all": True}
    assert found["verl.workers.rollout"]["local_replica"] and found["verl.workers.rollout"]["local_adapter"]
    assert found["verl.workers.engine"]["cpu_engine"]
    for module, state in found.items():
        assert state == {piece: True for piece in state}, (module, state)


# ---- the hook itself, on a module of its own ---------------------------------------------------


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``hooked_pkg`` with a module ``target`` defining ``VALUE = 1``, importable from tmp_path."""
    root = tmp_path / "hooked_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "target.py").write_text("VALUE = 1\n")
    (root / "copier.py").write_text("from hooked_pkg.target import VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "hooked_pkg"
    for name in [name for name in sys.modules if name.split(".")[0] == "hooked_pkg"]:
        del sys.modules[name]
    for hook in import_hooks.pending():
        if hook.name.startswith("hooked_pkg"):
            sys.meta_path.remove(hook)


def test_the_callback_runs_after_the_module_and_before_any_copy_of_its_names(package):
    """Mutant: the callback run before exec_module -> it sees no VALUE and the copy keeps 1."""
    seen = []

    def patch(module: types.ModuleType) -> None:
        seen.append(module.VALUE)
        module.VALUE = 2

    import_hooks.after_import("hooked_pkg.target", patch)
    assert "hooked_pkg.target" not in sys.modules
    copier = importlib.import_module("hooked_pkg.copier")
    assert (seen, copier.VALUE, sys.modules["hooked_pkg.target"].VALUE) == ([1], 2, 2)
    assert import_hooks.pending() == [hook for hook in import_hooks.pending() if hook.name != "hooked_pkg.target"]


def test_a_module_already_imported_is_handled_at_once_and_no_hook_is_left(package):
    target = importlib.import_module("hooked_pkg.target")
    calls = []
    import_hooks.after_import("hooked_pkg.target", calls.append)
    assert calls == [target]
    assert not [hook for hook in import_hooks.pending() if hook.name == "hooked_pkg.target"]


def test_the_hook_is_one_shot_and_not_added_twice(package):
    calls = []
    import_hooks.after_import("hooked_pkg.target", calls.append)
    import_hooks.after_import("hooked_pkg.target", calls.append)
    assert len([hook for hook in import_hooks.pending() if hook.name == "hooked_pkg.target"]) == 1
    importlib.import_module("hooked_pkg.target")
    del sys.modules["hooked_pkg.target"]
    importlib.import_module("hooked_pkg.target")  # a fresh import: the hook is gone
    assert len(calls) == 1
    assert not [hook for hook in import_hooks.pending() if hook.name == "hooked_pkg.target"]


def test_a_failing_callback_fails_the_import_every_time(package):
    """Mutant: the hook removed before its callback ran -> the second import returns the unpatched module."""

    def refuse(module):
        raise ImportError("refused")

    import_hooks.after_import("hooked_pkg.target", refuse)
    for _ in range(2):
        with pytest.raises(ImportError, match="refused"):
            importlib.import_module("hooked_pkg.target")
        assert "hooked_pkg.target" not in sys.modules


def test_two_hooks_on_one_module_both_run(package):
    """Each hook asks the finders behind it, the other hook included, without recursing."""
    calls = []
    import_hooks.after_import("hooked_pkg.target", lambda module: calls.append("first"))
    import_hooks.after_import("hooked_pkg.target", lambda module: calls.append("second"))
    importlib.import_module("hooked_pkg.target")
    assert sorted(calls) == ["first", "second"]
    assert not [hook for hook in import_hooks.pending() if hook.name == "hooked_pkg.target"]
