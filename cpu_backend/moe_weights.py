"""The weight sync's MoE expert tensors, packed back into the layout of the local rollout's model.

verl's FSDP engine streams the actor's weights to the rollout through
``verl.workers.engine.fsdp.utils.unfuse_moe_params``: transformers 5 holds a Qwen-style MoE layer's
experts as two packed 3D parameters, ``mlp.experts.gate_up_proj`` (``[experts, 2 × intermediate,
hidden]``, gate rows then up rows) and ``mlp.experts.down_proj`` (``[experts, hidden,
intermediate]``), and verl sends them under the per-expert names of the published checkpoints
(``mlp.experts.{e}.gate_proj.weight``, ``.up_proj.weight``, ``.down_proj.weight``), the names vLLM's
loader reads. GPT-OSS's packed tensors go through unchanged.

The local rollout server (:mod:`cpu_backend.server`) runs the transformers model itself, so it
needs the packed parameters back: :func:`pack_expert_weights` is the exact inverse of verl's
split (``tests/cpu/test_moe_weights.py`` round-trips a real Qwen3-Next through verl's function).
A per-expert set that is incomplete (an expert or a projection missing) is an error, never a
partial update.
"""

from __future__ import annotations

import re

import torch

# verl's per-expert names: <base>.<expert>.<gate_proj|up_proj|down_proj>.weight, base ending in .mlp.experts
_PER_EXPERT = re.compile(
    r"^(?P<base>.+\.mlp\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$"
)


def pack_expert_weights(state_dict: dict[str, torch.Tensor], parameters: dict[str, torch.Tensor]) -> dict:
    """``state_dict`` with every per-expert tensor whose model (``parameters``: the rollout model's
    named parameters) holds the experts packed replaced by the packed tensors
    ``<base>.gate_up_proj`` and ``<base>.down_proj``; other entries unchanged."""
    grouped: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    packed: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        match = _PER_EXPERT.match(name)
        if match is None or f"{match['base']}.gate_up_proj" not in parameters:
            packed[name] = tensor
            continue
        grouped.setdefault(match["base"], {}).setdefault(match["proj"], {})[int(match["expert"])] = tensor
    for base, projections in grouped.items():
        experts = parameters[f"{base}.gate_up_proj"].shape[0]
        for proj in ("gate_proj", "up_proj", "down_proj"):
            got = sorted(projections.get(proj, {}))
            if got != list(range(experts)):
                missing = sorted(set(range(experts)) - set(got))
                raise ValueError(
                    f"weight sync: {base} has {experts} experts but the sync sent {proj} for {len(got)} "
                    f"(missing experts {missing[:8]}): a partial update would roll out a mix of policies"
                )
        gate, up, down = (projections[p] for p in ("gate_proj", "up_proj", "down_proj"))
        # verl: gate, up = gate_up_proj.chunk(2, dim=1), so each expert's rows are gate then up
        packed[f"{base}.gate_up_proj"] = torch.stack([torch.cat([gate[e], up[e]], dim=0) for e in range(experts)])
        packed[f"{base}.down_proj"] = torch.stack([down[e] for e in range(experts)])
    return packed
