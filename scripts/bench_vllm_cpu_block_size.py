"""Benchmark: vLLM's KV-cache block size on CPU, and what prefix caching then saves, in one run.

    python scripts/bench_vllm_cpu_block_size.py [--output-root /tmp/bench_block_size]
        [--block-sizes 128 32] [--dtypes float32 bfloat16]

vLLM's CPU backend uses KV blocks of 128 tokens unless told otherwise, and its prefix cache reuses
only whole blocks: the quickstart's prompts are 101-104 tokens, so with the default no prompt ever
reuses another's computation, although the k samples of a prompt share all of it and every prompt
shares the system turn and the demonstration. This runs the quickstart's two rollout workloads on
its own model (SmolLM2-135M-Instruct under ``--output-root``), through vLLM's offline engine with
the settings verl's CPU rollout uses (eager, max_model_len and max_num_batched_tokens from the
quickstart's sequence length, prefix caching on), once per block size in the first ``--dtypes``
(default float32), then at the last block size in each further dtype, each in a fresh process:

* validation: the 41 held-out prompts x 8 samples at temperature 0.6, each sample its own request
  (as verl's agent loop sends them), 16 new tokens;
* a training step: 4 training prompts x 8 samples at temperature 1.0.

Prints and writes ``benchmarks/results/vllm_cpu_block_size-<UTC time>-<cpu capability>.json``: the
seconds of each workload per block size (best of ``--repeats``, after a warm-up request), the
prefix cache's hit rate where vLLM reports it, and the ratio to the first block size (the anchor,
vLLM's default); with several ``--dtypes``, each dtype's seconds at the last block size and their
ratio to the first dtype's (``bfloat16`` is what ``ROLLOUT_DTYPE=auto`` picks where the processor
computes it natively).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_NEW = 16


def prompts(model_dir: Path, parquet: Path, rows: int | None) -> list[str]:
    import pandas as pd
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    frame = pd.read_parquet(parquet)
    frame = frame.iloc[:rows] if rows else frame
    return [tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False) for p in frame["prompt"]]


def sequence_tokens() -> int:
    """The quickstart's sequence length: the SmolLM2 model file's prompt and response lengths."""
    import yaml

    data = yaml.safe_load((REPO_ROOT / "dfpo/config/base_model/smollm2_135m_cpu.yaml").read_text())["data"]
    return int(data["max_prompt_length"]) + int(data["max_response_length"])


def measure(model_dir: Path, train: Path, test: Path, block_size: int, repeats: int, dtype: str = "float32") -> dict:
    """One engine with ``block_size`` in ``dtype``: the two workloads' seconds (in this process)."""
    from vllm import LLM, SamplingParams

    tokens = sequence_tokens()
    llm = LLM(
        model=str(model_dir),
        dtype=dtype,
        enforce_eager=True,
        max_model_len=tokens,
        max_num_batched_tokens=tokens * 4,
        enable_prefix_caching=True,
        block_size=block_size,
        seed=1,
    )
    workloads = {
        "validation_41x8": (prompts(model_dir, test, None), 8, 0.6),
        "training_step_4x8": (prompts(model_dir, train, 4), 8, 1.0),
    }
    llm.generate(["warm-up"], SamplingParams(max_tokens=2), use_tqdm=False)
    result = {}
    for name, (texts, k, temperature) in workloads.items():
        requests = [text for text in texts for _ in range(k)]  # each sample its own request, as verl sends them
        best = float("inf")
        for _ in range(repeats):
            llm.reset_prefix_cache()
            started = time.perf_counter()
            outputs = llm.generate(
                requests, SamplingParams(temperature=temperature, max_tokens=MAX_NEW), use_tqdm=False
            )
            best = min(best, time.perf_counter() - started)
        generated = sum(len(o.outputs[0].token_ids) for o in outputs)
        cached = sum(o.num_cached_tokens or 0 for o in outputs)
        prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
        result[name] = {
            "requests": len(requests),
            "seconds": round(best, 2),
            "generated_tokens": generated,
            "prompt_tokens": prompt_tokens,
            "cached_prompt_tokens": cached,
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", type=Path, default=Path("/tmp/bench_block_size"))
    parser.add_argument(
        "--block-sizes",
        type=int,
        nargs="+",
        default=[128, 32],
        help="the first is the anchor (vLLM's CPU default: 128)",
    )
    parser.add_argument(
        "--dtypes", nargs="+", choices=("float32", "bfloat16"), default=["float32"], help="the first is the anchor"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one block size in this process
    parser.add_argument("--one-dtype", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from cpu_examples.prepare import prepare_pretrained

    model_dir, train, test = prepare_pretrained(
        args.output_root.resolve(), log=lambda message: print(message, file=sys.stderr)
    )
    if args.one is not None:
        print(json.dumps(measure(model_dir, train, test, args.one, args.repeats, args.one_dtype)))
        return 0
    from benchmark_record import environment, write_result

    from cpu_backend.precision import probe
    from cpu_backend.vllm_cpu import omp_threads_bind

    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": omp_threads_bind(1, sorted(os.sched_getaffinity(0))),
    }

    def one(block_size: int, dtype: str) -> dict | None:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--output-root",
                str(args.output_root),
                "--repeats",
                str(args.repeats),
                "--one",
                str(block_size),
                "--one-dtype",
                dtype,
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        )
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            return None
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"block size {block_size}, {dtype}: {measured}", file=sys.stderr)
        return measured

    runs = {}
    for block_size in args.block_sizes:
        runs[str(block_size)] = one(block_size, args.dtypes[0])
        if runs[str(block_size)] is None:
            return 1
    last = str(args.block_sizes[-1])
    by_dtype = {args.dtypes[0]: runs[last]}
    for dtype in args.dtypes[1:]:
        by_dtype[dtype] = one(int(last), dtype)
        if by_dtype[dtype] is None:
            return 1
    anchor = runs[str(args.block_sizes[0])]
    ratios = {
        size: {name: round(run[name]["seconds"] / anchor[name]["seconds"], 3) for name in run}
        for size, run in runs.items()
    }
    tokens = sequence_tokens()
    result = {
        "benchmark": "vllm_cpu_block_size",
        "command": "python scripts/bench_vllm_cpu_block_size.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": environment(),
        "settings": {
            "dtype": args.dtypes[0],
            "enforce_eager": True,
            "max_model_len": tokens,
            "max_num_batched_tokens": tokens * 4,
            "enable_prefix_caching": True,
            "VLLM_CPU_KVCACHE_SPACE": env["VLLM_CPU_KVCACHE_SPACE"],
            "VLLM_CPU_OMP_THREADS_BIND": env["VLLM_CPU_OMP_THREADS_BIND"],
        },
        "by_block_size": runs,
        "seconds_over_anchor": ratios,
    }
    if len(args.dtypes) > 1:
        result["dtype_block_size"] = int(last)
        result["by_dtype"] = by_dtype
        result["dtype_seconds_over_anchor"] = {
            dtype: {name: round(run[name]["seconds"] / by_dtype[args.dtypes[0]][name]["seconds"], 3) for name in run}
            for dtype, run in by_dtype.items()
        }
    path = write_result("vllm_cpu_block_size", probe().capability, result)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
