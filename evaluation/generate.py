"""Sample k responses per problem from a model, score them, and write the run's files.

    python -m evaluation.generate --model /path/to/hf_model \\
        --data ~/data/dfpo/aime25.parquet ~/data/dfpo/hmmt25.parquet \\
        --output-dir runs/qwen3_32b_dfpo_s0 --backend vllm --tensor-parallel-size 8 \\
        --preset qwen3-thinking --k 32 --seed 0

With vLLM's CPU build the same command runs on CPU (``--enforce-eager`` and a 1 GiB KV cache
are then the defaults; see ``backends/vllm_backend.py``).

Problems are processed in chunks; while the scorer's worker processes score one chunk, the
backend generates the next. Each finished problem is flushed to ``samples.jsonl`` at once, so
the same command run again after an interruption skips the problems already done. The run's
files are described in ``run_store.py``; the metrics in ``summary.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.backends import BACKEND_NAMES, Completion, GenerationBackend, GenerationRequest, build_backend
from evaluation.backends.vllm_backend import check_vllm_sampling
from evaluation.problems import EvalProblem, file_sha256, load_problems
from evaluation.run_store import RunStore, read_samples
from evaluation.sampling_settings import PRESETS, derive_seed, preset
from evaluation.scoring import DEFAULT_SCORER, ParallelScorer, ScoreJob, scorer_version
from evaluation.summary import summarize
from reward.response_format import RESPONSE_FORMATS, TRUNCATED_KEY, template_response_format


def make_request(problem: EvalProblem, k: int, base_seed: int) -> GenerationRequest:
    """The generation request of one problem, with its per-sample and per-problem seeds."""
    return GenerationRequest(
        problem_id=problem.problem_id,
        messages=problem.messages,
        seeds=[derive_seed(base_seed, problem.problem_id, j) for j in range(k)],
        problem_seed=derive_seed(base_seed, problem.problem_id),
    )


def _jobs(problem: EvalProblem, completions: list[Completion]) -> list[ScoreJob]:
    # the cut-off flag verl's training reward gets from reward/verl_reward_manager.py, from the backend here
    return [
        ScoreJob(
            problem.problem_id,
            j,
            problem.data_source,
            c.text,
            problem.ground_truth,
            {**problem.extra_info, TRUNCATED_KEY: c.truncated},
        )
        for j, c in enumerate(completions)
    ]


def _records(problem: EvalProblem, completions: list[Completion], scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "problem_id": problem.problem_id,
            "data_source": problem.data_source,
            "difficulty": problem.difficulty,
            "row": problem.row,
            "sample_index": j,
            "seed": c.seed,
            "response": c.text,
            "num_tokens": c.num_tokens,
            "truncated": c.truncated,
            **scores[j],
        }
        for j, c in enumerate(completions)
    ]


def run_evaluation(
    problems: Sequence[EvalProblem],
    backend: GenerationBackend,
    scorer: ParallelScorer,
    store: RunStore,
    k: int,
    base_seed: int,
    chunk_size: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Generate and score every problem not yet in ``store``; return the run's summary."""
    from tqdm import tqdm

    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    done = store.open()
    unknown = done - {p.problem_id for p in problems}
    if unknown:
        raise ValueError(f"{store.samples_path} holds problems that are not in the data: {sorted(unknown)[:5]}")
    pending = [p for p in problems if p.problem_id not in done]
    chunks = [pending[i : i + chunk_size] for i in range(0, len(pending), chunk_size)]
    bar = tqdm(total=len(problems), initial=len(done), unit="problem", desc="evaluate", disable=not progress)

    def finish(
        chunk: list[EvalProblem], outputs: list[list[Completion]], jobs: list[list[ScoreJob]], handles: list[list[Any]]
    ) -> None:
        for problem, completions, p_jobs, p_handles in zip(chunk, outputs, jobs, handles, strict=True):
            scores = scorer.collect(p_jobs, p_handles)
            store.append_problem(_records(problem, completions, scores))
            bar.update(1)

    in_flight: tuple | None = None
    try:
        for chunk in chunks:
            try:
                outputs = backend.generate([make_request(p, k, base_seed) for p in chunk])
            except BaseException:
                if in_flight is not None:  # keep the chunk that was already generated and scored
                    finish(*in_flight)
                raise
            if len(outputs) != len(chunk) or any(len(o) != k for o in outputs):
                raise RuntimeError(
                    f"the backend returned {[len(o) for o in outputs]} samples for {len(chunk)} problems, k={k}"
                )
            jobs = [_jobs(p, o) for p, o in zip(chunk, outputs, strict=True)]
            handles = [scorer.submit(j) for j in jobs]
            if in_flight is not None:
                finish(*in_flight)
            in_flight = (chunk, outputs, jobs, handles)
        if in_flight is not None:
            finish(*in_flight)
    finally:
        bar.close()
    summary = summarize(read_samples(store.run_dir), k)
    summary = {"manifest": store.manifest, **summary}
    store.write_summary(summary)
    return summary


