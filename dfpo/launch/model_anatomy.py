"""What verl's FSDP2 shards, read from the model's real class built on the meta device.

The memory and communication plans (:mod:`dfpo.launch.memory_plan`, :mod:`dfpo.launch.communication_plan`)
need the units FSDP2 all-gathers and reduce-scatters one at a time, not a parameter total: verl
0.9.1's ``verl/utils/fsdp_utils.py:apply_fsdp2`` calls ``fully_shard`` on every module whose class is
in the model's ``_no_split_modules`` (the decoder layers; ``wrap_policy.transformer_layer_cls_to_wrap``
overrides it), on ``embed_tokens`` / ``lm_head`` unless the embeddings are tied
(``_select_fsdp2_wrap_targets``), and last on the whole model (the root: every parameter no unit
holds, e.g. the final norm, or the tied embedding). verl passes ``reshard_after_forward`` explicitly,
so torch 2.11 applies it to the root too (``FSDPState._lazy_init`` keeps only an *unset* root
unsharded after forward). :func:`model_anatomy` builds the Hugging Face
class from its config on the meta device (nothing allocated) and reads the parameters of each unit,
the experts' share and the parameters a token activates.

The recipes' checkpoints cannot be downloaded here; :data:`PUBLISHED_CONFIGS` keeps the fields of
their published ``config.json`` so the build works offline. A real ``MODEL_PATH/config.json`` wins
(:func:`hf_config_for`). transformers and torch are imported only when a model is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_GPT_OSS_120B_LAYER_TYPES = ["sliding_attention", "full_attention"] * 18

# The published config.json of each recipe model (Hugging Face hub, the model's repository at its
# release), with the fields the transformers config class reads. GPT-OSS-120B's quantization_config
# (MXFP4 experts) is left out: the recipes train a bf16 copy (dfpo/config/base_model/gpt_oss_120b.yaml).
PUBLISHED_CONFIGS: dict[str, dict] = {
    "qwen3_32b": {  # Qwen/Qwen3-32B
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "max_position_embeddings": 40960,
        "num_attention_heads": 64,
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    "qwen3_next_80b_a3b_thinking": {  # Qwen/Qwen3-Next-80B-A3B-Thinking
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "decoder_sparse_step": 1,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "moe_intermediate_size": 512,
        "norm_topk_prob": True,
        "num_attention_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 48,
        "num_key_value_heads": 2,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000000,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    "gpt_oss_120b": {  # openai/gpt-oss-120b
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "experts_per_token": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "initial_context_length": 4096,
        "intermediate_size": 2880,
        "layer_types": _GPT_OSS_120B_LAYER_TYPES,
        "max_position_embeddings": 131072,
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "num_local_experts": 128,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
    },
    "qwen3_1p7b": {  # Qwen/Qwen3-1.7B
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "max_position_embeddings": 40960,
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "vocab_size": 151936,
    },
    "qwen3_0p6b": {  # Qwen/Qwen3-0.6B
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "max_position_embeddings": 40960,
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "vocab_size": 151936,
    },
}


def hf_config_for(name: str | None, model_path: str | None) -> dict:
    """The Hugging Face config of a run: ``model_path/config.json`` when it is there (a multimodal
    config's ``text_config``), else the published one of ``name``. Raises KeyError naming both."""
    config_file = Path(model_path or "") / "config.json"
    if model_path and config_file.is_file():
        try:
            config = json.loads(config_file.read_text())
        except ValueError as error:
            raise KeyError(f"{config_file} is not JSON ({error}); fix or remove it") from error
        return config.get("text_config", config)
    if name not in PUBLISHED_CONFIGS:
        raise KeyError(
            f"no config.json at {model_path!r} and no published config for model {name!r} "
            f"(known: {', '.join(sorted(PUBLISHED_CONFIGS))}); add its config.json fields to PUBLISHED_CONFIGS in "
            "dfpo/launch/model_anatomy.py"
        )
    return PUBLISHED_CONFIGS[name]


def published_model_of(hf_config: dict) -> str | None:
    """The name in :data:`PUBLISHED_CONFIGS` with the same model type and shape as ``hf_config``, or None."""
    text = hf_config.get("text_config", hf_config)

    def shape(config: dict) -> tuple:
        keys = ("model_type", "num_hidden_layers", "hidden_size", "vocab_size")
        return tuple(config.get(k) for k in keys)

    return next((name for name, known in PUBLISHED_CONFIGS.items() if shape(known) == shape(text)), None)


@dataclass(frozen=True)
class WrapUnit:
    """One ``fully_shard`` unit of verl's FSDP2 wrap: what it all-gathers and reduce-scatters at once."""

    name: str  # module path ('' for the root)
    kind: str  # 'layer', 'embedding', 'lm_head' or 'root'
    layer_type: str | None  # the decoder layer's attention kind (config.layer_types), None otherwise
    shapes: tuple[tuple[int, ...], ...]  # its parameters' shapes, in registration order
    expert_params: int  # parameters of routed experts (modules named ``experts``)

    @property
    def params(self) -> int:
        return sum(_numel(shape) for shape in self.shapes)

    def padded_params(self, world: int) -> int:
        """Elements of the unit's unsharded flat buffer on ``world`` ranks: FSDP2 shards each
        parameter on dim 0 (verl passes no shard_placement_fn), padding dim 0 to a multiple of world
        (torch ``_fsdp_param.FSDPParam._init_sharded_param``), and all-gathers the padded shards."""
        return sum(-(-shape[0] // world) * world * _numel(shape[1:]) if shape else world for shape in self.shapes)


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


@dataclass(frozen=True)
class ModelAnatomy:
    """The units verl's FSDP2 wraps and the numbers the plans need, from the real model class."""

    architecture: str
    model_type: str
    units: tuple[WrapUnit, ...]  # in the forward's order: embedding, layers, lm_head, root last
    hidden: int
    vocab: int
    layer_types: tuple[str, ...]
    tied_embeddings: bool
    experts: int  # routed experts per MoE layer (0 for a dense model)
    experts_per_token: int
    attention_heads: int
    head_dim: int
    sliding_window: int | None

    @property
    def params(self) -> int:
        return sum(unit.params for unit in self.units)

    @property
    def expert_params(self) -> int:
        return sum(unit.expert_params for unit in self.units)

    @property
    def layers(self) -> tuple[WrapUnit, ...]:
        return tuple(unit for unit in self.units if unit.kind == "layer")

    @property
    def active_params_per_token(self) -> float:
        """Parameters one token multiplies by, without the embedding lookup: each MoE layer's routed
        experts count ``experts_per_token / experts`` of theirs, everything else (attention, router,
        shared expert, lm_head) in full."""
        embedding = sum(unit.params for unit in self.units if unit.kind == "embedding")
        share = self.experts_per_token / self.experts if self.experts else 1.0
        return self.params - embedding - self.expert_params * (1 - share)

    def params_by_layer_type(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for unit in self.layers:
            totals[unit.layer_type or "layer"] = totals.get(unit.layer_type or "layer", 0) + unit.params
        return totals

    def largest_unit(self) -> WrapUnit:
        return max(self.units, key=lambda unit: unit.params)


def load_hf_config(hf_config: dict | str | Path) -> dict:
    """A Hugging Face config as a dict (its ``text_config`` for a multimodal one), from a dict or a
    config.json path (or its directory)."""
    if not isinstance(hf_config, dict):
        path = Path(hf_config)
        path = path / "config.json" if path.is_dir() else path
        try:
            hf_config = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise KeyError(f"cannot read a Hugging Face config from {path} ({error})") from error
    return hf_config.get("text_config", hf_config)


def model_anatomy(hf_config: dict | str | Path, wrap_classes: tuple[str, ...] | None = None) -> ModelAnatomy:
    """The anatomy of a Hugging Face config (a dict, or a config.json path): its causal-LM class built
    on the meta device and split into verl's FSDP2 units. ``wrap_classes`` is verl's
    ``wrap_policy.transformer_layer_cls_to_wrap`` (default: the model's ``_no_split_modules``)."""
    text = load_hf_config(hf_config)
    if "model_type" not in text:
        raise KeyError("the Hugging Face config has no 'model_type': give the checkpoint's full config.json")
    return _anatomy(json.dumps(text, sort_keys=True), tuple(wrap_classes) if wrap_classes else None)


@lru_cache(maxsize=16)
def _anatomy(config_json: str, wrap_classes: tuple[str, ...] | None) -> ModelAnatomy:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = json.loads(config_json)
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return anatomy_of_module(model, wrap_classes)


def wrap_targets(model, wrap_classes: tuple[str, ...] | None = None) -> list[tuple[str, object]]:
    """(name, module) of each module verl's ``_select_fsdp2_wrap_targets`` passes to ``fully_shard``
    (verl/utils/fsdp_utils.py), in its order: the layer classes, and the input/output embeddings by
    class or name unless tied."""
    import torch.nn as nn

    classes = set(wrap_classes or getattr(model, "_no_split_modules", None) or ())
    if not classes:
        raise KeyError(
            f"{type(model).__name__} has no _no_split_modules: set wrap_policy.transformer_layer_cls_to_wrap"
        )
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    by_name = set() if tied else {"embed_tokens", "lm_head"}
    targets = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if (
            type(module).__name__ in classes
            or (isinstance(module, nn.Embedding) and not tied)
            or (leaf in by_name and hasattr(module, "weight"))
        ):
            targets.append((name, module))
    return targets


def anatomy_of_module(model, wrap_classes: tuple[str, ...] | None = None) -> ModelAnatomy:
    """The anatomy of a built causal-LM module (meta or real): each parameter goes to the innermost
    wrapped module that holds it, the rest to the root, as ``fully_shard`` assigns them."""
    config = model.config
    targets = wrap_targets(model, wrap_classes)
    names = [name for name, _ in targets]
    layer_types = tuple(getattr(config, "layer_types", None) or ())
    shapes: dict[str, list[tuple[int, ...]]] = {name: [] for name in [*names, ""]}
    experts: dict[str, int] = {name: 0 for name in shapes}
    for param_name, param in model.named_parameters():  # shared (tied) parameters appear once
        owner = max((n for n in names if param_name.startswith(n + ".")), key=len, default="")
        shapes[owner].append(tuple(param.shape))
        if ".experts." in f".{param_name}":
            experts[owner] += param.numel()
    units = []
    layer_index = 0
    for name, module in targets:
        if type(module).__name__ in set(wrap_classes or getattr(model, "_no_split_modules", ())):
            kind = "layer"
            layer_type = layer_types[layer_index] if layer_index < len(layer_types) else None
            layer_index += 1
        else:
            kind, layer_type = ("lm_head" if name.rsplit(".", 1)[-1] == "lm_head" else "embedding"), None
        units.append(WrapUnit(name, kind, layer_type, tuple(shapes[name]), experts[name]))
    units.append(WrapUnit("", "root", None, tuple(shapes[""]), experts[""]))
    moe_experts = int(getattr(config, "num_experts", 0) or getattr(config, "num_local_experts", 0) or 0)
    per_token = int(getattr(config, "num_experts_per_tok", 0) or getattr(config, "experts_per_token", 0) or 0)
    heads = int(config.num_attention_heads)
    return ModelAnatomy(
        architecture=type(model).__name__,
        model_type=str(config.model_type),
        units=tuple(units),
        hidden=int(config.hidden_size),
        vocab=int(config.vocab_size),
        layer_types=layer_types or tuple("full_attention" for _ in range(layer_index)),
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        experts=moe_experts if sum(experts.values()) else 0,
        experts_per_token=per_token,
        attention_heads=heads,
        head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
        sliding_window=getattr(config, "sliding_window", None) if "sliding_attention" in layer_types else None,
    )
