"""The resource meter (dfpo/operations/resource_meter.py) against what is known to happen.

* On a real 2-rank gloo group: every collective FSDP2 and verl call (``all_gather_into_tensor``,
  ``reduce_scatter_tensor`` with FSDP2's keyword arguments, ``all_reduce``, ``broadcast``,
  ``all_to_all_single``, DTensor's ``full_tensor()``) counted once with the contract's bytes (the full
  tensor's); one collective run by another (``_reduce_scatter_base``, ``all_gather_object``) counted
  once; nothing outside a phase; an inner phase's calls not in the outer one.
* A real FSDP2 module (``fully_shard``) forward + backward: the bytes FSDP2 must move, computed
  here from the parameters' shapes, and one forward pass.
* RSS: a 200 MB tensor held inside a phase is in its peak; one freed before the phase is not. GPU
  memory (a fake accelerator): each phase's exact peak, a nested phase's reset of the peak included.
* The record: its schema, its file name, the steps, rewritten after every phase; an unknown
  phase refused; ``uninstall`` puts torch's functions back.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dfpo.operations import resource_meter
from dfpo.operations.resource_meter import ResourceMeter

F32 = 4
WORLD = 2


def _on_two_ranks(target, *args) -> list[dict]:
    """Run ``target(rank, init_file, log_dir, *args)`` on 2 gloo ranks; each rank's returned dict."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as directory:
        init_file = os.path.join(directory, "init")
        processes = [
            context.Process(target=_rank_main, args=(target, rank, init_file, directory, results, args))
            for rank in range(WORLD)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=180)
        answers = []
        while not results.empty():
            answers.append(results.get())
    errors = [answer["error"] for answer in answers if "error" in answer]
    assert not errors and all(p.exitcode == 0 for p in processes), (errors, [p.exitcode for p in processes])
    return sorted(answers, key=lambda answer: answer["rank"])


def _rank_main(target, rank, init_file, log_dir, results, args) -> None:
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
        answer = target(rank, log_dir, *args)
        dist.barrier()  # no rank tears its group down while the other still runs a collective
        dist.destroy_process_group()
        results.put({"rank": rank, **answer})
    except BaseException as error:  # noqa: BLE001  (reported to the parent)
        results.put({"rank": rank, "error": f"rank {rank}: {error!r}"})
        raise


def _collectives(rank: int, log_dir: str) -> dict:
    import warnings

    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    meter = ResourceMeter(log_dir, "probe")
    meter.install()
    dist.all_reduce(torch.zeros(1000))  # no phase open: not counted
    mesh = init_device_mesh("cpu", (WORLD,))
    sharded = distribute_tensor(torch.arange(10.0), mesh, [Shard(0)])  # full: 10 floats
    with meter.phase("update"):
        dist.all_gather_into_tensor(torch.empty(6, 3), torch.ones(3, 3))  # output 18 floats
        # FSDP2's call (_fsdp_collectives.DefaultReduceScatter): keywords, input = the unsharded gradients
        dist.reduce_scatter_tensor(output=torch.empty(5), input=torch.ones(10), op=dist.ReduceOp.SUM)
        dist.all_reduce(torch.ones(7, dtype=torch.float64))  # 56 bytes
        dist.broadcast(torch.ones(3, dtype=torch.int64), src=0)  # 24 bytes
        dist.all_to_all_single(torch.empty(4, 2), torch.ones(4, 2))  # input 8 floats
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist._reduce_scatter_base(torch.empty(2), torch.ones(4))  # runs reduce_scatter_tensor itself
        # DTensor: a functional all_gather_tensor of the full 10 floats. Its result is used, so the async
        # collective is waited here (an unwaited one left gloo's worker busy at teardown: abort, exit -6)
        full = sharded.full_tensor()
        assert torch.equal(full, torch.arange(10.0))
        with meter.phase("prepass"):
            dist.all_reduce(torch.ones(2))
            objects = [None] * WORLD
            dist.all_gather_object(objects, {"rank": rank})  # runs all_gather twice (sizes, then bytes)
    meter.uninstall()
    return {"record": meter.record(), "objects": objects}


def test_every_collective_counted_once_with_the_full_tensors_bytes():
    for answer in _on_two_ranks(_collectives):
        phases = answer["record"]["phases"]
        assert phases["update"]["calls"] == {
            "_reduce_scatter_base": 1,
            "all_gather_into_tensor": 2,  # dist's and DTensor's full_tensor()
            "all_reduce": 1,
            "all_to_all_single": 1,
            "broadcast": 1,
            "reduce_scatter_tensor": 1,
        }
        assert phases["update"]["bytes"] == {
            "_reduce_scatter_base": 4 * F32,
            "all_gather_into_tensor": (18 + 10) * F32,
            "all_reduce": 7 * 8,
            "all_to_all_single": 8 * F32,
            "broadcast": 3 * 8,
            "reduce_scatter_tensor": 10 * F32,
        }
        prepass = phases["prepass"]
        assert prepass["calls"] == {"all_gather_object": 1, "all_reduce": 1}
        assert prepass["bytes"]["all_reduce"] == 2 * F32
        # the object collective's bytes are its two all_gathers': the sizes (one int64 per rank) and more
        assert prepass["bytes"]["all_gather_object"] > WORLD * 8
        assert answer["objects"] == [{"rank": 0}, {"rank": 1}]


