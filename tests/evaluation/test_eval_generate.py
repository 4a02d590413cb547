"""The evaluation command end to end: tiny random Qwen2 on CPU, resume after an interruption,
the vLLM backend's request mapping (with a stand-in vllm module), the real reward scorer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evaluation.backends import Completion, GenerationRequest, build_backend
from evaluation.backends.transformers_backend import TransformersBackend
from evaluation.chat_prompt import render_prompt_ids
from evaluation.generate import main as generate_main
from evaluation.generate import make_request, run_evaluation
from evaluation.problems import load_problems
from evaluation.run_store import RunMismatchError, RunStore, read_manifest, read_samples
from evaluation.sampling_settings import SamplingConfig, derive_seed, preset
from evaluation.scoring import ParallelScorer

pytestmark = pytest.mark.usefixtures("single_torch_thread")  # the tiny model is fastest on one thread

REPO = Path(__file__).resolve().parents[2]
SAMPLING = SamplingConfig(
    temperature=1.0, top_p=0.95, top_k=50, max_new_tokens=8, chat_template_kwargs={"enable_thinking": True}
)
K = 3


def parity(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Correct when the response has an even number of characters (deterministic in the text)."""
    acc = len(solution_str) % 2 == 0
    return {
        "score": float(acc),
        "acc": acc,
        "pred": str(len(solution_str)),
        "reason": "parity",
        "chars": len(solution_str),
    }


class CountingBackend:
    """Wraps a backend and records which problems it was asked for."""

    def __init__(self, inner):
        self.inner = inner
        self.asked: list[str] = []

    def describe(self):
        return self.inner.describe()

    def generate(self, requests):
        self.asked += [r.problem_id for r in requests]
        return self.inner.generate(requests)


def _manifest(problems, k=K, seed=0):
    return {
        "model": "tiny",
        "data": [],
        "backend": {"name": "transformers"},
        "sampling": SAMPLING.to_dict(),
        "k": k,
        "seed": seed,
        "scorer": "parity",
        "n_problems": len(problems),
    }


@pytest.fixture(scope="module")
def tiny_backend(tiny_model_dir):
    return TransformersBackend(str(tiny_model_dir), SAMPLING, device="cpu", dtype="float32")


def test_transformers_backend_end_to_end(tiny_backend, math_parquet, tmp_path):
    problems = load_problems(math_parquet)
    store = RunStore(tmp_path / "run", _manifest(problems))
    summary = run_evaluation(
        problems,
        tiny_backend,
        ParallelScorer(parity, num_workers=0),
        store,
        K,
        base_seed=0,
        chunk_size=2,
        progress=False,
    )
    records = read_samples(tmp_path / "run")
    assert len(records) == len(problems) * K
    assert [(r["problem_id"], r["sample_index"]) for r in records] == [
        (p.problem_id, j) for p in problems for j in range(K)
    ]
    for r in records:
        assert r["acc"] == float(len(r["response"]) % 2 == 0)
        assert r["details"] == {"chars": len(r["response"])}
        assert 1 <= r["num_tokens"] <= SAMPLING.max_new_tokens
        assert not r["truncated"] or r["num_tokens"] == SAMPLING.max_new_tokens
        assert r["seed"] == derive_seed(0, r["problem_id"], 0)  # one seeded batch per problem
    acc = np.array([r["acc"] for r in records]).reshape(len(problems), K)
    assert summary["overall"]["avg@k"] == pytest.approx(acc.mean())
    assert summary["overall"]["pass@k"]["1"] == pytest.approx(acc.mean())
    assert summary["overall"]["pass@k"][str(K)] == pytest.approx((acc.sum(1) > 0).mean())
    assert summary["overall"]["mean_response_tokens"] == pytest.approx(np.mean([r["num_tokens"] for r in records]))
    assert summary["overall"]["truncation_rate"] == pytest.approx(np.mean([r["truncated"] for r in records]))
    assert set(summary["by_difficulty"]["toy_math"]) == {"easy", "medium", "hard"}
    assert summary["by_difficulty"]["toy_math"]["hard"]["n_problems"] == 2
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["overall"] == summary["overall"] and on_disk["manifest"]["k"] == K
    # a sample is reproducible from its recorded seed
    again = tiny_backend.generate([make_request(problems[0], K, 0)])[0]
    assert [c.text for c in again] == [r["response"] for r in records[:K]]


