"""The collective plan (dfpo/launch/communication_plan.py) against a real FSDP2 run, and the micro-batch
count against verl's own ``rearrange_micro_batches``.

Two gloo ranks wrap a tiny GPT-OSS and a tiny Qwen3-Next (the layer patterns of
cpu_examples/tiny_moe_models.py, built here from their configs so the test owns its sizes; Qwen3-Next's
vocabulary is 131 so the embedding's dim 0 needs FSDP2's padding) as verl's engine does: rank 0 builds
the fp32 model on the CPU and rank 1 on the meta device (verl's ``get_init_weight_context_manager``),
``apply_fsdp2`` with the ``MixedPrecisionPolicy`` verl builds (bf16 parameters, fp32 reduce,
``reshard_after_forward=True``), then ``fsdp2_load_full_state_dict``. Each rank runs the phases of a
step: no-grad forwards (log-prob pass), forward+backward per micro-batch (update), the weight sync's
``full_tensor()`` per parameter. The bytes are counted by the production meter
(dfpo/operations/resource_meter.py, the meter's contract: the full tensor of each call).

Checked: the anatomy's units are FSDP2's parameter groups; every op's bytes per phase equal the plan's
(model_init within 0.1%: the rotary buffers are broadcast too); mutant plans (no backward all-gather,
a bf16 reduce-scatter, no padding) differ from the measurement; rank 0's RSS grows by the full fp32
model while the meta rank's does not (the plan's host memory rule).
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dfpo.launch import communication_plan as comm
from dfpo.launch import memory_plan
from dfpo.launch.model_anatomy import model_anatomy

WORLD = 2
LOG_PROB_FORWARDS = 2
UPDATE_MICRO_BATCHES = 3

TINY_GPT_OSS = {
    "model_type": "gpt_oss",
    "vocab_size": 128,
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_local_experts": 32,
    "num_experts_per_tok": 2,
    "intermediate_size": 256,
    "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
TINY_QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "vocab_size": 131,
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_experts": 32,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "intermediate_size": 128,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "tie_word_embeddings": False,
}
MODELS = {"gpt_oss": TINY_GPT_OSS, "qwen3_next": TINY_QWEN3_NEXT}


def _run_phases(rank: int, log_dir: str) -> dict:
    """One rank: each tiny model wrapped as verl's engine wraps it, its phases metered."""
    os.environ["VERL_PLATFORM"] = "cpu"
    torch.set_num_threads(1)
    from accelerate import init_empty_weights
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy
    from torch.distributed.tensor import DTensor
    from transformers import AutoConfig, AutoModelForCausalLM
    from verl.utils.fsdp_utils import apply_fsdp2, fsdp2_load_full_state_dict

    from dfpo.operations.resource_meter import ResourceMeter, resident_bytes

    answer = {}
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    for name, fields in MODELS.items():
        fields = dict(fields)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        torch.manual_seed(0)
        rss_before = resident_bytes()
        with init_empty_weights() if rank != 0 else torch.device("cpu"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        rss_built = resident_bytes()
        meter = ResourceMeter(os.path.join(log_dir, name), f"plan-{name}")
        meter.install()
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
        fsdp_kwargs = {"mesh": mesh, "mp_policy": policy, "offload_policy": None, "reshard_after_forward": True}
        with meter.phase("model_init"):
            full_state = model.state_dict()
            apply_fsdp2(model, fsdp_kwargs, {})
            fsdp2_load_full_state_dict(model, full_state, mesh, None)
            del full_state
        groups = {
            module_name: sum(p._orig_size.numel() for p in m._get_fsdp_state()._fsdp_param_group.fsdp_params)
            for module_name, m in model.named_modules()
            if isinstance(m, FSDPModule) and m._get_fsdp_state()._fsdp_param_group is not None
        }
        ids = torch.randint(0, config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(rank))
        with meter.phase("log_prob"), torch.no_grad():
            for _ in range(LOG_PROB_FORWARDS):
                model(input_ids=ids)
        with meter.phase("update"):
            for _ in range(UPDATE_MICRO_BATCHES):
                model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        with meter.phase("weight_sync"):
            for tensor in model.state_dict().values():
                if isinstance(tensor, DTensor):
                    # waited (its value used): an async collective left pending when the gloo group is
                    # torn down can abort the rank at exit (test_resource_meter's flake in CI)
                    tensor.full_tensor().sum().item()
        meter.uninstall()
        record = {phase: use.as_record()["bytes"] for phase, use in meter.totals.items()}
        answer[name] = {"bytes": record, "groups": groups, "built_rss": rss_built - rss_before}
        answer[name]["rss"] = {
            phase: (use.as_record()["rss_start_bytes"], use.as_record()["rss_peak_bytes"])
            for phase, use in meter.totals.items()
        }
    return answer


def _rank_main(rank: int, init_file: str, log_dir: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        answer = _run_phases(rank, log_dir)
        dist.barrier()  # no rank tears its group down while the other still runs a collective
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
        json.dump(answer, handle)


@pytest.fixture(scope="module")
def measured() -> list[dict]:
    """Each rank's measured bytes per model, phase and op (one 2-rank run for the module)."""
    with tempfile.TemporaryDirectory() as directory:
        mp.start_processes(
            _rank_main, args=(os.path.join(directory, "init"), directory, directory), nprocs=WORLD, start_method="spawn"
        )
        answers = []
        for rank in range(WORLD):
            with open(os.path.join(directory, f"rank{rank}.json")) as handle:
                answers.append(json.load(handle))
    return answers


def _shape() -> comm.StepShape:
    return comm.StepShape(
        world=WORLD,
        sp=1,
        sequences=UPDATE_MICRO_BATCHES,
        mini_batches=1,
        epochs=1,
        dynamic_bsz=False,
        ppo_tokens=0,
        log_prob_tokens=0,
        ppo_micro_batch=1,
        log_prob_micro_batch=1,
        prepass=False,
    )


MICRO_BATCHES = {"log_prob": LOG_PROB_FORWARDS, "prepass": 0, "update": UPDATE_MICRO_BATCHES}


def _planned(name: str, **mutation) -> dict[str, dict[str, int]]:
    plan = comm.collective_bytes(model_anatomy(MODELS[name]), _shape(), MICRO_BATCHES, **mutation)
    return {phase: ops for phase, ops in plan.items() if ops}


@pytest.mark.slow  # the module's 2-rank FSDP2 run: 45-100 s on a busy 2-core machine
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_anatomy_units_are_fsdp2s_parameter_groups(measured, name):
    """Parameters per unit, as the anatomy reads them from the meta build, are those of the FSDP2
    parameter groups verl's apply_fsdp2 made (embedding, each layer, lm_head, root, in order)."""
    units = model_anatomy(MODELS[name]).units
    assert measured[0][name]["groups"] == {unit.name: unit.params for unit in units}


@pytest.mark.slow  # the module's 2-rank FSDP2 run: 45-100 s on a busy 2-core machine
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_plan_is_the_bytes_fsdp2_moves(measured, name):
    planned = _planned(name)
    for rank in range(WORLD):
        got = measured[rank][name]["bytes"]
        assert set(got) == set(planned)
        for phase in ("log_prob", "update", "weight_sync"):
            assert got[phase] == planned[phase], (rank, phase)
        # rank 0 broadcasts the full state dict, the rotary frequencies too (a few hundred bytes)
        broadcast = got["model_init"]["broadcast"]
        assert broadcast == pytest.approx(planned["model_init"]["broadcast"], rel=1e-3)


@pytest.mark.slow  # the module's 2-rank FSDP2 run: 45-100 s on a busy 2-core machine
@pytest.mark.parametrize(
    "mutation",
    [{"reshard_after_forward": False}, {"reduce_bytes": 2}, {"param_bytes": 4}],
    ids=["no backward all-gather", "bf16 reduce-scatter", "fp32 all-gather"],
)
def test_a_mutant_plan_is_not_the_measurement(measured, mutation):
    got = measured[0]["gpt_oss"]["bytes"]
    assert _planned("gpt_oss", **mutation)["update"] != got["update"]


@pytest.mark.slow  # the module's 2-rank FSDP2 run: 45-100 s on a busy 2-core machine
def test_a_plan_without_padding_is_not_the_measurement(measured, monkeypatch):
    """Qwen3-Next's 131-entry vocabulary is padded to 132 rows for two ranks; a plan of the unpadded
    parameter counts misses it."""
    anatomy = model_anatomy(TINY_QWEN3_NEXT)
    monkeypatch.setattr(type(anatomy.units[0]), "padded_params", lambda unit, world: unit.params)
    unpadded = comm.collective_bytes(anatomy, _shape(), MICRO_BATCHES)
    assert unpadded["update"] != measured[0]["qwen3_next"]["bytes"]["update"]


@pytest.mark.slow  # the module's 2-rank FSDP2 run: 45-100 s on a busy 2-core machine
def test_rank_0_alone_holds_the_full_fp32_model(measured):
    """verl builds the model in fp32 on rank 0 and on the meta device elsewhere: rank 0's RSS grows by
    the fp32 parameters (the plan's host-memory rule, memory_plan.host_memory), rank 1's by next to nothing.
    Only the first model a process builds is measured: the second reuses the heap the first freed,
    and its RSS barely grows (Qwen3-Next's 27 MB of fp32 parameters showed as ~7 MB)."""
    settings = memory_plan.Settings(1, WORLD, 1, 1, 80.0, 0.5, 8, 8, False, 0, 0, 1, 1, True, True, True, True)
    full_fp32 = memory_plan.host_memory(model_anatomy(TINY_GPT_OSS), settings)[memory_plan.RANK0_MODEL] * memory_plan.GB
    rank0, rank1 = measured[0]["gpt_oss"]["built_rss"], measured[1]["gpt_oss"]["built_rss"]
    assert rank0 == pytest.approx(full_fp32, rel=0.15), (rank0, full_fp32)
    assert rank1 < 0.1 * full_fp32, rank1
    print({name: measured[0][name]["rss"] for name in MODELS})


@pytest.mark.parametrize("seed", range(40))
def test_the_micro_batch_count_is_verls(seed):
    """dynamic_micro_batch_count against verl's rearrange_micro_batches on the same lengths (one rank,
    no data-parallel group)."""
    from tensordict import TensorDict
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 200, (int(torch.randint(1, 40, (1,), generator=generator)),), generator=generator)
    width, budget = 200, int(torch.randint(200, 900, (1,), generator=generator))
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    batch = TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask}, batch_size=[len(lengths)])
    micro_batches, _ = rearrange_micro_batches(batch, max_token_len=budget)
    assert comm.dynamic_micro_batch_count([lengths.tolist()], budget) == len(micro_batches)


