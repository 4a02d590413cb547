"""The vLLM evaluation backend on CPU (vLLM 0.24.0's CPU build, in the test stack), against the
transformers backend on the same model and data.

The model is the CPU recipes' tiny Qwen3 (built in code by ``cpu_examples.prepare``, warm-started on
the toy sums' answer format, so responses are ``\\boxed{n}`` and the real math scorer finds right
and wrong answers), in float32. Greedy decoding through both backends must give the same token
ids, the same samples, the same scores and a manifest that differs in the backend entry only.
The first tests check the CPU defaults the backend chooses (and that a GPU keeps vLLM's own)
with a stand-in vllm module; the last one starts the real engine (~1 min).
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from evaluation.backends import build_backend
from evaluation.generate import build_parser
from evaluation.run_store import read_manifest, read_samples
from evaluation.sampling_settings import derive_seed, preset
from tests.e2e.recipe_runs import run_command

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("vllm_cpu_run.py")
MAX_NEW_TOKENS = 16
K = 2
# vLLM's CPU kernels (oneDNN GEMMs) and torch's differ in float32 rounding: the same bound as
# python -m dfpo.operations.run_checks' fp32 rollout-vs-actor gap (measured <= 1.1e-4 in the CPU recipes).
LOGPROB_BOUND = 1e-3


@pytest.fixture(scope="module")
def recipe_model(tmp_path_factory):
    """(tiny Qwen3 directory, toy test parquet) exactly as the CPU recipes build them."""
    from cpu_examples.prepare import prepare

    model, _, test = prepare(tmp_path_factory.mktemp("cpu_recipe"))
    return model, test


def _fake_vllm(monkeypatch, device: str):
    """A stand-in vllm whose platform is ``device``; returns the engine arguments it was given."""
    engine = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            engine.update(kwargs)

    platform = types.SimpleNamespace(is_cpu=lambda: device == "cpu", device_type=device)
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams, module.__version__ = FakeLLM, dict, "0.24.0"
    module.__path__ = []  # a package, so that vllm.platforms resolves to the stand-in below
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", types.SimpleNamespace(current_platform=platform))
    return engine


def test_on_cpu_the_backend_runs_eager_with_a_bounded_kv_cache_and_the_checkpoints_dtype(recipe_model, monkeypatch):
    model, _ = recipe_model
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    engine = _fake_vllm(monkeypatch, "cpu")
    backend = build_backend("vllm", str(model), preset("qwen3-thinking"))
    assert engine["enforce_eager"] is True
    assert engine["kv_cache_memory_bytes"] == 1 << 30
    assert engine["dtype"] == "float32"  # the checkpoint's; vLLM's "auto" would cast it to bfloat16
    described = backend.describe()
    assert (described["device"], described["enforce_eager"], described["kv_cache_gib"], described["dtype"]) == (
        "cpu",
        True,
        1.0,
        "float32",
    )
    # what is given wins
    engine.clear()
    build_backend("vllm", str(model), preset("qwen3-thinking"), enforce_eager=False, kv_cache_gib=2.5, dtype="bfloat16")
    assert (engine["enforce_eager"], engine["kv_cache_memory_bytes"], engine["dtype"]) == (
        False,
        int(2.5 * (1 << 30)),
        "bfloat16",
    )


@pytest.fixture(scope="module")
def bf16_checkpoint(recipe_model, tmp_path_factory):
    """The recipe's tiny model saved as a bfloat16 checkpoint (as GPU runs merge theirs)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, _ = recipe_model
    target = tmp_path_factory.mktemp("bf16_checkpoint")
    AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).save_pretrained(target)
    AutoTokenizer.from_pretrained(model).save_pretrained(target)
    return target


@pytest.mark.parametrize(("native", "expected"), [(False, "float32"), (True, "bfloat16")])
def test_on_cpu_a_bf16_checkpoint_is_computed_in_what_the_cpu_does_natively(
    bf16_checkpoint, monkeypatch, native, expected
):
    """The CPU precision rule in both evaluation backends: ``auto`` is the checkpoint's bfloat16
    only where this CPU computes bf16 natively, else float32 (the CPU faked as either kind)."""
    from cpu_backend import precision as cpu_precision
    from evaluation.backends.transformers_backend import TransformersBackend

    measured = cpu_precision.CpuPrecision(
        "X", native, False, fp32_ms=10.0, bf16_ms=4.0 if native else 400.0, torch_threads=1
    )
    monkeypatch.setattr(cpu_precision, "probe", lambda: measured)
    engine = _fake_vllm(monkeypatch, "cpu")
    build_backend("vllm", str(bf16_checkpoint), preset("qwen3-thinking"))
    assert engine["dtype"] == expected
    transformers_backend = TransformersBackend(str(bf16_checkpoint), preset("qwen3-thinking"), device="cpu")
    assert transformers_backend.describe()["dtype"] == expected
    assert next(transformers_backend.model.parameters()).dtype == getattr(__import__("torch"), expected)