def test_resume_after_interruption_skips_done_problems_and_matches_an_uninterrupted_run(
    tiny_backend, math_parquet, tmp_path
):
    problems = load_problems(math_parquet)
    reference_store = RunStore(tmp_path / "reference", _manifest(problems))
    run_evaluation(problems, tiny_backend, ParallelScorer(parity, num_workers=0), reference_store, K, 0, 1, False)
    reference = read_samples(tmp_path / "reference")

    def crashing(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        if extra_info["index"] == 3:
            raise KeyboardInterrupt("simulated interruption")
        return parity(data_source, solution_str, ground_truth, extra_info)

    run_dir = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        run_evaluation(
            problems,
            tiny_backend,
            ParallelScorer(crashing, num_workers=0),
            RunStore(run_dir, _manifest(problems)),
            K,
            0,
            1,
            False,
        )
    partial = read_samples(run_dir)
    done_before = sorted({r["problem_id"] for r in partial})
    assert done_before == ["toy_math/0", "toy_math/1"]  # problem 2 was scored but not yet written
    assert not (run_dir / "summary.json").exists()
    # the process was killed while writing problem 2: two whole lines, then part of the third
    with open(run_dir / "samples.jsonl", "a") as fh:
        fh.write(json.dumps(reference[2 * K]) + "\n" + json.dumps(reference[2 * K + 1]) + "\n")
        fh.write(json.dumps(reference[2 * K + 2])[:40])

    counting = CountingBackend(tiny_backend)
    with pytest.warns(UserWarning, match="interrupted"):
        summary = run_evaluation(
            problems,
            counting,
            ParallelScorer(parity, num_workers=0),
            RunStore(run_dir, _manifest(problems)),
            K,
            0,
            1,
            False,
        )
    assert counting.asked == [p.problem_id for p in problems[2:]]
    resumed = read_samples(run_dir)
    key = lambda r: (r["problem_id"], r["sample_index"])  # noqa: E731
    assert sorted(resumed, key=key) == sorted(reference, key=key)
    assert summary["overall"]["n_samples"] == len(problems) * K
    # once finished, running again generates nothing and leaves the samples as they are
    idle = CountingBackend(tiny_backend)
    again = run_evaluation(
        problems, idle, ParallelScorer(parity, num_workers=0), RunStore(run_dir, _manifest(problems)), K, 0, 1, False
    )
    assert idle.asked == [] and read_samples(run_dir) == resumed and again["overall"] == summary["overall"]


def test_resume_refuses_a_run_made_with_other_settings(math_parquet, tmp_path):
    problems = load_problems(math_parquet)
    RunStore(tmp_path / "run", _manifest(problems)).open()
    with pytest.raises(RunMismatchError, match=r"k: 3 -> 4"):
        RunStore(tmp_path / "run", _manifest(problems, k=4)).open()
    with pytest.raises(RunMismatchError, match="seed"):
        RunStore(tmp_path / "run", _manifest(problems, seed=1)).open()
    assert RunStore(tmp_path / "run", _manifest(problems, k=4), overwrite=True).open() == set()
    assert read_manifest(tmp_path / "run")["k"] == 4
    # a scorer whose code changed is another scorer; a manifest from before scorer_version existed is not compared on it
    versioned = {**_manifest(problems, k=4), "scorer_version": {"package": "reward", "sha256": "a"}}
    RunStore(tmp_path / "run", versioned).open()  # resumes the run written without scorer_version
    RunStore(tmp_path / "run", versioned, overwrite=True).open()
    with pytest.raises(RunMismatchError, match="scorer_version"):
        RunStore(tmp_path / "run", {**versioned, "scorer_version": {"package": "reward", "sha256": "b"}}).open()


def test_scorer_version_hashes_the_scorer_package(tmp_path, monkeypatch):
    from evaluation.scoring import scorer_version

    package = tmp_path / "toy_scorer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text("def compute_score(*a, **k):\n    return {'score': 1.0, 'acc': 1.0}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = scorer_version("toy_scorer.rules:compute_score")
    assert first["package"] == "toy_scorer" and first == scorer_version("toy_scorer:anything")
    (package / "rules.py").write_text("def compute_score(*a, **k):\n    return {'score': 0.0, 'acc': 0.0}\n")
    assert scorer_version("toy_scorer.rules:compute_score")["sha256"] != first["sha256"]


def test_a_broken_sample_file_is_reported_with_its_line(math_parquet, tmp_path):
    problems = load_problems(math_parquet)
    store = RunStore(tmp_path / "run", _manifest(problems))
    store.open()
    (tmp_path / "run" / "samples.jsonl").write_text('{"problem_id": "toy_math/0"}\nnot json\n')
    with pytest.raises(ValueError, match=r"samples.jsonl line 1: sample record lacks"):
        store.open()


class ScriptedBackend:
    """Returns fixed responses, to run the real reward scorer on known answers."""

    def __init__(self, responses: dict[str, list[str]]):
        self.responses = responses

    def describe(self):
        return {"name": "scripted"}

    def generate(self, requests):
        return [
            [Completion(text, 5, False, seed) for text, seed in zip(self.responses[r.problem_id], r.seeds, strict=True)]
            for r in requests
        ]


def _lcb_parquet(path: Path) -> Path:
    """Two LiveCodeBench-style stdin problems in data_prep's layout (ground truth = JSON tests)."""
    tests = [
        {"input": "3\n", "output": "6\n", "testtype": "stdin"},
        {"input": "5\n", "output": "10\n", "testtype": "stdin"},
    ]
    rows = [
        {
            "data_source": "livecodebench",
            "prompt": [{"role": "user", "content": f"### Question:\nDouble the number ({i}).\n### Answer:\n"}],
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": json.dumps({"tests": tests, "fn_name": None})},
            "extra_info": {"split": "test", "index": i, "difficulty": level},
        }
        for i, level in enumerate(["easy", "hard"])
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_real_reward_scorer_scores_known_answers(tmp_path, write_math_parquet_fn):
    math_file = write_math_parquet_fn(tmp_path / "aime.parquet", "aime25", ["204", "\\frac{1}{2}"])
    problems = load_problems(math_file) + load_problems(_lcb_parquet(tmp_path / "lcb.parquet"))
    good, bad = "```python\nprint(int(input()) * 2)\n```", "```python\nprint(int(input()) + 1)\n```"
    responses = {
        "aime25/0": ["so \\boxed{204}", "\\boxed{205}"],
        "aime25/1": ["\\boxed{0.5}", "no answer"],
        "livecodebench/0": [good, good],
        "livecodebench/1": [bad, "no code at all"],
    }
    store = RunStore(tmp_path / "run", {**_manifest(problems, k=2), "scorer": "reward.score:compute_score"})
    with ParallelScorer("reward.score:compute_score", num_workers=0) as scorer:
        summary = run_evaluation(problems, ScriptedBackend(responses), scorer, store, 2, 0, 8, False)
    records = read_samples(tmp_path / "run")
    assert [r["acc"] for r in records] == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert all(isinstance(r["reason"], str) and r["reason"] for r in records)
    assert records[4]["details"]["pass_fraction"] == 1.0 and records[6]["reason"] == "wrong_answer"
    assert summary["by_data_source"]["aime25"]["avg@k"] == pytest.approx(0.5)
    assert summary["by_data_source"]["livecodebench"]["pass@k"]["2"] == pytest.approx(0.5)
    assert summary["by_difficulty"]["livecodebench"]["easy"]["avg@k"] == 1.0
    assert summary["by_difficulty"]["livecodebench"]["hard"]["avg@k"] == 0.0
    assert summary["overall"]["pass@k"]["2"] == pytest.approx(0.75)


def test_generate_command_with_worker_processes_and_the_real_scorer(tiny_model_dir, tmp_path, write_math_parquet_fn):
    write = write_math_parquet_fn
    data = write(tmp_path / "aime.parquet", "aime25", ["2", "6", "9"])
    out = tmp_path / "cli_run"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "evaluation.generate",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--backend",
        "transformers",
        "--k",
        "2",
        "--max-new-tokens",
        "6",
        "--score-workers",
        "2",
        "--no-progress",
        "--dtype",
        "float32",
        "--top-k",
        "0",
        "--scorer-kwargs",
        '{"math_timeout_s": 20}',
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "avg@2" in proc.stdout
    manifest = read_manifest(out)
    # the tiny model has no thinking markers: its responses are read whole (--response-format auto)
    assert manifest["scorer"] == {
        "function": "reward.score:compute_score",
        "kwargs": {"math_timeout_s": 20, "response_format": "plain"},
    }
    assert manifest["sampling"]["top_k"] is None and manifest["sampling"]["temperature"] == 0.6
    assert manifest["data"][0]["sha256"] and manifest["n_problems"] == 3
    # what the report compares between runs: which file holds each benchmark, and the scorer's code
    assert manifest["data_by_source"] == {"aime25": [manifest["data"][0]["sha256"]]}
    assert manifest["scorer_version"]["package"] == "reward" and len(manifest["scorer_version"]["sha256"]) == 64
    records = read_samples(out)
    assert len(records) == 6 and all(r["reason"] for r in records)
    assert json.loads((out / "summary.json").read_text())["overall"]["n_problems"] == 3


def test_vllm_backend_maps_samples_to_seeded_requests(tiny_model_dir, monkeypatch):
    calls = {}

    class FakeParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class FakeLLM:
        def __init__(self, **kwargs):
            calls["engine"] = kwargs

        def generate(self, prompts, sampling_params, use_tqdm):
            calls["prompts"], calls["params"] = prompts, sampling_params
            outs = []
            for i, sp in enumerate(sampling_params):
                finish = "length" if i % 2 else "stop"
                out = types.SimpleNamespace(
                    text=f"seed={sp.kwargs['seed']}", token_ids=list(range(i + 1)), finish_reason=finish
                )
                outs.append(types.SimpleNamespace(outputs=[out]))
            return outs

    monkeypatch.setitem(
        sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeParams, __version__="0.24.0")
    )
    sampling = preset("qwen3-thinking", max_new_tokens=128)
    backend = build_backend("vllm", str(tiny_model_dir), sampling, tensor_parallel_size=4)
    assert calls["engine"]["tensor_parallel_size"] == 4 and calls["engine"]["enable_prefix_caching"]
    requests = [
        GenerationRequest("a/0", [{"role": "user", "content": "hi"}], [11, 12, 13], 1),
        GenerationRequest("a/1", [{"role": "user", "content": "yo"}], [21, 22, 23], 2),
    ]
    results = backend.generate(requests)
    assert [[c.seed for c in row] for row in results] == [[11, 12, 13], [21, 22, 23]]
    assert [[c.text for c in row] for row in results] == [[f"seed={s}" for s in r.seeds] for r in requests]
    assert [c.truncated for c in results[0]] == [False, True, False]
    assert [c.num_tokens for c in results[1]] == [4, 5, 6]
    first = calls["params"][0].kwargs
    assert (first["temperature"], first["top_p"], first["top_k"], first["max_tokens"], first["n"]) == (
        0.6,
        0.95,
        20,
        128,
        1,
    )
    prompt_text = backend.tokenizer.decode(calls["prompts"][0]["prompt_token_ids"])
    assert prompt_text.endswith("<|im_start|>assistant\n<think>\n")  # chat template with enable_thinking
    assert backend.describe()["vllm_version"] == "0.24.0"


def test_vllm_backend_without_vllm_says_what_to_do(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match="--backend transformers"):
        build_backend("vllm", str(tiny_model_dir), preset("qwen3-thinking"))
    with pytest.raises(ValueError, match="unknown backend"):
        build_backend("sglang", str(tiny_model_dir), preset("qwen3-thinking"))


def test_vllm_backend_refuses_temperature_above_two_before_loading(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # the check comes first: no import, no model load
    with pytest.raises(ValueError, match="temperature 2.5 is above vLLM's maximum of 2.0"):
        build_backend("vllm", "no-such-model", preset("qwen3-thinking", temperature=2.5))
    with pytest.raises(SystemExit, match="use --temperature <= 2 with --backend vllm"):
        generate_main(["--model", "m", "--data", "d.parquet", "--output-dir", "o", "--temperature", "3"])


def test_vllm_batch_invariance_is_set_before_import_and_recorded(tiny_model_dir, monkeypatch):
    from evaluation.backends import vllm_backend

    seen = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            seen["env at engine start"] = os.environ.get("VLLM_BATCH_INVARIANT")

    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM, SamplingParams=dict))
    plain = build_backend("vllm", str(tiny_model_dir), preset("qwen3-thinking"))
    assert plain.describe()["batch_invariant"] is False and seen["env at engine start"] is None
    invariant = build_backend("vllm", str(tiny_model_dir), preset("qwen3-thinking"), batch_invariant=True)
    assert seen["env at engine start"] == "1" and invariant.describe()["batch_invariant"] is True
    assert "only with batch-invariant" in vllm_backend.__doc__ and "VLLM_BATCH_INVARIANT=1" in vllm_backend.__doc__