def _fsdp2_step(rank: int, log_dir: str) -> dict:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 6, bias=False))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    meter = ResourceMeter(log_dir, "actor")
    meter.install()
    meter.count_forwards(model)
    with meter.phase("update"):
        model(torch.randn(3, 8)).sum().backward()
    with meter.phase("log_prob"), torch.no_grad():
        model(torch.randn(3, 8))
        model(torch.randn(3, 8))
    meter.uninstall()
    return {"record": meter.record()}


def test_an_fsdp2_forward_and_backward_moves_every_layers_weights_three_times():
    # each fully_shard'ed layer is one all-gather of its unsharded parameters (fp32) in the forward, one
    # again in the backward (resharded after the forward), and one reduce-scatter of its gradients
    layer_bytes = [(8 * 8 + 8) * F32, (6 * 8) * F32]  # (dim 0 of each is a multiple of the 2 ranks: no padding)
    for answer in _on_two_ranks(_fsdp2_step):
        update = answer["record"]["phases"]["update"]
        assert update["calls"] == {"all_gather_into_tensor": 4, "reduce_scatter_tensor": 2}
        assert update["bytes"] == {
            "all_gather_into_tensor": 2 * sum(layer_bytes),
            "reduce_scatter_tensor": sum(layer_bytes),
        }
        assert update["forward_passes"] == 1
        log_prob = answer["record"]["phases"]["log_prob"]
        # no-grad forwards gather again (the root keeps nothing between forwards here: each layer resharded)
        assert log_prob["forward_passes"] == 2
        assert log_prob["calls"] == {"all_gather_into_tensor": 4}
        assert log_prob["bytes"] == {"all_gather_into_tensor": 2 * sum(layer_bytes)}


MB = 1_000_000


def test_rss_peak_sees_an_allocation_inside_the_phase_and_not_one_before_it(tmp_path):
    meter = ResourceMeter(tmp_path, "actor")
    with meter.phase("update") as update:
        held = torch.ones(50 * MB, dtype=torch.float32)  # 200 MB, written (resident)
        time.sleep(0.2)
        del held
    big = torch.ones(50 * MB, dtype=torch.float32)
    del big  # freed before the next phase opens
    with meter.phase("log_prob") as log_prob:
        time.sleep(0.05)
    assert update.rss_peak_bytes - update.rss_start_bytes >= 190 * MB
    assert log_prob.rss_peak_bytes - log_prob.rss_start_bytes < 50 * MB
    record = meter.record()["phases"]
    assert record["update"]["rss_peak_bytes"] == update.rss_peak_bytes
    assert record["log_prob"]["rss_start_bytes"] == log_prob.rss_start_bytes
    assert meter._sampler is None  # no sampler thread once no phase is open


class FakeAccelerator:
    """torch.cuda's allocated-memory statistics, driven by the test."""

    def __init__(self, allocated: int):
        self.allocated = self.peak = allocated

    def allocate(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)

    def memory_allocated(self) -> int:
        return self.allocated

    def max_memory_allocated(self) -> int:
        return self.peak

    def reset_peak_memory_stats(self) -> None:
        self.peak = self.allocated


def test_device_peaks_are_exact_per_phase_and_survive_a_nested_phases_reset(tmp_path):
    device = FakeAccelerator(allocated=100)
    meter = ResourceMeter(tmp_path, "actor", device=device)
    device.allocate(5000)  # before any phase: in none
    device.allocate(-5000)
    with meter.phase("update"):
        device.allocate(1000)  # the update's peak, before the pre-pass resets the device's peak
        device.allocate(-1000)
        with meter.phase("prepass"):
            device.allocate(200)
            device.allocate(-200)
        device.allocate(300)
        device.allocate(-300)
    record = meter.record()["phases"]
    assert (record["update"]["device_start_bytes"], record["update"]["device_peak_bytes"]) == (100, 1100)
    assert (record["prepass"]["device_start_bytes"], record["prepass"]["device_peak_bytes"]) == (100, 300)
    assert "device_peak_bytes" not in ResourceMeter(tmp_path, "actor", device=None).record()["phases"]


