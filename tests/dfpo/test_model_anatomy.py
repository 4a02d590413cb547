"""The model anatomy (dfpo/launch/model_anatomy.py): the meta build's units against a real CPU-allocated
model's parameters, the published models' totals, tied embeddings in the root, where the config
comes from, and a cheap import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from dfpo.launch import model_anatomy as ma
from tests.dfpo.test_communication_plan import MODELS


def _real_model(fields: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(fields)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(fields.pop("model_type"), **fields))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_meta_build_has_the_real_models_units(name):
    """Per unit: the real (allocated) model's parameters under that module, less those of wrapped
    modules inside it; the experts' parameters; the layers' attention kinds in order."""
    real = _real_model(MODELS[name])
    anatomy = ma.model_anatomy(MODELS[name])
    wrapped = [unit.name for unit in anatomy.units if unit.kind != "root"]
    for unit in anatomy.units:
        owned = [
            (param_name, param)
            for param_name, param in real.named_parameters()
            if max((w for w in wrapped if param_name.startswith(w + ".")), key=len, default="") == unit.name
        ]
        assert unit.params == sum(p.numel() for _, p in owned), unit.name
        assert unit.expert_params == sum(p.numel() for n, p in owned if ".experts." in n), unit.name
    assert anatomy.params == sum(p.numel() for p in real.parameters())
    assert [unit.kind for unit in anatomy.units] == ["embedding", *["layer"] * 4, "lm_head", "root"]
    assert tuple(unit.layer_type for unit in anatomy.layers) == tuple(MODELS[name]["layer_types"])


def test_the_published_models_have_their_published_sizes():
    """Totals and active parameters as the model cards give them: Qwen3-Next 80 B total (~3 B active),
    GPT-OSS-120B 116.8 B total and 5.1 B active, Qwen3-32B 32.8 B."""
    sizes = {name: ma.model_anatomy(config) for name, config in ma.PUBLISHED_CONFIGS.items()}
    assert sizes["qwen3_next_80b_a3b_thinking"].params == pytest.approx(79.67e9, rel=1e-3)
    assert sizes["qwen3_next_80b_a3b_thinking"].active_params_per_token == pytest.approx(3.56e9, rel=1e-2)
    assert sizes["gpt_oss_120b"].params == pytest.approx(116.83e9, rel=1e-3)
    assert sizes["gpt_oss_120b"].active_params_per_token == pytest.approx(5.13e9, rel=1e-2)
    assert sizes["qwen3_32b"].params == pytest.approx(32.76e9, rel=1e-3)
    layer = sizes["gpt_oss_120b"].largest_unit()
    assert layer.kind == "layer" and layer.params == pytest.approx(3.21e9, rel=1e-2)
    assert sizes["qwen3_next_80b_a3b_thinking"].params_by_layer_type().keys() == {"linear_attention", "full_attention"}


def test_tied_embeddings_stay_in_the_root():
    """verl wraps no embedding when tie_word_embeddings is true: the shared matrix is the root's."""
    anatomy = ma.model_anatomy(ma.PUBLISHED_CONFIGS["qwen3_0p6b"])
    assert [unit.kind for unit in anatomy.units].count("layer") == 28
    assert "embedding" not in {unit.kind for unit in anatomy.units}
    assert anatomy.units[-1].params == 151936 * 1024 + 1024  # the embedding and the final norm


def test_a_checkpoints_config_json_wins(tmp_path):
    config = dict(ma.PUBLISHED_CONFIGS["qwen3_32b"], num_hidden_layers=2)
    (tmp_path / "config.json").write_text(json.dumps({"text_config": config}))
    assert ma.hf_config_for("qwen3_32b", str(tmp_path))["num_hidden_layers"] == 2
    assert ma.load_hf_config(tmp_path)["num_hidden_layers"] == 2  # a checkpoint directory, or its config.json
    assert ma.model_anatomy(tmp_path / "config.json").layers == ma.model_anatomy(config).layers
    assert ma.hf_config_for("qwen3_32b", str(tmp_path / "absent")) is ma.PUBLISHED_CONFIGS["qwen3_32b"]
    assert ma.published_model_of(ma.PUBLISHED_CONFIGS["gpt_oss_120b"]) == "gpt_oss_120b"
    assert ma.published_model_of(config) is None
    with pytest.raises(KeyError, match="no published config for model 'nope'"):
        ma.hf_config_for("nope", None)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(KeyError, match="config.json is not JSON"):
        ma.hf_config_for("qwen3_32b", str(tmp_path))
    with pytest.raises(KeyError, match="no 'model_type'"):
        ma.model_anatomy({"hidden_size": 8})


def test_padding_follows_fsdp2s_dim_0_shards():
    unit = ma.WrapUnit("model.embed_tokens", "embedding", None, ((131, 128), (5,)), 0)
    assert unit.padded_params(2) == 132 * 128 + 6
    assert unit.padded_params(1) == unit.params == 131 * 128 + 5


def test_importing_the_plan_imports_no_torch_or_transformers():
    """The launchers import the plan at start-up; transformers and torch load only when a model is built."""
    code = (
        "import sys; import dfpo.launch.memory_plan, dfpo.launch.communication_plan, dfpo.launch.model_anatomy; "
        "print(sorted(m for m in ('torch', 'transformers', 'verl') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr
