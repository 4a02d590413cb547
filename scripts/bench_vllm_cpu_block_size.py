"""Benchmark: vLLM's KV-cache block size on CPU, and what prefix caching then saves, in one run.

    python scripts/bench_vllm_cpu_block_size.py [--output-root /tmp/bench_block_size] [--block-sizes 128 32]

vLLM's CPU backend uses KV blocks of 128 tokens unless told otherwise, and its prefix cache reuses
only whole blocks: the quickstart's prompts are 101-104 tokens, so with the default no prompt ever
reuses another's computation, although the k samples of a prompt share all of it and every prompt
shares the system turn and the demonstration. This runs the quickstart's two rollout workloads on
its own model (SmolLM2-135M-Instruct under ``--output-root``), through vLLM's offline engine with
the settings verl's CPU rollout uses (float32, eager, max_model_len 120, max_num_batched_tokens
480, prefix caching on), once per block size, each in a fresh process:

* validation: the 41 held-out prompts x 8 samples at temperature 0.6, each sample its own request
  (as verl's agent loop sends them), 16 new tokens;
* a training step: 4 training prompts x 8 samples at temperature 1.0.

Prints and writes ``benchmarks/results/vllm_cpu_block_size-<UTC time>-<cpu capability>.json``: the
seconds of each workload per block size (best of ``--repeats``, after a warm-up request), the
prefix cache's hit rate where vLLM reports it, and the ratio to the first block size (the anchor,
vLLM's default).
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
MAX_PROMPT, MAX_NEW = 104, 16


def prompts(model_dir: Path, parquet: Path, rows: int | None) -> list[str]:
    import pandas as pd
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    frame = pd.read_parquet(parquet)
    frame = frame.iloc[:rows] if rows else frame
    return [tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False) for p in frame["prompt"]]


def measure(model_dir: Path, train: Path, test: Path, block_size: int, repeats: int) -> dict:
    """One engine with ``block_size``: the two workloads' seconds (in this process)."""
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(model_dir), dtype="float32", enforce_eager=True, max_model_len=MAX_PROMPT + MAX_NEW,
        max_num_batched_tokens=(MAX_PROMPT + MAX_NEW) * 4, enable_prefix_caching=True, block_size=block_size, seed=1,
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
            outputs = llm.generate(requests, SamplingParams(temperature=temperature, max_tokens=MAX_NEW), use_tqdm=False)
            best = min(best, time.perf_counter() - started)
        generated = sum(len(o.outputs[0].token_ids) for o in outputs)
        cached = sum(o.num_cached_tokens or 0 for o in outputs)
        prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
        result[name] = {
            "requests": len(requests), "seconds": round(best, 2), "generated_tokens": generated,
            "prompt_tokens": prompt_tokens, "cached_prompt_tokens": cached,
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", type=Path, default=Path("/tmp/bench_block_size"))
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[128, 32], help="the first is the anchor (vLLM's CPU default: 128)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one block size in this process
    args = parser.parse_args(argv)
    from dfpo.examples.prepare import prepare_pretrained

    model_dir, train, test = prepare_pretrained(args.output_root.resolve(), log=lambda message: print(message, file=sys.stderr))
    if args.one is not None:
        print(json.dumps(measure(model_dir, train, test, args.one, args.repeats)))
        return 0
    from dfpo.benchmark_record import environment, write_result
    from dfpo.cpu.cpu_precision import probe
    from dfpo.cpu.vllm_cpu import omp_threads_bind

    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": omp_threads_bind(1, sorted(os.sched_getaffinity(0)))}
    runs = {}
    for block_size in args.block_sizes:
        done = subprocess.run(
            [sys.executable, __file__, "--output-root", str(args.output_root), "--repeats", str(args.repeats), "--one", str(block_size)],
            env=env, capture_output=True, text=True, cwd=REPO_ROOT,
        )
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            return 1
        runs[str(block_size)] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"block size {block_size}: {runs[str(block_size)]}", file=sys.stderr)
    anchor = runs[str(args.block_sizes[0])]
    ratios = {size: {name: round(run[name]["seconds"] / anchor[name]["seconds"], 3) for name in run} for size, run in runs.items()}
    result = {
        "benchmark": "vllm_cpu_block_size",
        "command": "python scripts/bench_vllm_cpu_block_size.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": environment(),
        "settings": {"dtype": "float32", "enforce_eager": True, "max_model_len": MAX_PROMPT + MAX_NEW, "max_num_batched_tokens": (MAX_PROMPT + MAX_NEW) * 4,
                     "enable_prefix_caching": True, "VLLM_CPU_KVCACHE_SPACE": env["VLLM_CPU_KVCACHE_SPACE"], "VLLM_CPU_OMP_THREADS_BIND": env["VLLM_CPU_OMP_THREADS_BIND"]},
        "by_block_size": runs,
        "seconds_over_anchor": ratios,
    }
    path = write_result("vllm_cpu_block_size", probe().capability, result)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
