"""The CPU precision rule (``cpu_backend.precision``): bf16 only where this CPU computes it natively.

The rule's branches are checked with measurements made up for each kind of processor (so they run
the same on any machine); the real probe is checked against the workload it stands for, and every
launch path (the CPU recipe, the quickstart, the evaluation backends) is checked to apply the rule
to this machine's own measurement, whichever kind it is: these tests assert the rule, not a dtype.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from cpu_backend import precision as cp
from quickstart import pipeline as quickstart
from tests.e2e.recipe_runs import REPO_ROOT

# made-up measurements of the two kinds (times of the probe's matmul, ms)
NATIVE = cp.CpuPrecision("AVX512", avx512_bf16=True, amx_tile=False, fp32_ms=9.0, bf16_ms=3.5, torch_threads=2)
AVX2 = cp.CpuPrecision("AVX2", avx512_bf16=False, amx_tile=False, fp32_ms=7.0, bf16_ms=602.0, torch_threads=2)


def test_auto_is_bf16_where_native_and_fp32_elsewhere():
    assert cp.choose("ACTOR_DTYPE", "auto", NATIVE).dtype == "bfloat16"
    avx2 = cp.choose("ACTOR_DTYPE", "auto", AVX2)
    assert avx2.dtype == "float32" and avx2.warning is None
    assert "no native bf16" in avx2.reason and "602.00 ms in bfloat16" in avx2.reason and "AVX2" in avx2.reason


def test_bf16_must_be_clearly_faster_than_fp32():
    at_the_bar = cp.CpuPrecision("AVX512", True, False, fp32_ms=5.0, bf16_ms=4.0, torch_threads=1)
    emulated = cp.CpuPrecision("AVX512", False, False, fp32_ms=5.0, bf16_ms=5.0, torch_threads=1)  # AVX512 without BF16
    barely = cp.CpuPrecision("AVX512", True, False, fp32_ms=5.0, bf16_ms=4.5, torch_threads=1)
    assert cp.choose("X", "auto", at_the_bar).dtype == "bfloat16"
    assert cp.choose("X", "auto", emulated).dtype == "float32"
    assert cp.choose("X", "auto", barely).dtype == "float32"


def test_an_explicit_dtype_wins_and_bf16_without_native_support_warns_with_the_cost():
    assert cp.choose("ACTOR_DTYPE", "fp32", NATIVE).dtype == "float32"
    quiet = cp.choose("ACTOR_DTYPE", "bf16", NATIVE)
    assert (quiet.dtype, quiet.warning) == ("bfloat16", None)
    loud = cp.choose("ACTOR_DTYPE", "bf16", AVX2)
    assert loud.dtype == "bfloat16"
    assert "86x slower than float32" in loud.warning and "ACTOR_DTYPE" in loud.warning


def test_explicit_fp32_measures_nothing(monkeypatch):
    monkeypatch.setattr(cp, "probe", lambda: pytest.fail("probed for an explicit float32"))
    assert cp.choose("ROLLOUT_DTYPE", "float32").dtype == "float32"


def test_the_timing_decides_when_the_flags_disagree():
    flags_only = cp.CpuPrecision("AVX512", avx512_bf16=True, amx_tile=False, fp32_ms=5.0, bf16_ms=90.0, torch_threads=2)
    choice = cp.choose("ACTOR_DTYPE", "auto", flags_only)
    assert choice.dtype == "float32" and "the timing decides" in choice.reason
    assert "the timing decides" not in cp.choose("ACTOR_DTYPE", "auto", NATIVE).reason


@pytest.mark.parametrize("value", ["fp16", "float16", "BF16", ""])
def test_an_unknown_dtype_is_refused_by_name(value):
    with pytest.raises(
        cp.PrecisionError, match=f"ACTOR_DTYPE must be auto, fp32/float32 or bf16/bfloat16, got '{value}'"
    ):
        cp.choose("ACTOR_DTYPE", value, NATIVE)


@pytest.mark.parametrize(
    ("requested", "declared", "measured", "expected"),
    [
        ("auto", "float32", AVX2, "float32"),
        ("auto", "bfloat16", AVX2, "float32"),  # a bf16 checkpoint computed in fp32 without native bf16
        ("auto", "bfloat16", NATIVE, "bfloat16"),
        ("auto", None, AVX2, "auto"),
        ("bfloat16", "float32", AVX2, "bfloat16"),  # explicit wins (with the warning)
        ("float16", "bfloat16", AVX2, "float16"),
    ],
)
def test_a_cpu_evaluation_uses_the_checkpoints_dtype_unless_it_is_bf16_without_native_support(
    requested, declared, measured, expected
):
    assert cp.for_checkpoint("--dtype", requested, declared, measured).dtype == expected


def test_the_probe_measures_this_cpu():
    measured = cp.probe()
    assert measured is cp.probe()  # once per process
    assert measured.fp32_ms > 0 and measured.bf16_ms > 0 and measured.torch_threads == torch.get_num_threads()
    assert measured.capability == torch.backends.cpu.get_cpu_capability()
    assert measured.avx512_bf16 == torch.cpu._is_avx512_bf16_supported()
    record = measured.record()
    assert record["native_bf16"] == measured.native_bf16 and record["probe_shape"] == list(cp.PROBE_SHAPE)


def _training_pass_seconds(dtype: torch.dtype) -> float:
    """A forward and backward of a SmolLM2 MLP on 256 tokens, in ``dtype`` (best of 2)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 576, generator=generator).to(dtype)
    up = torch.randn(576, 1536, generator=generator).to(dtype).requires_grad_()
    down = torch.randn(1536, 576, generator=generator).to(dtype).requires_grad_()
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        (torch.nn.functional.silu(x @ up) @ down).square().mean().backward()
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.serial  # it times matmuls: a test running beside it would skew the comparison
def test_the_probes_verdict_predicts_which_dtype_trains_faster_here():
    """The seam: the probe stands for the actor's forward and backward; on this machine, whichever
    kind it is, the dtype it picks must be the one a training pass runs faster in."""
    measured = cp.probe()
    fp32, bf16 = _training_pass_seconds(torch.float32), _training_pass_seconds(torch.bfloat16)
    faster = "bfloat16" if bf16 < fp32 else "float32"
    # where neither is 1.5x faster than the other either choice is defensible; beyond, the probe must agree
    if max(fp32, bf16) > 1.5 * min(fp32, bf16):
        assert measured.auto_dtype == faster, (
            f"probe: {measured.reason()}; training pass fp32 {fp32:.3f} s, bf16 {bf16:.3f} s"
        )


