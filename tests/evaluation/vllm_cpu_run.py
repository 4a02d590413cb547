"""Run by tests/evaluation/test_eval_vllm_cpu.py in a process of its own (vLLM spawns its
EngineCore process, hence the ``__main__`` guard):

    python tests/evaluation/vllm_cpu_run.py RESULT.json [python -m evaluation.generate arguments...]

runs ``evaluation.generate.main`` with the arguments given (the command-line code path,
``--backend vllm``), keeps the backend it built, and with that one engine then records in
RESULT.json what the run's files cannot show: the greedy token ids and their log-probs per
problem straight from vLLM, the same requests sampled twice at temperature 1 (reproducibility
from the recorded seeds), the backend's manifest entry and the engine's start-up time.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path


def run(result_path: Path, argv: list[str]) -> int:
    from evaluation import generate
    from evaluation.chat_prompt import render_prompt_ids
    from evaluation.problems import load_problems

    built = []
    real_build = generate.build_backend

    def keep(*args, **kwargs):
        start = time.monotonic()
        backend = real_build(*args, **kwargs)
        built.append((backend, time.monotonic() - start))
        return backend

    generate.build_backend = keep
    start = time.monotonic()
    status = generate.main(argv)
    run_s = time.monotonic() - start
    backend, engine_start_s = built[0]

    args = generate.build_parser().parse_args(argv)
    problems = [p for path in args.data for p in load_problems(Path(path), limit=args.limit)]
    prompts = {
        p.problem_id: render_prompt_ids(backend.tokenizer, p.messages, backend.sampling.chat_template_kwargs)
        for p in problems
    }
    greedy = backend._sampling_params_cls(temperature=0.0, max_tokens=backend.sampling.max_new_tokens, logprobs=0)
    outputs = backend.llm.generate(
        [{"prompt_token_ids": ids} for ids in prompts.values()], sampling_params=greedy, use_tqdm=False
    )
    greedy_ids, greedy_logprobs = {}, {}
    for problem_id, output in zip(prompts, outputs, strict=True):
        out = output.outputs[0]
        greedy_ids[problem_id] = list(out.token_ids)
        greedy_logprobs[problem_id] = [
            step[token].logprob for step, token in zip(out.logprobs, out.token_ids, strict=True)
        ]

    backend.sampling = dataclasses.replace(backend.sampling, temperature=1.0, top_p=1.0, top_k=None)
    requests = [generate.make_request(p, 8, 1) for p in problems[:2]]
    sampled = [[[c.text for c in row] for row in backend.generate(requests)] for _ in range(2)]

    result = {
        "status": status,
        "run_s": run_s,
        "engine_start_s": engine_start_s,
        "describe": backend.describe(),
        "prompt_ids": prompts,
        "greedy_ids": greedy_ids,
        "greedy_logprobs": greedy_logprobs,
        "sampled": sampled,
        "sampled_seeds": [r.seeds for r in requests],
    }
    result_path.write_text(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), sys.argv[2:]))
