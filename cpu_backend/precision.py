"""bf16 only where the CPU computes it natively: the dtype rule of every CPU run.

torch computes a bfloat16 matmul on an x86-64 CPU with native kernels only where the processor
has AVX512-BF16 or AMX. On AVX512 without BF16 oneDNN emulates bf16 (converting to fp32: no faster
than fp32); on AVX2 torch falls back to a reference loop (``at::native::cpublas::cpublas_gemm_impl``).
Measured on a 2-core AMD EPYC (AVX2, torch 2.11.0): a 1024^3 matmul took 33 ms in float32 and
2,852 ms in bfloat16 (86x), and a quickstart whose actor computed in bf16 did not finish one update
in 10 minutes; on a processor with AVX512-BF16 the same update ran about twice as fast in bf16 as in
fp32. So the CPU recipes, the quickstart and the CPU
evaluation ask for ``auto`` and get:

    bf16  where a short timed probe (a matmul of the SmolLM2 MLP's shape, 256 x 576 x 1536, best
          of 3 after a warm-up) runs clearly faster in bfloat16 than in float32 (at most 0.8x),
    fp32  elsewhere.

The probe is the decision because it measures what torch actually does on this processor and
build; torch's capability query (``get_cpu_capability()``, AVX512-BF16, AMX) is recorded beside
it, and a disagreement between the two is said in the reason. A dtype set explicitly wins; a
bf16 request on a CPU without native bf16 warns once per launch with the measured slowdown.

The CPU recipes resolve their dtypes through it when ``python -m dfpo.main`` resolves the config
(``dfpo_cpu_dtype`` in ``dfpo/config/platform/cpu.yaml``; :mod:`dfpo.launch.config_resolvers`).
``python -m cpu_backend.precision --actor auto --rollout float32`` prints the resolved
``ACTOR_DTYPE=...`` and ``ROLLOUT_DTYPE=...`` lines on stdout and the choice with its reason on
stderr (or ``--json`` for the whole record).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

# The probe's matmul: 256 tokens through the SmolLM2 MLP's up projection (hidden 576 -> 1536).
PROBE_SHAPE = (256, 576, 1536)
PROBE_REPEATS = 3
# bf16 counts as native when its matmul takes at most this multiple of fp32's. Native kernels run
# bf16 about 2-3x faster than fp32 (ratio 0.3-0.5); emulated bf16 (AVX512 without BF16) about as
# fast as fp32 (ratio ~1); the AVX2 fallback loop 20-90x slower. Where bf16 is not clearly faster
# it buys nothing but rounding, so the bar is a clear margin: two processes timing the same CPU
# (the quickstart and its recipe, a test and the run it checks) fall on the same side of it.
NATIVE_MAX_RATIO = 0.8
# Stop timing bf16 once one call is this many times slower than fp32 (the fallback is seconds).
EARLY_STOP_RATIO = 4.0

# the two spellings in use: verl's fsdp_config (fp32/bf16) and vLLM/transformers (float32/bfloat16)
_SPELLINGS = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16"}
VERL_NAMES = {"float32": "fp32", "bfloat16": "bf16"}


@dataclass(frozen=True)
class CpuPrecision:
    """What this CPU computes natively, measured (times in milliseconds, best of the probe's runs)."""

    capability: str  # torch.backends.cpu.get_cpu_capability(): DEFAULT, AVX2, AVX512, ...
    avx512_bf16: bool
    amx_tile: bool
    fp32_ms: float
    bf16_ms: float
    torch_threads: int

    @property
    def bf16_slowdown(self) -> float:
        """bf16's matmul time over fp32's (below 1: bf16 is faster)."""
        return self.bf16_ms / self.fp32_ms

    @property
    def native_bf16(self) -> bool:
        return self.bf16_slowdown <= NATIVE_MAX_RATIO

    @property
    def auto_dtype(self) -> str:
        """``auto``'s answer: ``bfloat16`` where native, else ``float32``."""
        return "bfloat16" if self.native_bf16 else "float32"

    def flags(self) -> str:
        return (
            f"torch capability {self.capability}, AVX512-BF16 {'yes' if self.avx512_bf16 else 'no'}, "
            f"AMX {'yes' if self.amx_tile else 'no'}"
        )

    def reason(self) -> str:
        """Why ``auto`` chose what it chose, with the measurement."""
        m, k, n = PROBE_SHAPE
        measured = (
            f"a {m}x{k}x{n} matmul on {self.torch_threads} threads took {self.fp32_ms:.2f} ms in float32 "
            f"and {self.bf16_ms:.2f} ms in bfloat16 ({self.bf16_slowdown:.2f}x)"
        )
        verdict = "native bf16" if self.native_bf16 else "no native bf16"
        text = f"{verdict}: {measured}; {self.flags()}"
        if (self.avx512_bf16 or self.amx_tile) != self.native_bf16:
            text += " (the capability flags say otherwise; the timing decides)"
        return text

    def record(self) -> dict:
        """The measurement as a run report records it."""
        return {
            **asdict(self),
            "probe_shape": list(PROBE_SHAPE),
            "bf16_slowdown": round(self.bf16_slowdown, 3),
            "native_bf16": self.native_bf16,
        }


def _best_ms(matmul, a, b, repeats: int, give_up_ms: float | None = None) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        matmul(a, b)
        best = min(best, 1000.0 * (time.perf_counter() - started))
        if give_up_ms is not None and best > give_up_ms:
            break
    return best


@lru_cache(maxsize=1)
def probe() -> CpuPrecision:
    """Measure this CPU once per process (about 0.1 s with native bf16, about 1 s without)."""
    import torch

    m, k, n = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    a32 = torch.randn(m, k, generator=generator)
    b32 = torch.randn(k, n, generator=generator)
    a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
    with torch.no_grad():
        torch.matmul(a32, b32)  # warm-up: thread pool, oneDNN's kernel selection
        fp32_ms = _best_ms(torch.matmul, a32, b32, PROBE_REPEATS)
        torch.matmul(a16, b16)
        bf16_ms = _best_ms(torch.matmul, a16, b16, PROBE_REPEATS, give_up_ms=EARLY_STOP_RATIO * fp32_ms)
    return CpuPrecision(
        capability=str(torch.backends.cpu.get_cpu_capability()),
        avx512_bf16=bool(torch.cpu._is_avx512_bf16_supported()),
        amx_tile=bool(torch.cpu._is_amx_tile_supported()),
        fp32_ms=round(fp32_ms, 3),
        bf16_ms=round(bf16_ms, 3),
        torch_threads=torch.get_num_threads(),
    )


class PrecisionError(ValueError):
    pass


@dataclass(frozen=True)
class Choice:
    """One resolved dtype: what was asked for, what runs, and why."""

    knob: str  # the setting's name, e.g. ACTOR_DTYPE or --dtype
    requested: str  # auto, or an explicit dtype as written
    dtype: str  # float32 or bfloat16
    reason: str
    warning: str | None  # set when an explicit bf16 runs on a CPU without native bf16

    def record(self) -> dict:
        return {
            "requested": self.requested,
            "dtype": self.dtype,
            "reason": self.reason,
            **({"warning": self.warning} if self.warning else {}),
        }

    def line(self) -> str:
        """How a launch says it: ``KNOB=requested -> dtype (reason)``."""
        return f"{self.knob}={self.requested} -> {self.dtype} ({self.reason})"


def record(choices: dict[str, Choice]) -> dict:
    """A run report's record of its dtypes: each choice by name, and this CPU's measurement under
    ``cpu`` when a choice took one."""
    payload = {name: choice.record() for name, choice in choices.items()}
    if probe.cache_info().currsize:
        payload["cpu"] = probe().record()
    return payload


def normalise(knob: str, value: str) -> str:
    """``auto``, ``float32`` or ``bfloat16`` from any accepted spelling; else a clear error."""
    if value == "auto":
        return value
    if value not in _SPELLINGS:
        raise PrecisionError(f"{knob} must be auto, fp32/float32 or bf16/bfloat16, got '{value}'")
    return _SPELLINGS[value]


def choose(knob: str, requested: str, measured: CpuPrecision | None = None) -> Choice:
    """The rule: ``auto`` -> bf16 where native, else fp32; an explicit dtype wins (bf16 without
    native support with a warning that gives the measured cost). ``measured``: a probe to use
    instead of measuring (tests); fp32 asked explicitly needs no probe."""
    wanted = normalise(knob, requested)
    if wanted == "float32":
        return Choice(knob, requested, "float32", "as set", None)
    measured = measured or probe()
    if wanted == "auto":
        return Choice(knob, requested, measured.auto_dtype, f"auto: {measured.reason()}", None)
    warning = None
    if not measured.native_bf16:
        warning = (
            f"{knob}={requested} on a CPU without native bf16: bfloat16 matmuls measured {measured.bf16_slowdown:.0f}x "
            f"slower than float32 here ({measured.flags()}); expect the run to take many times longer. "
            f"Unset {knob} (auto) or set it to float32/fp32."
        )
    return Choice(knob, requested, "bfloat16", "as set", warning)


def for_checkpoint(knob: str, requested: str, declared: str | None, measured: CpuPrecision | None = None) -> Choice:
    """A CPU evaluation's dtype. ``auto`` is the checkpoint's own (``declared``, what transformers
    loads), except a bfloat16 checkpoint on a CPU without native bf16, which is computed in
    float32; an explicit float32 or bfloat16 is :func:`choose`'s; any other dtype passes as set."""
    if requested == "auto":
        if declared != "bfloat16":
            return Choice(knob, requested, declared or "auto", "the checkpoint's own dtype", None)
        measured = measured or probe()
        if measured.native_bf16:
            return Choice(knob, requested, "bfloat16", f"the checkpoint's own dtype; {measured.reason()}", None)
        return Choice(
            knob, requested, "float32", f"a bfloat16 checkpoint computed in float32: {measured.reason()}", None
        )
    if requested in _SPELLINGS:
        return choose(knob, requested, measured)
    return Choice(knob, requested, requested, "as set", None)


def announce(choice: Choice, prefix: str = "dfpo precision") -> None:
    """Say the choice on stderr (once per launch: callers announce each knob once)."""
    print(f"{prefix}: {choice.line()}", file=sys.stderr, flush=True)
    if choice.warning:
        print(f"{prefix} warning: {choice.warning}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpu_backend.precision", description=__doc__.split("\n\n")[0])
    parser.add_argument("--actor", default="auto", help="ACTOR_DTYPE as set (auto, fp32, bf16)")
    parser.add_argument("--rollout", default="float32", help="ROLLOUT_DTYPE as set (auto, float32, bfloat16)")
    parser.add_argument("--json", action="store_true", help="print the probe and both choices as JSON instead")
    args = parser.parse_args(argv)
    try:
        actor = choose("ACTOR_DTYPE", args.actor)
        rollout = choose("ROLLOUT_DTYPE", args.rollout)
    except PrecisionError as error:
        print(f"dfpo recipe error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(record({"actor": actor, "rollout": rollout}), indent=2))
        return 0
    announce(actor)
    announce(rollout)
    print(f"ACTOR_DTYPE={VERL_NAMES[actor.dtype]}")
    print(f"ROLLOUT_DTYPE={rollout.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