def test_transformers_backend_end_of_sequence_handling(tiny_backend):
    eos = tiny_backend.eos_ids[0]
    finished = tiny_backend._completion([5, 6, eos, eos, eos], seed=1)
    assert (finished.num_tokens, finished.truncated) == (3, False)
    assert finished.text == tiny_backend.tokenizer.decode([5, 6])
    running = tiny_backend._completion([5] * SAMPLING.max_new_tokens, seed=1)
    assert (running.num_tokens, running.truncated) == (SAMPLING.max_new_tokens, True)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_the_shared_prompt_prefill_samples_what_a_prefill_per_row_samples(tiny_backend, temperature):
    """The backend runs each prompt through the model once for all k rows; transformers'
    ``num_return_sequences`` alone runs it once per row. Same seed, same tokens."""
    import torch

    prompt = render_prompt_ids(
        tiny_backend.tokenizer, [{"role": "user", "content": "What is 2 + 3?"}], SAMPLING.chat_template_kwargs
    )
    input_ids = torch.tensor([prompt])
    mask = torch.ones_like(input_ids)
    kwargs = {**tiny_backend._generation_kwargs(), "eos_token_id": [], "min_new_tokens": SAMPLING.max_new_tokens}
    if temperature == 0.0:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None, min_p=None)
    n = 1 if temperature == 0.0 else 4
    rows_through_the_model = []
    hook = tiny_backend.model.get_input_embeddings().register_forward_hook(
        lambda module, inputs, output: rows_through_the_model.append(tuple(inputs[0].shape))
    )
    torch.manual_seed(11)
    try:
        shared = tiny_backend._generate(input_ids, mask, n, kwargs, len(prompt))
    finally:
        hook.remove()
    # the prompt went through the model once (one row, all but its last token), then one token per row per step
    assert rows_through_the_model[0] == (1, len(prompt) - 1)
    assert all(shape == (n, 1) for shape in rows_through_the_model[1:]), rows_through_the_model
    torch.manual_seed(11)
    with torch.no_grad():
        per_row = tiny_backend.model.generate(
            input_ids=input_ids, attention_mask=mask, num_return_sequences=n, **kwargs
        )
    assert shared == per_row[:, len(prompt) :].tolist()
    assert all(len(row) == SAMPLING.max_new_tokens for row in shared)
    if n > 1:
        assert len({tuple(row) for row in shared}) > 1  # the rows are sampled independently