def test_the_micro_batch_count_is_the_largest_ranks():
    """verl pads every data-parallel rank to the largest count (same_micro_num_in_dp)."""
    assert comm.dynamic_micro_batch_count([[100] * 4, [400] * 4], 500) == 4
    assert comm.dynamic_micro_batch_count([[100] * 4, [100] * 4], 500) == 1
    with pytest.raises(ValueError, match="exceeds the micro-batch budget 500"):
        comm.dynamic_micro_batch_count([[600]], 500)


def test_micro_batches_per_phase_follow_the_mini_batches():
    """Two ranks of 4 sequences, 2 mini-batches, dynamic budgets of 500 tokens: each mini-batch is a
    consecutive slice of a rank's sequences; the pre-pass forwards every mini-batch but the first."""
    shape = comm.StepShape(
        world=2,
        sp=1,
        sequences=8,
        mini_batches=2,
        epochs=1,
        dynamic_bsz=True,
        ppo_tokens=500,
        log_prob_tokens=1000,
        ppo_micro_batch=0,
        log_prob_micro_batch=0,
        prepass=True,
    )
    lengths = [[400, 400, 100, 100], [100, 100, 100, 100]]
    # log_prob: rank 0 has 1000 tokens, 1 micro-batch; update: mini-batch 1 needs 2 (400 + 400 > 500), mini 2 needs 1
    assert comm.micro_batches_from_lengths(shape, lengths) == {
        "log_prob": 1,
        "prepass": 1,
        "update": 3,
        "update_kl_probe": 0,
    }
    # the pre-pass forwards through verl's infer_batch, at the log-prob pass's micro-batch size (2 rows):
    # mini-batch 2 (2 rows per rank) in one forward, where the update's size (1 row) would take 2
    fixed = comm.StepShape(**{**shape.__dict__, "dynamic_bsz": False, "ppo_micro_batch": 1, "log_prob_micro_batch": 2})
    assert comm.micro_batches_from_lengths(fixed, lengths) == {
        "log_prob": 2,
        "prepass": 1,
        "update": 4,
        "update_kl_probe": 0,
    }
    assert comm.micro_batches_per_step(fixed, 400) == {"log_prob": 2, "prepass": 1, "update": 4, "update_kl_probe": 0}
    # dfpo_measure_update_kl: one more no-grad forward of the rank's rows inside update, as the log-prob pass
    probed = comm.StepShape(**{**fixed.__dict__, "update_kl_probe": True})
    assert comm.micro_batches_per_step(probed, 400)["update_kl_probe"] == 2