def scorer_format_kwargs(args: argparse.Namespace, tokenizer, chat_template_kwargs: dict | None) -> dict[str, str]:
    """The ``response_format`` reward/'s scorer gets: ``--response-format``, or read off the model's
    tokenizer and chat template (``auto``), so avg@k reads responses as the training reward does.
    Empty for another scorer, which gets the whole response."""
    chosen = args.response_format
    if chosen == "auto":
        chosen = template_response_format(tokenizer, chat_template_kwargs)
    given = args.scorer_kwargs.get("response_format")
    if given is not None and given != chosen:
        raise SystemExit(
            f"--scorer-kwargs sets response_format={given!r} but the responses are {chosen!r} "
            f"(--response-format {args.response_format}); drop one of them or make them agree"
        )
    if args.scorer.partition(":")[0] != DEFAULT_SCORER.partition(":")[0]:
        if chosen != "plain":
            print(f"note: the responses are {chosen!r}; the scorer {args.scorer} gets them whole", file=sys.stderr)
        return {}
    print(f"scoring the {chosen} response format (reward/response_format.py)")
    return {"response_format": chosen}


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog="python -m evaluation.generate",
        description="Sample k responses per problem, score them with reward/, write samples.jsonl and summary.json.",
    )
    parser.add_argument("--model", required=True, help="Hugging Face model directory (merge verl checkpoints first)")
    parser.add_argument("--data", required=True, nargs="+", help="verl RL parquet file(s) to evaluate on")
    parser.add_argument("--output-dir", required=True, help="run directory (created; resumed if it exists)")
    parser.add_argument("--backend", choices=BACKEND_NAMES, default="vllm")
    parser.add_argument("--k", type=int, default=32, help="samples per problem (avg@k); default 32 as in the paper")
    parser.add_argument("--seed", type=int, default=0, help="base seed; per-sample seeds derive from it")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen3-thinking", help="recommended sampling")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--top-k", type=int, help="top-k; 0 (or -1) disables it")
    parser.add_argument("--min-p", type=float)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument(
        "--chat-template-kwargs", type=json.loads, help="JSON object, e.g. '{\"enable_thinking\": true}'"
    )
    parser.add_argument("--scorer", default=DEFAULT_SCORER, help="module:function following reward/'s contract")
    parser.add_argument(
        "--scorer-kwargs",
        type=json.loads,
        default={},
        help='JSON object passed to every scorer call, e.g. \'{"code_backend": "sandbox_fusion", '
        '"sandbox_fusion_url": "http://127.0.0.1:8080"}\' (reward.options.RewardOptions fields)',
    )
    parser.add_argument(
        "--response-format",
        choices=("auto", *RESPONSE_FORMATS),
        default="auto",
        help="where the final answer is (reward/response_format.py); auto: read off the model's tokenizer and "
        "chat template (harmony for GPT-OSS, qwen3_thinking when the thinking is left to the response, else "
        "plain), as the training recipes set it. Passed to reward/'s scorer as its response_format option",
    )
    parser.add_argument(
        "--score-workers",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="scoring processes (0 scores in this process)",
    )
    parser.add_argument(
        "--chunk-size", type=int, help="problems per generation call (default: 64 vllm, 1 transformers)"
    )
    parser.add_argument("--limit", type=int, help="evaluate only the first N rows of each file (smoke tests)")
    parser.add_argument("--overwrite", action="store_true", help="discard an existing run in --output-dir")
    parser.add_argument("--no-progress", action="store_true")
    vllm_group = parser.add_argument_group("vllm backend")
    vllm_group.add_argument("--tensor-parallel-size", type=int, default=1)
    vllm_group.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    vllm_group.add_argument("--max-model-len", type=int, help="prompt + response budget (default: the model's)")
    vllm_group.add_argument(
        "--enforce-eager",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="no CUDA graphs / no compilation (default: on with vLLM's CPU build, off on GPUs)",
    )
    vllm_group.add_argument(
        "--kv-cache-gib",
        type=float,
        help="KV-cache size in GiB (vLLM's kv_cache_memory_bytes; default on GPUs: from "
        "--gpu-memory-utilization; on CPU: VLLM_CPU_KVCACHE_SPACE, else 1)",
    )
    vllm_group.add_argument(
        "--batch-invariant",
        action="store_true",
        help="set VLLM_BATCH_INVARIANT=1: outputs independent of batching (reproducible per sample seed; slower)",
    )
    hf_group = parser.add_argument_group("transformers backend")
    hf_group.add_argument("--device", default="auto")
    hf_group.add_argument("--sample-batch-size", type=int, help="samples generated together (default: all k)")
    parser.add_argument("--dtype", default="auto", help="model dtype (auto, bfloat16, float16, float32)")
    parser.add_argument("--trust-remote-code", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m evaluation.generate``."""
    args = build_parser().parse_args(argv)
    if args.k < 1:
        raise SystemExit(f"--k must be >= 1, got {args.k}")
    top_k = None if args.top_k is not None and args.top_k <= 0 else args.top_k  # 0 or -1 disable, as in vLLM
    sampling = preset(
        args.preset,
        temperature=args.temperature,
        top_p=args.top_p,
        min_p=args.min_p,
        max_new_tokens=args.max_new_tokens,
        chat_template_kwargs=args.chat_template_kwargs,
    )
    if args.top_k is not None:
        import dataclasses

        sampling = dataclasses.replace(sampling, top_k=top_k)
    if args.backend == "vllm":
        try:
            check_vllm_sampling(sampling)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    problems: list[EvalProblem] = []
    data_info = []
    data_by_source: dict[str, list[str]] = {}
    for path in args.data:
        path = Path(path).expanduser()
        loaded = load_problems(path, limit=args.limit)
        digest = file_sha256(path)
        data_info.append({"path": str(path.resolve()), "sha256": digest, "rows": len(loaded)})
        for source in dict.fromkeys(p.data_source for p in loaded):
            data_by_source.setdefault(source, []).append(digest)
        problems.extend(loaded)
    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise SystemExit(f"problem ids repeat across --data files: {dup[:5]}; each file needs its own data_source")
    if args.backend == "vllm":
        options = {
            "tensor_parallel_size": args.tensor_parallel_size,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "max_model_len": args.max_model_len,
            "dtype": args.dtype,
            "trust_remote_code": args.trust_remote_code,
            "enforce_eager": args.enforce_eager,
            "batch_invariant": args.batch_invariant,
            "kv_cache_gib": args.kv_cache_gib,
        }
        chunk_size = args.chunk_size or 64
    else:
        options = {
            "device": args.device,
            "dtype": args.dtype,
            "sample_batch_size": args.sample_batch_size,
            "trust_remote_code": args.trust_remote_code,
        }
        chunk_size = args.chunk_size or 1
    if not isinstance(args.scorer_kwargs, dict):
        raise SystemExit(f"--scorer-kwargs must be a JSON object, got {args.scorer_kwargs!r}")
    with ParallelScorer(args.scorer, num_workers=args.score_workers, kwargs=args.scorer_kwargs) as scorer:
        backend = build_backend(args.backend, args.model, sampling, **options)
        scorer.kwargs.update(scorer_format_kwargs(args, backend.tokenizer, sampling.chat_template_kwargs))
        manifest = {
            "model": str(Path(args.model).expanduser().resolve())
            if Path(args.model).expanduser().exists()
            else args.model,
            "data": data_info,
            "backend": backend.describe(),
            "sampling": sampling.to_dict(),
            "k": args.k,
            "seed": args.seed,
            "scorer": {"function": scorer.name, "kwargs": scorer.kwargs},
            "scorer_version": scorer_version(args.scorer),
            "n_problems": len(problems),
            "data_by_source": data_by_source,
        }
        store = RunStore(args.output_dir, manifest, overwrite=args.overwrite)
        summary = run_evaluation(
            problems, backend, scorer, store, args.k, args.seed, chunk_size, progress=not args.no_progress
        )
    overall = summary["overall"]
    print(
        f"{len(problems)} problems x {args.k} samples: avg@{args.k} = {100 * overall['avg@k']:.2f}%, "
        f"pass@{args.k} = {100 * overall['pass@k'][str(args.k)]:.2f}%, "
        f"mean length {overall['mean_response_tokens']:.0f} tokens, truncated {100 * overall['truncation_rate']:.1f}%, "
        f"unfinished {100 * overall['unfinished_rate']:.1f}%"
    )
    for source, metrics in summary["by_data_source"].items():
        print(f"  {source}: avg@{args.k} = {100 * metrics['avg@k']:.2f}% over {metrics['n_problems']} problems")
    print(f"wrote {Path(args.output_dir) / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
