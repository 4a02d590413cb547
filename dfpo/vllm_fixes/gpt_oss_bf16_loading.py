"""Unquantized GPT-OSS weights load into vLLM 0.24's fused MoE experts (vllm-project/vllm#45830).

The bug: vLLM's FusedMoE refactor (vllm-project/vllm#41184) moved each MoE layer's expert parameters
one module down, from ``layers.N.mlp.experts.w13_weight`` to ``layers.N.mlp.experts.routed_experts.
w13_weight``. GPT-OSS's loader for unquantized checkpoints (``GptOssModel._load_weights_other`` in
``vllm/model_executor/models/gpt_oss.py``, the path of every bf16 or fp32 GPT-OSS checkpoint, such as
the dequantized GPT-OSS-120B the GPU recipe trains) still looks the old names up and fails with
``KeyError: 'layers.0.mlp.experts.w2_weight'``; its MXFP4 and Quark loaders were updated. vLLM 0.24.0,
the version verl 0.9.1 pins, has the bug on every platform. verl's rollout starts vLLM with
``load_format=dummy`` (no checkpoint read), so the engine starts, and the first weight sync — verl
calls ``model.load_weights`` with the actor's Hugging Face names after every update — raises.

The fix is upstream's (vllm-project/vllm#45818): the loader's weights go through vLLM's own
``remap_moe_expert_weights`` (``vllm/model_executor/model_loader/weight_utils.py``), which inserts
``routed_experts.`` into an expert parameter's name where the model has that parameter. This module
applies it by wrapping ``_load_weights_other``, and only while it is needed: when the installed
vLLM's ``_load_weights_other`` already remaps (a release with #45818, or #45851's string
replacement), :func:`register` leaves vLLM alone. What it relies on is checked first
(:func:`check_gpt_oss_loader_internals`); a vLLM whose loader changed otherwise stops with an error
that says what to check.

Cost: none in a vLLM process that serves another model. vLLM imports a model's module only when it
builds that model; :func:`register` patches right after that import (:class:`ApplyAfterImport`), or
at once where the module is already imported. (Importing the GPT-OSS module in every vLLM process
cost about 2 s each on 2 cores.)
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import inspect
import sys

UPSTREAM_ISSUE = "vllm-project/vllm#45830"
UPSTREAM_FIX = "vllm-project/vllm#45818"
# The loader the fix wraps, and the arguments GptOssModel.load_weights passes it (positionally).
LOADER = "vllm.model_executor.models.gpt_oss.GptOssModel._load_weights_other"
LOADER_ARGUMENTS = [
    "self",
    "ep_rank_end",
    "ep_rank_start",
    "heads_per_rank",
    "head_start",
    "weights",
    "stacked_params_mapping",
]
# Either is in the loader's source once vLLM itself maps the names (the fix merged, or the alternative one).
UPSTREAM_REMAP_MARKS = ("remap_moe_expert_weights(", "routed_experts")
PATCHED_MARK = "__dfpo_remaps_expert_names__"


class GptOssLoaderChanged(ImportError):
    """The installed vLLM no longer has what the GPT-OSS bf16 loading fix relies on."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise GptOssLoaderChanged(
            f"dfpo's fix for {UPSTREAM_ISSUE} (dfpo/vllm_fixes/gpt_oss_bf16_loading.py) needs {what}, which the "
            f"installed vLLM does not have. It is written for vLLM 0.24.0. If this vLLM loads unquantized GPT-OSS "
            f"checkpoints itself (upstream fix {UPSTREAM_FIX}), remove the entry point dfpo_gpt_oss_bf16_loading "
            "from pyproject.toml; otherwise update the fix to this vLLM's loader."
        )


def loader_remaps_expert_names(loader) -> bool:
    """Whether ``loader`` (vLLM's own ``_load_weights_other``, unwrapped) maps expert names itself."""
    source = inspect.getsource(inspect.unwrap(loader))
    return any(mark in source for mark in UPSTREAM_REMAP_MARKS)


def check_gpt_oss_loader_internals() -> None:
    """Raise :class:`GptOssLoaderChanged` naming the first thing the fix relies on that changed."""
    from vllm.model_executor.model_loader import weight_utils
    from vllm.model_executor.models import gpt_oss

    remap = getattr(weight_utils, "remap_moe_expert_weights", None)
    _require(
        remap is not None and list(inspect.signature(remap).parameters) == ["weights", "params_dict"],
        "vllm.model_executor.model_loader.weight_utils.remap_moe_expert_weights(weights, params_dict)",
    )
    model = getattr(gpt_oss, "GptOssModel", None)
    loader = getattr(model, "_load_weights_other", None)
    _require(
        loader is not None and list(inspect.signature(inspect.unwrap(loader)).parameters) == LOADER_ARGUMENTS,
        f"{LOADER}({', '.join(LOADER_ARGUMENTS)})",
    )
    _require(
        "return self._load_weights_other(" in inspect.getsource(model.load_weights),
        "GptOssModel.load_weights calling self._load_weights_other for unquantized checkpoints",
    )


def remapping_expert_names(load_weights_other):
    """Wrap ``_load_weights_other`` so that its weights' names go through ``remap_moe_expert_weights``."""
    from vllm.model_executor.model_loader.weight_utils import remap_moe_expert_weights

    @functools.wraps(load_weights_other)
    def load_weights_other_remapped(
        self, ep_rank_end, ep_rank_start, heads_per_rank, head_start, weights, stacked_params_mapping
    ):
        remapped = remap_moe_expert_weights(weights, dict(self.named_parameters()))
        return load_weights_other(
            self, ep_rank_end, ep_rank_start, heads_per_rank, head_start, remapped, stacked_params_mapping
        )

    setattr(load_weights_other_remapped, PATCHED_MARK, True)
    return load_weights_other_remapped


def apply() -> bool:
    """Patch vLLM's GPT-OSS loader if the installed vLLM needs it (idempotent); whether it is patched now."""
    check_gpt_oss_loader_internals()
    from vllm.model_executor.models.gpt_oss import GptOssModel

    loader = GptOssModel._load_weights_other
    if getattr(loader, PATCHED_MARK, False):
        return True
    if loader_remaps_expert_names(loader):
        return False
    GptOssModel._load_weights_other = remapping_expert_names(loader)
    return True


GPT_OSS_MODULE = LOADER.rsplit(".", 2)[0]  # vllm.model_executor.models.gpt_oss


class ApplyAfterImport(importlib.abc.MetaPathFinder):
    """Finds vLLM's GPT-OSS module as the other finders do and runs :func:`apply` right after the module
    is executed, once (it then leaves ``sys.meta_path``)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != GPT_OSS_MODULE:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_module_then_apply(module):
            exec_module(module)
            apply()

        spec.loader.exec_module = exec_module_then_apply
        return spec


def register() -> None:
    """vLLM general-plugin entry point: called by vLLM in each of its processes, on every platform.
    Patches now if vLLM's GPT-OSS module is imported, else right after it is."""
    if GPT_OSS_MODULE in sys.modules:
        apply()
    elif not any(isinstance(finder, ApplyAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, ApplyAfterImport())