def test_on_cpu_vllms_own_kv_cache_variable_is_the_default_and_a_conflict_is_refused(recipe_model, monkeypatch):
    model, _ = recipe_model
    engine = _fake_vllm(monkeypatch, "cpu")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    build_backend("vllm", str(model), preset("qwen3-thinking"))
    assert engine["kv_cache_memory_bytes"] == 3 << 30
    build_backend("vllm", str(model), preset("qwen3-thinking"), kv_cache_gib=3)
    with pytest.raises(ValueError, match=r"--kv-cache-gib 2 disagrees with VLLM_CPU_KVCACHE_SPACE=3"):
        build_backend("vllm", str(model), preset("qwen3-thinking"), kv_cache_gib=2)
    for unreadable in ("1.5", ""):  # vLLM itself fails on either, deep in its engine process
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", unreadable)
        with pytest.raises(ValueError, match="must be a whole number of GiB"):
            build_backend("vllm", str(model), preset("qwen3-thinking"))
    with pytest.raises(ValueError, match=r"kv_cache_gib must be > 0, got 0 \(--kv-cache-gib\)"):
        build_backend("vllm", str(model), preset("qwen3-thinking"), kv_cache_gib=0)


def test_on_a_gpu_the_engine_arguments_are_vllms_defaults(recipe_model, monkeypatch):
    model, _ = recipe_model
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # a CPU variable: not read on GPUs
    engine = _fake_vllm(monkeypatch, "cuda")
    backend = build_backend("vllm", str(model), preset("qwen3-thinking"), tensor_parallel_size=2)
    assert engine == {
        "model": str(model),
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "dtype": "auto",
        "trust_remote_code": False,
        "enable_prefix_caching": True,
        "enforce_eager": False,
    }
    assert backend.describe()["device"] == "cuda" and backend.describe()["kv_cache_gib"] is None
    engine.clear()
    build_backend("vllm", str(model), preset("qwen3-thinking"), enforce_eager=True, kv_cache_gib=40)
    assert engine["enforce_eager"] is True and engine["kv_cache_memory_bytes"] == 40 << 30


def test_the_command_line_leaves_enforce_eager_to_the_platform_unless_told():
    parse = lambda *extra: build_parser().parse_args(["--model", "m", "--data", "d", "--output-dir", "o", *extra])  # noqa: E731
    assert parse().enforce_eager is None and parse().kv_cache_gib is None
    assert parse("--enforce-eager").enforce_eager is True
    assert parse("--no-enforce-eager").enforce_eager is False
    assert parse("--kv-cache-gib", "0.5").kv_cache_gib == 0.5