def test_the_record_file_its_schema_and_its_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    meter = ResourceMeter(tmp_path / "meter", "actor_rollout", device=None)
    path = tmp_path / "meter" / f"actor_rollout-rank1-pid{os.getpid()}.json"
    with meter.phase("model_init"):
        pass
    assert json.loads(path.read_text())["phases"].keys() == {"model_init"}  # written after every phase
    for _step in range(2):
        with meter.phase("weight_sync"):
            pass
        with meter.phase("log_prob"):
            pass
        with meter.phase("update"):
            with meter.phase("prepass"):
                pass
            with meter.phase("prepass"):
                pass
    with meter.phase("weight_sync"):
        pass
    record = json.loads(path.read_text())
    assert record.keys() == {"rank", "world", "host", "pid", "phases", "steps"}
    assert (record["rank"], record["world"], record["pid"]) == (1, 2, os.getpid())
    assert isinstance(record["host"], str) and record["host"]
    assert record["phases"].keys() == {"model_init", "weight_sync", "log_prob", "update", "prepass"}
    for use in record["phases"].values():
        assert use.keys() == {"calls", "bytes", "forward_passes", "rss_start_bytes", "rss_peak_bytes"}
        assert use["rss_peak_bytes"] >= use["rss_start_bytes"] > 0
    # a step: the phases after the previous update up to its own; model_init in none
    assert [step["step"] for step in record["steps"]] == [1, 2, 3]
    assert [sorted(step["phases"]) for step in record["steps"]] == [
        ["log_prob", "prepass", "update", "weight_sync"],
        ["log_prob", "prepass", "update", "weight_sync"],
        ["weight_sync"],
    ]
    assert not [name for name in os.listdir(tmp_path / "meter") if name != path.name]  # no partial files left


def test_an_unknown_phase_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown phase 'updates'.*model_init, log_prob"):
        with ResourceMeter(tmp_path, "actor").phase("updates"):
            pass


def test_uninstall_puts_torchs_collectives_back(tmp_path):
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.distributed_c10d as c10d

    before = (dist.all_reduce, c10d.all_reduce, dist.reduce_scatter_tensor, funcol.all_gather_tensor)
    meter = ResourceMeter(tmp_path, "actor")
    meter.install()
    meter.install()  # idempotent
    try:
        assert dist.all_reduce is c10d.all_reduce  # one wrapper for the one function
        assert dist.all_reduce.__wrapped__ is before[0]
        assert funcol.all_gather_tensor.__wrapped__ is before[3]
    finally:
        meter.uninstall()
    assert (dist.all_reduce, c10d.all_reduce, dist.reduce_scatter_tensor, funcol.all_gather_tensor) == before


def test_off_without_the_environment_variable(monkeypatch):
    monkeypatch.setattr(resource_meter, "_PROCESS_METER", None)
    monkeypatch.delenv(resource_meter.LOG_DIR_ENV, raising=False)
    all_reduce = dist.all_reduce
    assert resource_meter.process_meter("actor") is None
    assert resource_meter.process_meter("actor", environ={resource_meter.LOG_DIR_ENV: "  "}) is None
    assert dist.all_reduce is all_reduce
    with resource_meter.phase("update") as opened:
        assert opened is None  # a null context: nothing metered


def test_the_summary_prints_model_init_and_the_last_whole_step(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    meter = ResourceMeter(tmp_path, "actor_rollout", device=None)
    with meter.phase("model_init"):
        meter._count("broadcast", 3_000_000)
    for moved in (1_000_000, 2_000_000):
        with meter.phase("update"):
            meter._count("all_gather_into_tensor", moved)
    with meter.phase("weight_sync"):  # step 3, not whole: not printed
        meter._count("all_gather_into_tensor", 9_000_000)
    assert resource_meter.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"actor_rollout-rank0-pid{os.getpid()}.json (rank 0 of" in out and "step 2" in out
    assert "model_init   forward passes 0" in out and "broadcast 1x 3.000 MB" in out
    assert "all_gather_into_tensor 1x 2.000 MB" in out  # step 2's update, not step 1's nor the sum
    assert "weight_sync" not in out and "9.000" not in out
    with pytest.raises(SystemExit) as stopped:
        resource_meter.main([str(tmp_path / "empty")])
    assert stopped.value.code == 2
    assert "no resource-meter records" in capsys.readouterr().err


def test_a_phase_opened_inside_itself_is_that_phase_and_a_module_counts_once(tmp_path):
    # a worker method metered by a subclass and by its base opens its phase twice, nested; the hooks
    # of an init_model metered twice are registered twice
    meter = ResourceMeter(tmp_path, "actor", device=None)
    module = torch.nn.Linear(2, 2)
    meter.count_forwards(module)
    assert meter.count_forwards(module) is None
    with meter.phase("update") as outer, meter.phase("update") as inner:
        module(torch.zeros(1, 2))
        meter._count("all_reduce", 8)
    assert inner is outer
    assert [step["phases"].keys() for step in meter.record()["steps"]] == [{"update"}]
    update = meter.record()["phases"]["update"]
    assert (update["forward_passes"], update["calls"], update["bytes"]) == (1, {"all_reduce": 1}, {"all_reduce": 8})