def test_a_cache_the_checkpoint_configures_is_left_to_generate(tiny_backend, monkeypatch):
    """A checkpoint whose generation config names its own cache type (e.g. a hybrid or sliding
    cache) gets transformers' own path: no shared prefill, the same samples as before."""
    import torch

    prompt = render_prompt_ids(
        tiny_backend.tokenizer, [{"role": "user", "content": "hi"}], SAMPLING.chat_template_kwargs
    )
    input_ids = torch.tensor([prompt])
    monkeypatch.setattr(tiny_backend.model.generation_config, "cache_implementation", "static", raising=False)
    assert tiny_backend._shared_prefill_cache(input_ids, torch.ones_like(input_ids), 3) is None
    monkeypatch.setattr(tiny_backend.model.generation_config, "cache_implementation", None, raising=False)
    monkeypatch.setattr(tiny_backend.model, "_supports_default_dynamic_cache", lambda: False, raising=False)
    assert tiny_backend._shared_prefill_cache(input_ids, torch.ones_like(input_ids), 3) is None
    monkeypatch.undo()
    assert tiny_backend._shared_prefill_cache(input_ids, torch.ones_like(input_ids), 3) is not None


def test_greedy_decoding_gives_k_equal_samples(tiny_model_dir):
    """transformers refuses num_return_sequences > 1 without sampling: at temperature 0 the backend
    decodes once per problem and returns that response k times."""
    greedy = TransformersBackend(
        str(tiny_model_dir), SamplingConfig(temperature=0.0, max_new_tokens=8), device="cpu", dtype="float32"
    )
    (samples,) = greedy.generate([GenerationRequest("a/0", [{"role": "user", "content": "hi"}], [7, 8, 9], 1)])
    assert len(samples) == 3 and len({(c.text, c.num_tokens, c.truncated) for c in samples}) == 1
    assert [c.seed for c in samples] == [7, 7, 7]  # one batch, seeded with its first sample's seed


def test_a_backend_failure_keeps_the_problems_already_generated(math_parquet, tmp_path):
    problems = load_problems(math_parquet)
    texts = {p.problem_id: ["ab", "abc", "abcd"] for p in problems}

    class FailingBackend(ScriptedBackend):
        def generate(self, requests):
            if requests[0].problem_id == "toy_math/2":
                raise MemoryError("simulated out-of-memory")
            return super().generate(requests)

    with pytest.raises(MemoryError):
        run_evaluation(
            problems,
            FailingBackend(texts),
            ParallelScorer(parity, num_workers=0),
            RunStore(tmp_path / "run", _manifest(problems)),
            K,
            0,
            1,
            False,
        )
    records = read_samples(tmp_path / "run")
    assert [r["problem_id"] for r in records] == ["toy_math/0"] * K + ["toy_math/1"] * K
    assert [r["acc"] for r in records[:K]] == [1.0, 0.0, 1.0]