def _hf_greedy(model_dir: Path, prompts: dict[str, list[int]]) -> tuple[dict, dict, dict]:
    """Greedy token ids, their log-probs and the margin to the runner-up token at each step, from
    transformers' generate in float32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids, logprobs, margins = {}, {}, {}
    for problem_id, prompt in prompts.items():
        with torch.no_grad():
            out = model.generate(
                input_ids=torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=MAX_NEW_TOKENS,
                output_logits=True,
                return_dict_in_generate=True,
            )
        tokens = out.sequences[0, len(prompt) :].tolist()
        steps = torch.log_softmax(torch.stack(out.logits)[:, 0].float(), dim=-1)
        top2 = steps.topk(2, dim=-1).values
        ids[problem_id] = tokens
        logprobs[problem_id] = [float(steps[i, t]) for i, t in enumerate(tokens)]
        margins[problem_id] = (top2[:, 0] - top2[:, 1]).tolist()
    return ids, logprobs, margins


@pytest.mark.slow
def test_vllm_on_cpu_matches_the_transformers_backend_on_the_same_model_and_data(recipe_model, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # the backend's own default: 1 GiB

    model, data = recipe_model
    common = [
        "--model", str(model), "--data", str(data), "--k", str(K), "--temperature", "0",
        "--max-new-tokens", str(MAX_NEW_TOKENS), "--score-workers", "1", "--no-progress",
    ]  # fmt: skip
    result_file = tmp_path / "vllm_result.json"
    vllm_run = run_command(
        [sys.executable, str(RUNNER), str(result_file), *common, "--output-dir", str(tmp_path / "vllm"),
         "--backend", "vllm", "--enforce-eager", "--max-model-len", "512"],
        {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        timeout_s=480,
    )  # fmt: skip
    assert vllm_run.returncode == 0, vllm_run.tail(60)
    hf_run = run_command(
        [sys.executable, "-m", "evaluation.generate", *common, "--output-dir", str(tmp_path / "hf"),
         "--backend", "transformers", "--device", "cpu"],
        {"OMP_NUM_THREADS": "1"},
        timeout_s=300,
    )  # fmt: skip
    assert hf_run.returncode == 0, hf_run.tail(60)
    result = json.loads(result_file.read_text())
    print(f"vLLM engine start {result['engine_start_s']:.1f} s, vLLM run {result['run_s']:.1f} s; "
          f"transformers command {hf_run.seconds:.1f} s")  # fmt: skip

    # the manifests differ in the backend entry only; vLLM's records the CPU settings it ran with
    vllm_manifest, hf_manifest = read_manifest(tmp_path / "vllm"), read_manifest(tmp_path / "hf")
    assert {k: v for k, v in vllm_manifest.items() if k != "backend"} == {
        k: v for k, v in hf_manifest.items() if k != "backend"
    }
    backend = vllm_manifest["backend"]
    assert backend == result["describe"]
    assert backend["name"] == "vllm" and backend["vllm_version"].startswith("0.24.0")
    assert (backend["device"], backend["enforce_eager"], backend["kv_cache_gib"], backend["dtype"]) == (
        "cpu",
        True,
        1.0,
        "float32",
    )
    assert hf_manifest["backend"]["name"] == "transformers"

    # greedy decoding: the same token ids from both engines, with log-probs that agree. Two
    # implementations may only part where transformers' best two tokens are within rounding of
    # each other (a near-tie); after that point the responses are not comparable.
    hf_ids, hf_logprobs, hf_margins = _hf_greedy(model, result["prompt_ids"])
    ties = {}
    for problem_id, ids in hf_ids.items():
        theirs = result["greedy_ids"][problem_id]
        # the first position where they part; a response may be longer than the other (the default)
        same = next(
            (i for i, (a, b) in enumerate(zip(ids, theirs, strict=False)) if a != b), min(len(ids), len(theirs))
        )
        if ids != theirs:
            assert same < len(ids) and hf_margins[problem_id][same] < LOGPROB_BOUND, (problem_id, ids, theirs)
            ties[problem_id] = same
        pairs = zip(result["greedy_logprobs"][problem_id][:same], hf_logprobs[problem_id][:same], strict=True)
        gap = max((abs(a - b) for a, b in pairs), default=0.0)
        assert gap < LOGPROB_BOUND, (problem_id, gap)
    assert len(ties) <= 1, f"near-ties are rare; {ties}"
    print(f"greedy token ids equal on {len(hf_ids) - len(ties)} of {len(hf_ids)} problems; near-ties: {ties}")

    # ... and therefore the same samples, scored the same way
    vllm_records, hf_records = read_samples(tmp_path / "vllm"), read_samples(tmp_path / "hf")
    assert len(vllm_records) == len(hf_records) == len(hf_ids) * K
    # each backend records the seed that reproduces a sample with it (docs/evaluation.md, "Seeds")
    assert [r["seed"] for r in vllm_records] == [
        derive_seed(0, r["problem_id"], r["sample_index"]) for r in vllm_records
    ]
    assert [r["seed"] for r in hf_records] == [derive_seed(0, r["problem_id"], 0) for r in hf_records]

    def unseeded(records):
        return [{k: v for k, v in r.items() if k != "seed"} for r in records if r["problem_id"] not in ties]

    assert unseeded(vllm_records) == unseeded(hf_records)
    eos = AutoTokenizer.from_pretrained(model).eos_token_id
    for record in (r for r in vllm_records if r["problem_id"] not in ties):
        ids = hf_ids[record["problem_id"]]
        assert record["num_tokens"] == len(ids) and record["truncated"] == (ids[-1] != eos)
        assert record["reason"] and record["score"] in (0.0, 1.0)
    accuracies = {r["acc"] for r in vllm_records}
    assert accuracies == {0.0, 1.0}, "the warm-started model should get some sums right and some wrong"
    if not ties:
        assert (
            json.loads((tmp_path / "vllm" / "summary.json").read_text())["overall"]
            == json.loads((tmp_path / "hf" / "summary.json").read_text())["overall"]
        )

    # sampling: one request per sample with its own seed; the same seeds give the same samples
    first, second = result["sampled"]
    assert first == second
    assert any(len(set(row)) > 1 for row in first), "8 samples at temperature 1 were all equal"
