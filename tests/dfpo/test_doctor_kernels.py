"""``python -m dfpo.launch.doctor``'s attention-kernel checks: the GPT-OSS recipe's sink attention
(one whose backward trains the sinks; a hub kernel pinned to a revision and really loaded) and
Qwen3-Next's fast Gated DeltaNet as transformers decides it (``is_fast_path_available``), with the
kernel modules imported as transformers imports them. Loaders are injected: no GPU, no network."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dfpo.launch import doctor
from dfpo.launch.doctor import FAIL, OK, WARN

FAST_KERNELS = {
    "causal_conv1d": SimpleNamespace(causal_conv1d_fn=print, causal_conv1d_update=print),
    "fla.ops.gated_delta_rule": SimpleNamespace(chunk_gated_delta_rule=print, fused_recurrent_gated_delta_rule=print),
    "fla.modules": SimpleNamespace(FusedRMSNormGated=object),
    "torch.nn.attention.flex_attention": SimpleNamespace(),
    "transformers.integrations.flex_attention": SimpleNamespace(),
    "flash_attn_2_cuda": SimpleNamespace(),
    "flash_attn": SimpleNamespace(),
}


def importer(modules: dict[str, object]):
    """An ``importlib.import_module`` that knows only ``modules``."""

    def import_module(name: str):
        if name not in modules:
            raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")
        return modules[name]

    return import_module


def qwen3_next(fast: bool, **overrides) -> dict[str, object]:
    modules = {**FAST_KERNELS, doctor.QWEN3_NEXT_MODELING: SimpleNamespace(is_fast_path_available=fast), **overrides}
    return {name: module for name, module in modules.items() if module is not None}


def test_qwen3_next_fast_path_is_ok_only_when_transformers_takes_it():
    check = doctor.check_qwen3_next_fast_path("gpu", importer(qwen3_next(True)))
    assert check.status == OK and "is_fast_path_available" in check.detail


def test_a_gpu_node_on_the_slow_torch_path_fails_naming_the_package_and_the_build():
    check = doctor.check_qwen3_next_fast_path("gpu", importer(qwen3_next(False, causal_conv1d=None)))
    assert check.status == FAIL
    assert "slow torch fallback" in check.detail and "causal-conv1d: ModuleNotFoundError" in check.detail
    assert "flash-linear-attention" not in check.detail  # fla imported: only the missing one is named
    assert "requirements-gpu-build.txt" in check.fix


def test_kernels_that_import_are_not_enough_transformers_decides():
    """The mutant a presence check is: every kernel module imports, yet transformers' own flag is
    False (no CUDA at import, or an fla older than transformers accepts); the GPU run is slow."""
    check = doctor.check_qwen3_next_fast_path("gpu", importer(qwen3_next(False)))
    assert check.status == FAIL and "only when torch sees CUDA" in check.detail


def test_a_kernel_module_without_the_functions_transformers_imports_is_named():
    broken = qwen3_next(False, **{"fla.ops.gated_delta_rule": SimpleNamespace(chunk_gated_delta_rule=print)})
    check = doctor.check_qwen3_next_fast_path("gpu", importer(broken))
    assert check.status == FAIL
    assert "flash-linear-attention: fla.ops.gated_delta_rule has no fused_recurrent_gated_delta_rule" in check.detail


def test_the_torch_fallback_is_expected_on_the_cpu_stack():
    check = doctor.check_qwen3_next_fast_path("cpu", importer(qwen3_next(False, causal_conv1d=None)))
    assert check.status == OK and "expected on CPU" in check.detail and "causal-conv1d" in check.detail


def test_this_cpu_machine_has_fla_but_not_causal_conv1d():
    """The real imports here: a GPU node in this state would run Qwen3-Next slowly (FAIL); the CPU
    stack expects it."""
    gpu, cpu = doctor.check_qwen3_next_fast_path("gpu"), doctor.check_qwen3_next_fast_path("cpu")
    assert gpu.status == FAIL and "causal-conv1d: ModuleNotFoundError" in gpu.detail
    assert "flash-linear-attention:" not in gpu.detail
    assert cpu.status == OK


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("kernels-community/vllm-flash-attn3", ("kernels-community/vllm-flash-attn3", None)),
        ("kernels-community/flash-attn3@0a1b2c3", ("kernels-community/flash-attn3", "0a1b2c3")),
        ("org/repo@v1:flash_attn_varlen_func", ("org/repo", "v1")),
        ("paged|org/repo@main", ("org/repo", "main")),
        ("flex_attention", None),
        ("eager", None),
    ],
)
def test_hub_kernel_names_are_read_as_transformers_reads_them(name, parsed):
    assert doctor.parse_hub_kernel(name) == parsed


def _never(*args):
    raise AssertionError(f"no kernel should be loaded: {args}")


@pytest.mark.parametrize("name", ["kernels-community/vllm-flash-attn3", "kernels-community/vllm-flash-attn3@abc123"])
def test_the_hub_kernel_without_a_sink_backward_fails_pinned_or_not(name):
    check = doctor.check_gpt_oss_attention(name, load_kernel=_never)
    assert check.status == FAIL and "no sink gradient" in check.detail and "#1797" in check.detail
    assert "flex_attention" in check.fix


def test_an_unpinned_hub_kernel_fails_with_how_to_pin_it():
    check = doctor.check_gpt_oss_attention("org/sink-attention", load_kernel=_never)
    assert check.status == FAIL and "no revision" in check.detail
    assert "GPT_OSS_ATTN_IMPLEMENTATION=org/sink-attention@<commit sha>" in check.fix
    assert "kernels.get_kernel('org/sink-attention', revision=...)" in check.fix


def test_a_pinned_hub_kernel_is_really_loaded_at_its_revision():
    loaded = []
    check = doctor.check_gpt_oss_attention("org/sink-attention@0a1b2c3", load_kernel=lambda *a: loaded.append(a))
    assert loaded == [("org/sink-attention", "0a1b2c3")]
    assert check.status == WARN and "python -m dfpo.launch.sink_attention_check" in check.fix

    def offline(repo, revision):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    failed = doctor.check_gpt_oss_attention("org/sink-attention@0a1b2c3", load_kernel=offline)
    assert failed.status == FAIL and "OSError: We couldn't connect" in failed.detail and "HF_HOME" in failed.fix


def test_the_hub_loader_is_kernels_get_kernel_at_the_revision(monkeypatch):
    import kernels

    calls = []
    monkeypatch.setattr(kernels, "get_kernel", lambda repo, revision=None: calls.append((repo, revision)))
    doctor.load_hub_kernel("org/sink-attention", "0a1b2c3")
    assert calls == [("org/sink-attention", "0a1b2c3")]


def test_flex_attention_is_ok_once_its_modules_load():
    ok = doctor.check_gpt_oss_attention("flex_attention", load_kernel=_never, import_module=importer(FAST_KERNELS))
    assert ok.status == OK and "log-sum-exp" in ok.detail
    broken = {k: v for k, v in FAST_KERNELS.items() if k != "torch.nn.attention.flex_attention"}
    failed = doctor.check_gpt_oss_attention("flex_attention", load_kernel=_never, import_module=importer(broken))
    assert failed.status == FAIL and "ModuleNotFoundError" in failed.detail


@pytest.mark.parametrize(
    ("name", "status", "says"),
    [
        ("eager", WARN, "quadratic"),
        ("sdpa", FAIL, "refuses sdpa"),
        ("flash_attention_2", FAIL, "no sink gradient"),
        ("flash_attention_3", FAIL, "no sink gradient"),
        ("flash_attention_4", WARN, "not known to train"),
    ],
)
def test_other_implementations_say_what_they_do_to_the_sinks(name, status, says):
    check = doctor.check_gpt_oss_attention(name, load_kernel=_never)
    assert check.status == status and says in check.detail


def test_the_gpt_oss_check_reads_the_recipe_knob_then_the_model_file():
    version = {"flash-attn": "2.8.3"}.get
    kernels = importer(qwen3_next(True))
    default = doctor.check_attention_kernels(version, {}, _never, kernels)
    assert [c.name for c in default] == [
        "flash-attn (Qwen3 recipes)",
        "GPT-OSS sink attention (flex_attention)",
        "Qwen3-Next linear attention",
    ]
    assert all(c.status == OK for c in default)
    knob = {"GPT_OSS_ATTN_IMPLEMENTATION": "kernels-community/vllm-flash-attn3"}
    overridden = doctor.check_attention_kernels(version, knob, _never, kernels)
    assert overridden[1].status == FAIL and overridden[1].name.endswith("(kernels-community/vllm-flash-attn3)")


def test_flash_attn_is_ok_only_once_its_compiled_kernels_load():
    version = {"flash-attn": "2.8.3"}.get
    loaded = doctor.check_flash_attn(version, importer(FAST_KERNELS))
    assert loaded.status == OK and "flash_attn_2_cuda" in loaded.detail and "loaded" in loaded.detail
    abi = ImportError("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")

    def mismatched(name: str):
        if name == "flash_attn_2_cuda":
            raise abi
        return SimpleNamespace()

    broken = doctor.check_flash_attn(version, mismatched)
    assert broken.status == FAIL and "undefined symbol" in broken.detail and "2.8.3 is installed" in broken.detail
    assert broken.fix == doctor.BUILD_FIX
    missing = doctor.check_flash_attn({}.get, importer(FAST_KERNELS))
    assert missing.status == FAIL and missing.detail.startswith("missing")


def test_the_kernel_module_is_the_pinned_flash_attns():
    """flash-attn 2.x's interface loads its kernels as ``import flash_attn_2_cuda`` (the GPU build pins
    2.8.3); another major version names them otherwise, and this check with them."""
    import re

    pinned = re.search(
        r"^flash-attn==(\d+)\.", (doctor.REPO_ROOT / "requirements-gpu-build.txt").read_text(), flags=re.M
    )
    assert pinned and pinned.group(1) == "2", "flash-attn's major version changed: update FLASH_ATTN_KERNELS"
