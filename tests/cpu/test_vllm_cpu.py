"""The vLLM-on-CPU fix (cpu_backend/vllm_cpu.py): what it changes, where it loads, when it stays inert."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch

from cpu_backend import vllm_cpu
from tests.cpu.subprocess_probe import run_probe

# What a vLLM process sees after vLLM loads its general plugins (as its EngineCore and Workers do).
PROBE = r"""
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.model_executor.layers import utils
from torch._inductor import cpu_vec_isa  # the worker's torch.compile imports it (cpu_backend/inductor_isa.py)
print(json.dumps({
    "keeps_weight": getattr(utils.dispatch_cpu_unquantized_gemm, "__dfpo_keeps_weight__", False),
    "isa_check_memoized": getattr(cpu_vec_isa.VecISA.check_build, "__dfpo_memoized__", False),
}))
"""


def _probe(env_update: dict[str, str], drop: tuple[str, ...] = ()) -> dict:
    return run_probe(PROBE, env_update, drop)


def test_the_fix_is_a_vllm_general_plugin_of_this_package():
    entry_points = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert entry_points.get("dfpo_cpu") == "cpu_backend.vllm_cpu:register"


@pytest.mark.slow
def test_vllm_processes_of_a_cpu_run_keep_linear_weights():
    assert _probe({"VERL_PLATFORM": "cpu"}) == {"keeps_weight": True, "isa_check_memoized": True}


@pytest.mark.slow
def test_without_verl_platform_cpu_vllm_is_untouched():
    """What a GPU run's vLLM processes see: vLLM exactly as shipped."""
    assert _probe({}, drop=("VERL_PLATFORM",)) == {"keeps_weight": False, "isa_check_memoized": False}


def _packed_linear(dispatch) -> torch.nn.Module:
    layer = torch.nn.Linear(64, 32, bias=False)
    dispatch(layer, remove_weight=True)
    return layer


def test_vllms_packing_removes_the_weight_verl_loads_into_and_the_fix_keeps_it():
    """The failure the fix exists for, on vLLM's real CPU GEMM dispatch: after packing, the weight
    verl's sync copies new values into is empty; with the fix it is the layer's own full weight,
    and re-packing after a weight change computes with the new weight."""
    from vllm.model_executor.layers import utils

    original = getattr(utils.dispatch_cpu_unquantized_gemm, "__wrapped__", utils.dispatch_cpu_unquantized_gemm)
    assert _packed_linear(original).weight.numel() == 0
    fixed = vllm_cpu.keeping_weight(original)
    layer = _packed_linear(fixed)
    assert layer.weight.shape == (32, 64)
    x = torch.randn(3, 64)
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), x @ layer.weight.T, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(32, 64))  # what verl's weight update does ...
    fixed(layer, remove_weight=True)  # ... before it re-runs vLLM's post-load processing
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), x @ layer.weight.T, rtol=1e-4, atol=1e-4)


def test_installed_vllm_has_what_the_fix_relies_on():
    vllm_cpu.check_vllm_cpu_internals()


def test_a_vllm_without_the_cpu_version_mark_is_refused_by_name(monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.24.0" if name == "vllm" else real(name))
    with pytest.raises(vllm_cpu.VllmInternalsChanged, match=r"vllm at version 0\.24\.0\+cpu \(found 0\.24\.0\)"):
        vllm_cpu.check_vllm_cpu_internals()


def test_a_changed_packing_call_is_refused_by_name(monkeypatch):
    from vllm.model_executor.layers import linear

    def process_weights_after_loading(self, layer):  # a vLLM that packs differently
        return None

    monkeypatch.setattr(linear.UnquantizedLinearMethod, "process_weights_after_loading", process_weights_after_loading)
    with pytest.raises(vllm_cpu.VllmInternalsChanged, match="remove_weight=True"):
        vllm_cpu.check_vllm_cpu_internals()
