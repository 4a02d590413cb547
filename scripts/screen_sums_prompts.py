"""Benchmark: the quickstart's prompt wording, what it costs and how the start answers, in one run.

    python scripts/screen_sums_prompts.py [--output-root /tmp/sums_prompts] [--templates boxed bare]
        [--repeats 3] [--seed 1]

The prompt is most of what the quickstart's actor computes per step (responses are about 8
tokens), so its length sets a training step's cost. This writes the sums task (the quickstart's
split and demonstration turn, :mod:`cpu_examples.sums_task`) in each of data_prep's math
templates through data_prep's own message builder (``data_prep.math_prompts.math_messages``), and
samples the quickstart's model (SmolLM2-135M-Instruct under ``--output-root``) on it with vLLM's
offline engine at the CPU rollout's settings (eager, prefix caching with 32-token blocks, the
dtype ``auto`` picks on this processor unless ``--dtype``; the quickstart's rollout itself computes in float32):

* the held-out problems x 8 samples at the evaluation's temperature (0.6): the start's avg@8;
* the training problems x 8 samples at training's temperature (1.0): how often a training
  response is right before any update (what gives the first steps' groups a signal);

each scored by ``reward/score.py`` (the quickstart's scorer), every sample its own request as
verl's agent loop sends them, ``--repeats`` times: fresh draws from one engine seeded with
``--seed`` (vLLM's CPU sampler takes no per-request seed). Per template: the chat-templated
prompt's tokens, and per repeat and on average the accuracy, the fraction of responses with a
``\\boxed{}`` answer and the mean response length.

Writes ``benchmarks/results/sums_prompts-<UTC time>-<cpu capability>.json``. Whether a wording
also learns as well is the seed study's question (``scripts/study_quickstart_seeds.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

K, MAX_NEW, BLOCK_SIZE = 8, 16, 32
TRAIN_TEMPERATURE = 1.0
BOXED = re.compile(r"\\boxed\{")


def measure(model_dir: Path, templates: list[str], repeats: int, seed: int, dtype: str) -> dict:
    """Every template's prompt length and, per repeat, the two workloads' scores (in this process)."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from cpu_examples.sums_task import DEMONSTRATION, TEST_SOURCE, TRAIN_SOURCE, sums_split
    from data_prep.math_prompts import math_messages
    from quickstart.pipeline import EVAL_TEMPERATURE
    from reward.score import compute_score

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    train, held_out = sums_split()
    workloads = {
        "held_out": (held_out, TEST_SOURCE, EVAL_TEMPERATURE),
        "train": (train, TRAIN_SOURCE, TRAIN_TEMPERATURE),
    }
    # every template's chat-templated prompts, once: {template: {workload: [text, ...]}}
    texts = {
        template: {
            name: [
                tokenizer.apply_chat_template(
                    math_messages(p.problem, template, DEMONSTRATION), add_generation_prompt=True, tokenize=False
                )
                for p in problems
            ]
            for name, (problems, _, _) in workloads.items()
        }
        for template in templates
    }
    lengths = {
        template: sorted({len(tokenizer(text)["input_ids"]) for name in workloads for text in texts[template][name]})
        for template in templates
    }
    longest = max(max(found) for found in lengths.values())
    llm = LLM(
        model=str(model_dir),
        dtype=dtype,
        enforce_eager=True,
        max_model_len=longest + MAX_NEW,
        enable_prefix_caching=True,
        block_size=BLOCK_SIZE,
        seed=seed,
    )
    result = {}
    for template in templates:
        entry = {"prompt_tokens": lengths[template], "by_repeat": []}
        for _ in range(repeats):
            scores = {}
            for name, (problems, source, temperature) in workloads.items():
                requests = [text for text in texts[template][name] for _ in range(K)]
                answers = [p.answer for p in problems for _ in range(K)]
                outputs = llm.generate(
                    requests, SamplingParams(temperature=temperature, max_tokens=MAX_NEW), use_tqdm=False
                )
                responses = [o.outputs[0] for o in outputs]
                right = [
                    compute_score(source, r.text, answer)["score"] for r, answer in zip(responses, answers, strict=True)
                ]
                scores[name] = {
                    "temperature": temperature,
                    "samples": len(right),
                    "accuracy": round(sum(right) / len(right), 4),
                    "boxed": round(sum(bool(BOXED.search(r.text)) for r in responses) / len(responses), 4),
                    "response_tokens": round(sum(len(r.token_ids) for r in responses) / len(responses), 2),
                }
            entry["by_repeat"].append(scores)
        entry["mean"] = {
            name: {
                key: round(sum(r[name][key] for r in entry["by_repeat"]) / repeats, 4)
                for key in ("accuracy", "boxed", "response_tokens")
            }
            for name in workloads
        }
        result[template] = entry
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", type=Path, default=Path("/tmp/sums_prompts"))
    parser.add_argument(
        "--templates", nargs="+", default=["boxed", "bare"], help="data_prep.math templates; the first is the anchor"
    )
    parser.add_argument("--repeats", type=int, default=3, help="fresh draws of every workload per template")
    parser.add_argument("--seed", type=int, default=1, help="the engine's seed")
    parser.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="the engine's dtype (auto: bf16 where this processor computes it natively, else float32)",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: measure in this process
    args = parser.parse_args(argv)
    from cpu_backend import precision as cpu_precision
    from cpu_examples.prepare import prepare_pretrained
    from data_prep.math_prompts import TEMPLATES

    unknown = sorted(set(args.templates) - set(TEMPLATES))
    if unknown:
        parser.error(f"unknown template(s) {unknown}; data_prep.math has {list(TEMPLATES)}")
    model_dir, _, _ = prepare_pretrained(
        args.output_root.resolve(), log=lambda message: print(message, file=sys.stderr)
    )
    dtype = cpu_precision.choose("ROLLOUT_DTYPE", args.dtype).dtype
    if args.one:
        print(json.dumps(measure(model_dir, args.templates, args.repeats, args.seed, dtype)))
        return 0
    from benchmark_record import environment, write_result

    from cpu_backend.vllm_cpu import omp_threads_bind

    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": omp_threads_bind(1, sorted(os.sched_getaffinity(0))),
    }
    # vLLM's engine in a fresh process, as in the other vLLM benchmarks
    done = subprocess.run(
        [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        return 1
    by_template = json.loads(done.stdout.strip().splitlines()[-1])
    result = {
        "benchmark": "sums_prompts",
        "command": "python scripts/screen_sums_prompts.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": environment(),
        "settings": {
            "k": K,
            "max_new_tokens": MAX_NEW,
            "dtype": dtype,
            "block_size": BLOCK_SIZE,
            "enforce_eager": True,
            "repeats": args.repeats,
            "seed": args.seed,
            "anchor": args.templates[0],
        },
        "by_template": by_template,
    }
    path = write_result("sums_prompts", cpu_precision.probe().capability, result)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