@pytest.mark.slow  # three fresh interpreters importing torch: about 13 s
def test_the_cli_prints_the_recipe_knobs_and_says_why():
    explicit = subprocess.run(
        [sys.executable, "-m", "cpu_backend.precision", "--actor", "fp32", "--rollout", "float32"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert explicit.stdout.splitlines() == ["ACTOR_DTYPE=fp32", "ROLLOUT_DTYPE=float32"]
    assert "ACTOR_DTYPE=fp32 -> float32 (as set)" in explicit.stderr
    auto = subprocess.run(
        [sys.executable, "-m", "cpu_backend.precision", "--actor", "auto", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    payload = json.loads(auto.stdout)
    expected = "bfloat16" if payload["cpu"]["native_bf16"] else "float32"
    assert payload["actor"]["dtype"] == expected and payload["cpu"]["native_bf16"] == cp.probe().native_bf16
    bad = subprocess.run(
        [sys.executable, "-m", "cpu_backend.precision", "--actor", "fp16"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "ACTOR_DTYPE must be auto" in bad.stderr


SMOLLM2 = "run_dfpo_min_replace_smollm2_135m_cpu.sh"


def _resolved(extra: dict[str, str]):
    """The SmolLM2 recipe's config as python -m dfpo.main resolves it on this machine under the
    knobs ``extra`` (the dtype choice made afresh, so that it is said again)."""
    from dfpo.launch import config_resolvers
    from tests.recipes.recipe_commands import dry_run, resolved_config

    config_resolvers._cpu_choice.cache_clear()
    (command,) = dry_run(SMOLLM2, OUTPUT_ROOT="/tmp/dfpo-precision-dry-run", **extra)
    return resolved_config(command.overrides)


def test_the_smollm2_recipe_resolves_auto_by_the_rule_and_says_so(capfd):
    cfg = _resolved({})
    native = cp.probe().native_bf16
    fsdp = cfg.actor_rollout_ref.actor.fsdp_config
    assert fsdp.mixed_precision.param_dtype == ("bf16" if native else "fp32")
    assert fsdp.model_dtype == "fp32"  # master weights stay fp32 either way
    assert "dfpo precision: ACTOR_DTYPE=auto -> " + ("bfloat16" if native else "float32") in capfd.readouterr().err


def test_the_smollm2_recipe_runs_an_explicit_bf16_and_warns_only_without_native_support(capfd):
    cfg = _resolved({"ACTOR_DTYPE": "bf16"})
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    assert ("dfpo precision warning: ACTOR_DTYPE=bf16 on a CPU without native bf16" in capfd.readouterr().err) == (
        not cp.probe().native_bf16
    )


def test_rollout_dtype_auto_reaches_vllms_engine_by_the_rule(capfd):
    cfg = _resolved({"ROLLOUT_DTYPE": "auto", "ACTOR_DTYPE": "fp32"})
    assert cfg.actor_rollout_ref.rollout.dtype == cp.probe().auto_dtype
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert "ROLLOUT_DTYPE=auto -> " in capfd.readouterr().err


def test_a_bad_dtype_stops_the_recipe_before_anything_starts():
    env = {k: v for k, v in os.environ.items() if k not in ("ACTOR_DTYPE", "ROLLOUT_DTYPE")}
    run = subprocess.run(
        ["bash", f"recipes/{SMOLLM2}"],
        cwd=REPO_ROOT,
        env={**env, "DRY_RUN": "1", "PYTHON": sys.executable, "ACTOR_DTYPE": "fp16"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        run.returncode != 0
        and run.stdout == ""
        and "ACTOR_DTYPE must be one of auto, fp32, bf16, got 'fp16'" in run.stderr
    )


def test_the_quickstart_resolves_once_records_why_and_names_runs_by_dtype(tmp_path):
    precision = quickstart.Precision.resolve("auto", "float32")
    native = cp.probe().native_bf16
    assert precision.recipe_env() == {"ACTOR_DTYPE": "bf16" if native else "fp32", "ROLLOUT_DTYPE": "float32"}
    record = precision.record()
    assert record["actor"]["requested"] == "auto" and record["actor"]["reason"].startswith("auto: ")
    assert record["cpu"]["native_bf16"] == native
    method = quickstart.METHODS[0]
    fp32 = quickstart.experiment_name(method, tmp_path, 10, 1, (), {"ACTOR_DTYPE": "fp32", "GPUS_PER_NODE": "1"})
    bf16 = quickstart.experiment_name(method, tmp_path, 10, 1, (), {"ACTOR_DTYPE": "bf16", "GPUS_PER_NODE": "1"})
    two_ranks = quickstart.experiment_name(method, tmp_path, 10, 1, (), {"ACTOR_DTYPE": "fp32", "GPUS_PER_NODE": "2"})
    rollout_bf16 = quickstart.experiment_name(
        method, tmp_path, 10, 1, (), {"ACTOR_DTYPE": "fp32", "ROLLOUT_DTYPE": "bfloat16", "GPUS_PER_NODE": "1"}
    )
    # the held-out samples are the run's validation: another k is another run (a rerun never reuses it)
    other_k = quickstart.experiment_name(
        method,
        tmp_path,
        10,
        1,
        (),
        {"ACTOR_DTYPE": "fp32", "GPUS_PER_NODE": "1", **quickstart.validation_knobs(4, True)},
    )
    assert len({fp32, bf16, two_ranks, rollout_bf16, other_k}) == 5


def test_a_bad_dtype_in_the_environment_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("ACTOR_DTYPE", "fp16")
    with pytest.raises(SystemExit) as stopped:
        quickstart.main(["--output-root", "/tmp/unused-quickstart"])
    assert stopped.value.code == 2 and "ACTOR_DTYPE must be auto" in capsys.readouterr().err


def test_the_quickstart_passes_the_resolved_dtypes_to_the_recipe(tmp_path, monkeypatch):
    calls = []

    def fake_run_logged(command, log, env=None, on_poll=None):
        calls.append(env)
        on_poll.seen.update({1})

    monkeypatch.setattr(quickstart, "run_logged", fake_run_logged)
    precision = quickstart.Precision(cp.choose("ACTOR_DTYPE", "auto", AVX2), cp.choose("ROLLOUT_DTYPE", "float32"))
    quickstart.train(quickstart.METHODS[0], tmp_path, steps=1, ranks=1, seed=1, knobs=precision.recipe_env())
    (env,) = calls
    assert (env["ACTOR_DTYPE"], env["ROLLOUT_DTYPE"], env["GPUS_PER_NODE"]) == ("fp32", "float32", "1")
    assert env["EXPERIMENT_NAME"] == quickstart.experiment_name(
        quickstart.METHODS[0],
        tmp_path,
        1,
        1,
        (),
        {"ACTOR_DTYPE": "fp32", "ROLLOUT_DTYPE": "float32", "GPUS_PER_NODE": "1"},
    )


def test_an_explicit_fp32_is_not_announced_as_auto(capfd):
    """The SmolLM2 file asks for auto; ACTOR_DTYPE=fp32 wins, and only what runs is said."""
    cfg = _resolved({"ACTOR_DTYPE": "fp32"})
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert "ACTOR_DTYPE=auto" not in capfd.readouterr().err
