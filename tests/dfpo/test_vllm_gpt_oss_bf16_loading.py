"""dfpo/vllm_fixes/gpt_oss_bf16_loading.py: unquantized GPT-OSS weights reach vLLM 0.24's experts.

One subprocess (``vllm_gpt_oss_loading_run.py``: 16 s of CPU, mostly vLLM's imports) builds vLLM's real
``GptOssForCausalLM`` on CPU and loads a small bf16 GPT-OSS checkpoint written by transformers through
``load_weights``, as verl's weight sync does. The checkpoint's hidden size (64) differs from its
expert intermediate size (96), so a transposed expert matrix cannot load by accident, and its output
layer is untied (as GPT-OSS-120B's; vLLM 0.24's GPT-OSS drops a tied one).
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from dfpo.vllm_fixes import gpt_oss_bf16_loading as fix
from tests.subprocess_report import run_reporting

RUNNER = Path(__file__).with_name("vllm_gpt_oss_loading_run.py")
REPO = Path(__file__).resolve().parents[2]
NUM_LAYERS, NUM_EXPERTS = 2, 4


def write_gpt_oss_checkpoint(directory: Path, tie_word_embeddings: bool = False) -> Path:
    """A random GptOssForCausalLM in bf16 with the real layer pattern (sliding window, then full)."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(0)
    config = GptOssConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_local_experts=NUM_EXPERTS,
        num_experts_per_tok=2,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=16,
        tie_word_embeddings=tie_word_embeddings,
        max_position_embeddings=131072,
    )
    model = GptOssForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # no parameter left at a constant initial value, so that equality means loaded
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def load_report(tmp_path_factory):
    checkpoint = write_gpt_oss_checkpoint(tmp_path_factory.mktemp("gpt_oss_bf16"))
    tied = write_gpt_oss_checkpoint(tmp_path_factory.mktemp("gpt_oss_bf16_tied"), tie_word_embeddings=True)
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    return run_reporting(RUNNER, [str(checkpoint), str(tied)], env, cwd=REPO)


def test_the_plugin_is_an_entry_point_vllm_loads():
    """pyproject.toml's vllm.general_plugins entry point, as installed (`pip install -e .`)."""
    points = {point.name: point.value for point in metadata.entry_points(group="vllm.general_plugins")}
    assert points.get("dfpo_gpt_oss_bf16_loading") == f"{fix.__name__}:register"


@pytest.mark.slow
def test_vllm_general_plugins_patch_the_loader(load_report):
    assert load_report["patched_by_plugins"] is True


@pytest.mark.slow
def test_every_expert_tensor_vllm_loads_is_the_checkpoints(load_report):
    """After vLLM's layout transform (experts [E, in, out] -> [E, out, in]); sinks and lm_head too."""
    assert load_report["fixed_error"] is None
    assert len(load_report["expert_tensors"]) == 4 * NUM_LAYERS
    assert load_report["fixed_mismatches"] == []


@pytest.mark.slow
def test_without_the_fix_vllm_raises_the_upstream_key_error(load_report):
    """The mutant: vLLM 0.24.0's loader as released (vllm-project/vllm#45830)."""
    assert load_report["unfixed_error"] == "KeyError: 'layers.0.mlp.experts.w2_weight'"


@pytest.mark.slow
def test_the_fix_wraps_once_and_retires_when_vllm_remaps_itself(load_report):
    assert load_report["fix_applies_again"] is True and load_report["fix_wraps_once"] is True
    assert load_report["upstream_fixed_patched"] is False and load_report["upstream_fixed_left_alone"] is True


@pytest.mark.slow
def test_a_changed_loader_stops_with_what_to_do(load_report):
    message = load_report["changed_loader_error"]
    assert message is not None
    assert "GptOssModel._load_weights_other(self, ep_rank_end" in message
    assert "vllm-project/vllm#45830" in message and "dfpo_gpt_oss_bf16_loading" in message


def test_upstream_marks_are_recognised_in_a_loaders_source():
    """The retirement test reads the loader's source; a wrapper is read through to what it wraps."""

    def remapping(weights, params_dict):
        return remap_moe_expert_weights(weights, params_dict)  # noqa: F821 (source only, never called)

    def renaming(name):
        return name.replace(".mlp.experts.", ".mlp.experts.routed_experts.")

    def as_released(params_dict, name):
        return params_dict[name]

    assert fix.loader_remaps_expert_names(remapping) and fix.loader_remaps_expert_names(renaming)
    assert not fix.loader_remaps_expert_names(as_released)


@pytest.mark.slow
def test_vllm_leaves_a_tied_gpt_oss_output_layer_unloaded(load_report):
    """Why the tiny GPT-OSS is untied: vLLM 0.24's GptOssForCausalLM skips ``lm_head.*`` when
    ``tie_word_embeddings`` is set and never ties it, so a tied model samples from an output layer
    nobody loaded. When this fails, vLLM ties it: the tiny model may be tied again."""
    tied = load_report["tied"]
    assert tied["checkpoint_has_lm_head"] is False and tied["embedding_loaded"] is True
    assert tied["lm_head_is_embedding"] is False and tied["lm_head_left_zero"] is True


def test_the_tiny_gpt_oss_is_untied_as_gpt_oss_120b():
    from cpu_examples.tiny_moe_models import TINY_GPT_OSS

    assert TINY_GPT_OSS.tie_word_embeddings is False


def test_a_vllm_process_that_never_builds_gpt_oss_never_imports_it():
    """The plugin costs nothing where vLLM serves another model: it patches right after vLLM's lazy
    import of the GPT-OSS module (about 2 s per vLLM process on 2 cores when imported eagerly)."""
    probe = (
        "import sys; from dfpo.vllm_fixes import gpt_oss_bf16_loading as fix; fix.register(); "
        "before = fix.GPT_OSS_MODULE in sys.modules; "
        "from vllm.model_executor.models.gpt_oss import GptOssModel; "
        "print('PROBE', before, getattr(GptOssModel._load_weights_other, fix.PATCHED_MARK, False))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "PROBE False True" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
