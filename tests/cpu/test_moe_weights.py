"""The local rollout packs verl's per-expert weight sync back into transformers' MoE layout.

verl's FSDP engine sends a Qwen3-Next's experts one by one (``unfuse_moe_params``); the local
rollout server's model holds them packed. The round trip through verl's own function must give
back every tensor exactly, and the server must load the result into a real tiny Qwen3-Next."""

from __future__ import annotations

import pytest
import torch

from cpu_backend.moe_weights import pack_expert_weights
from cpu_examples.tiny_model import build_model
from cpu_examples.tiny_moe_models import TINY_GPT_OSS, TINY_QWEN3_NEXT


def _verl_stream(model):
    from verl.workers.engine.fsdp.utils import unfuse_moe_params

    return dict(unfuse_moe_params(model.state_dict().items(), model.config.model_type))


@pytest.fixture(scope="module")
def qwen3_next():
    return build_model(TINY_QWEN3_NEXT)


def test_verl_sends_qwen3_next_experts_one_by_one(qwen3_next):
    sent = _verl_stream(qwen3_next)
    assert "model.layers.0.mlp.experts.0.gate_proj.weight" in sent
    assert "model.layers.0.mlp.experts.gate_up_proj" not in sent


def test_packing_inverts_verls_split_exactly(qwen3_next):
    parameters = dict(qwen3_next.named_parameters())
    packed = pack_expert_weights(_verl_stream(qwen3_next), parameters)
    original = qwen3_next.state_dict()
    assert sorted(packed) == sorted(original)
    for name, tensor in original.items():
        assert torch.equal(packed[name], tensor), name


def test_the_server_loads_the_packed_sync_into_the_model(qwen3_next):
    from cpu_backend.server import LocalRolloutServer

    target = build_model(TINY_QWEN3_NEXT.__class__(**{**TINY_QWEN3_NEXT.__dict__, "seed": 1}))
    server = LocalRolloutServer.__new__(LocalRolloutServer)  # the weight-sync method only
    server.model = target
    assert server.load_weights(_verl_stream(qwen3_next)) > 0
    for name, tensor in qwen3_next.state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name


def test_a_missing_expert_is_an_error_not_a_partial_update(qwen3_next):
    sent = _verl_stream(qwen3_next)
    del sent["model.layers.2.mlp.experts.5.up_proj.weight"]
    with pytest.raises(ValueError, match=r"model\.layers\.2\.mlp\.experts has 32 experts .* up_proj for 31 .*\[5\]"):
        pack_expert_weights(sent, dict(qwen3_next.named_parameters()))


def test_gpt_oss_packed_experts_pass_through_unchanged():
    model = build_model(TINY_GPT_OSS)
    sent = _verl_stream(model)
    assert "model.layers.0.mlp.experts.gate_up_proj" in sent
    packed = pack_expert_weights(sent, dict(model.named_parameters()))
    assert packed.keys() == sent.keys()
    assert all(packed[name] is sent[name] for name in sent)
