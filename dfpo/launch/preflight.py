"""What ``python -m dfpo.main`` checks before Ray starts, on every path (recipe, quickstart, direct).

A mistake found here costs seconds; the same mistake found by verl costs the start-up of a Ray
cluster, its workers and its rollout engines (minutes on a GPU node, and the error then surfaces
deep in a Ray worker, without the knob or the file). Each check names the key or the file and what
to do:

* **Groups.** DFPO's advantage estimator and DFPO's loss compare the ``G =
  actor_rollout_ref.rollout.n`` responses of a prompt: with ``G = 1`` every DFPO advantage is 0
  (:mod:`dfpo.algorithm.advantage`: a singleton group gets Â = 0 exactly) and the group transform has
  nothing to equalise, so nothing is learned. (verl's ``grpo`` gives a singleton Â = r_i instead:
  REINFORCE without a baseline, not what a GRPO baseline means, but it learns; not refused.)
* **Batches.** ``data.train_batch_size`` must be a multiple of ``actor.ppo_mini_batch_size`` (else
  every step ends with a smaller mini-batch). With dynamic batching (``actor.use_dynamic_bsz``) each
  token budget times the Ulysses degree must hold one whole sequence of ``data.max_prompt_length +
  data.max_response_length`` tokens (verl cannot split a sequence over micro-batches). Padded
  micro-batches (``model.use_remove_padding=false``) under dynamic batching with sequences of 4,096
  tokens or more get a warning: verl fills a micro-batch up to the budget in real tokens, then pads
  every row to the longest.
* **The files the run reads.** ``actor_rollout_ref.model.path`` and every file of
  ``data.train_files`` and ``data.val_files`` must exist (paths with a scheme, ``hdfs://`` and the
  like, and a hub id such as ``Qwen/Qwen3-32B`` as the model, are verl's to fetch), named with the knob that sets
  them and how to make them. A missing checkpoint is said with the model the base model file trains
  (``dfpo.model_id``, its Hugging Face id) and how to give it on the path in use: the recipes'
  ``MODEL_PATH`` knob, or ``actor_rollout_ref.model.path=...`` for ``python -m dfpo.main`` itself.
* **The response format.** Where the model is a local checkpoint, the reward's ``response_format``
  (``reward/response_format.py``) must be the one its tokenizer and chat template, rendered with
  ``data.apply_chat_template_kwargs``, produce: Qwen3 with thinking off read as ``qwen3_thinking``
  would score every response 0 as unfinished, and a thinking template read as ``plain`` would credit
  answers tried in the thinking.
* **Trainer mode.** ``dfpo_separate_async`` needs its rollout's own GPUs
  (``actor_rollout_ref.rollout.n_gpus_per_node``, the recipes' ``ROLLOUT_GPUS_PER_NODE``) and a checkpoint
  engine that reaches the rollout's own devices (``nccl``, or ``local`` on CPU); ``naive`` cannot.
* **Attention sinks and Ulysses.** A ``gpt_oss`` checkpoint (its ``config.json``, or ``dfpo.model``) with
  ``ulysses_sequence_parallel_size > 1`` is refused: verl 0.9.1's Ulysses attention splits the query
  heads over the ranks but passes the per-head attention-sink tensor through whole, and it does not
  patch flex or eager attention at all, so log-probs would be silently wrong.
* **The config of the run to resume** (:mod:`dfpo.launch.resume`): a relaunch that would resume a
  checkpoint must have the config that run recorded, outside the keys that only manage the run.
* **The memory plan** of a GPU run (:mod:`dfpo.launch.memory_plan`), printed for the model ``dfpo.model``
  names (the recipes set it) or whose ``config.json`` shape matches a known one; a model without a
  plan is said, not skipped in silence.
* **Checkpoint storage.** With ``trainer.nnodes > 1`` every rank writes its shard under
  ``trainer.default_local_dir``; resume and ``verl.model_merger`` need them all at one path, so it
  must be shared storage (the filesystem types :mod:`dfpo.launch.doctor` recognises), or the environment
  says ``ALLOW_LOCAL_CHECKPOINTS=1``.
* **The checkpoint to resume.** With ``trainer.resume_mode=auto`` verl resumes from the step its
  tracker file names, and with ``resume_path`` from ``trainer.resume_from_path``. That step's
  files must be whole: every rank's model, optimizer and extra-state shard
  (``actor/<kind>_world_size_<W>_rank_<r>.pt``, ranks 0..W-1) and the dataloader state
  (``data.pt``), each a readable torch archive. A file cut short by a killed writer or a full
  disk is found from the archive's directory (at its end), without reading the weights. With
  ``auto``, a damaged latest step falls back to the newest intact earlier one
  (``resume_mode=resume_path``), saying so; with none, or with ``resume_path``, the run stops
  naming the file. A tracker naming a step whose folder is missing (verl would silently train
  from scratch) is treated the same way.

:func:`check_sandbox_isolation` (run by ``python -m dfpo.main`` after these, in a GPU run only) checks
the code-reward sandbox of the driver's node: a run whose data has a code source, scored by this
node's sandbox (``code_backend=local``), stops unless the sandbox is strong (``bwrap``; ``unshare``
as root) or ``REWARD_SANDBOX_ALLOW_WEAK=1``; a math-only run is said not to use it. Every Ray
node is checked again once the cluster is up (:func:`dfpo.main.check_sandbox_on_every_node`).
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from dfpo.launch.doctor import is_shared_filesystem, storage_type
from dfpo.launch.resume import ResumeConfigChanged, check_resume_config

# verl's tracker of the latest complete checkpoint (verl.utils.checkpoint.checkpoint_manager),
# written after every rank's shard is saved
TRACKER_FILE = "latest_checkpointed_iteration.txt"
SHARD_KINDS = ("model", "optim", "extra_state")
FSDP_STRATEGIES = ("fsdp", "fsdp2")  # verl's FSDP checkpoint manager: one torch.save archive per rank and kind
_SHARD = re.compile(r"(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt")


class PreflightError(ValueError):
    """A setting or file that would make the run fail or learn nothing; the message says which."""


def check_group_size(config) -> None:
    """``rollout.n >= 2`` with DFPO's estimator or loss (a group of one learns nothing)."""
    n = int(config.actor_rollout_ref.rollout.n)
    uses = (
        [f"algorithm.adv_estimator={config.algorithm.adv_estimator}"]
        if str(config.algorithm.adv_estimator) == "dfpo"
        else []
    )
    if str(config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")) == "dfpo":
        uses.append("actor_rollout_ref.actor.policy_loss.loss_mode=dfpo")
    if n < 2 and uses:
        raise PreflightError(
            f"actor_rollout_ref.rollout.n={n}: {' and '.join(uses)} compare the responses of each prompt's group, "
            "and a group of one has advantage 0 and nothing to equalise, so nothing would be learned. Set "
            "actor_rollout_ref.rollout.n to 2 or more (the recipes' GROUP_SIZE; the paper uses 8)."
        )


def _file_list(value) -> list[str]:
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(item) for item in value]


def _hub_id(path: str) -> bool:
    """``org/name`` that is no local path: a Hugging Face hub id, which verl downloads (on every
    worker; the recipes' docs ask for a local directory, the README's direct example uses one)."""
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path)) and not os.path.exists(path)


# verl's ppo_trainer default of actor_rollout_ref.model.path: another model than any base model's
# (tests/dfpo/test_preflight_main.py checks it against verl's config)
VERL_DEFAULT_MODEL_PATH = "~/models/deepseek-llm-7b-chat"


def missing_model_message(config, environ: dict[str, str] | None = None) -> str:
    """What to do about a missing ``actor_rollout_ref.model.path``: the model the base model file
    trains (``dfpo.model_id``, its Hugging Face id) and how to give its checkpoint on the path in use.
    The recipes (``python -m dfpo.launch.recipe``, ``recipes/*.sh``) set that key from their
    ``MODEL_PATH`` knob and hand the driver their environment, so a path equal to ``MODEL_PATH`` in
    ``environ`` (default: this process's environment) came from the knob; any other was given to
    ``python -m dfpo.main``, which reads no ``MODEL_PATH``."""
    environ = os.environ if environ is None else environ
    model = str(config.actor_rollout_ref.model.path)
    dfpo = config.get("dfpo") or {}
    model_id, name = dfpo.get("model_id"), dfpo.get("model")
    wanted = f"a local Hugging Face checkpoint directory of {model_id}" if model_id else "a local checkpoint directory"
    trains = f"base_model={name} trains {model_id}: " if model_id and name else ""
    example_path = f"/path/to/{model_id.rsplit('/', 1)[-1]}" if model_id else "/path/to/checkpoint"
    knob = environ.get("MODEL_PATH")
    if knob and os.path.expanduser(knob) == os.path.expanduser(model):
        return (
            f"MODEL_PATH {knob} does not exist (the recipe's actor_rollout_ref.model.path): {trains}"
            f"set MODEL_PATH={example_path}, {wanted} (docs/recipes.md)"
        )
    given = (
        "actor_rollout_ref.model.path is not set (verl's default names another model)"
        if model == VERL_DEFAULT_MODEL_PATH
        else f"actor_rollout_ref.model.path {model} does not exist"
    )
    ignored = (
        f"; MODEL_PATH is set here ({knob}) but did not set this path: python -m dfpo.main reads no MODEL_PATH, "
        "and an override given to a recipe wins over its knobs"
        if knob
        else ""
    )
    return f"{given}: {trains}pass actor_rollout_ref.model.path={example_path}, {wanted} (docs/recipes.md){ignored}"


def check_input_files(config, environ: dict[str, str] | None = None) -> None:
    """The checkpoint and the data files exist (local paths; ``scheme://`` paths and a hub id as the
    model are verl's to fetch); a missing checkpoint is said as :func:`missing_model_message`."""
    problems = []
    model = str(config.actor_rollout_ref.model.path)
    if "://" not in model and not _hub_id(model) and not os.path.exists(os.path.expanduser(model)):
        problems.append(missing_model_message(config, environ))
    for key in ("train_files", "val_files"):
        for path in _file_list(config.data.get(key)):
            if "://" not in path and not os.path.exists(os.path.expanduser(path)):
                problems.append(
                    f"data.{key}: {path} does not exist: prepare it with data_prep (docs/data.md), or point the run "
                    f"at the files: dfpo.data_dir=DIR or data.{key}=[...] for python -m dfpo.main, "
                    f"DATA_DIR=DIR or {key.upper()}=... for the recipe scripts"
                )
    if problems:
        raise PreflightError("; ".join(problems))


def check_batch_sizes(config) -> None:
    """Whole mini-batches per step, and token budgets that hold one whole sequence."""
    data, actor = config.data, config.actor_rollout_ref.actor
    batch, mini = int(data.train_batch_size), int(actor.ppo_mini_batch_size)
    if batch % mini:
        raise PreflightError(
            f"data.train_batch_size={batch} is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size={mini} "
            "(each step would end with a smaller mini-batch): make it one (the recipes' TRAIN_BATCH_SIZE and "
            "PPO_MINI_BATCH_SIZE)."
        )
    if not actor.use_dynamic_bsz:
        return
    longest = int(data.max_prompt_length) + int(data.max_response_length)
    sp = int(actor.ulysses_sequence_parallel_size)
    rollout = config.actor_rollout_ref.rollout
    budgets = {
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu,
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": rollout.log_prob_max_token_len_per_gpu,
    }
    for key, budget in budgets.items():
        if budget is not None and int(budget) * sp < longest:
            raise PreflightError(
                f"token budget too small: {key}={budget} times "
                f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp} must hold one sequence of "
                f"data.max_prompt_length + data.max_response_length = {longest} tokens: raise it "
                "(the recipes' PPO_MAX_TOKEN_LEN_PER_GPU / LOG_PROB_MAX_TOKEN_LEN_PER_GPU)."
            )


def padding_warning(config) -> str | None:
    """A warning for padded micro-batches under dynamic batching with long sequences, or None."""
    actor = config.actor_rollout_ref.actor
    longest = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    if actor.use_dynamic_bsz and not config.actor_rollout_ref.model.use_remove_padding and longest >= 4096:
        return (
            "dfpo preflight warning: actor_rollout_ref.model.use_remove_padding=false with dynamic batching: a "
            f"micro-batch is padded to its longest row, so it can hold far more than ppo_max_token_len_per_gpu="
            f"{actor.ppo_max_token_len_per_gpu} padded tokens; for sequences of {longest} tokens use fixed "
            "micro-batches "
            "(actor_rollout_ref.actor.use_dynamic_bsz=false; the recipes' USE_DYNAMIC_BSZ=false)."
        )
    return None


def check_separate_async_rollout(config) -> None:
    """separate_async's rollout runs on GPUs of its own: how many must be said."""
    if str(config.trainer.v1.trainer_mode) != "dfpo_separate_async":
        return
    gpus = config.actor_rollout_ref.rollout.get("n_gpus_per_node")
    if gpus is None or int(gpus) < 1:
        raise PreflightError(
            "trainer.v1.trainer_mode=dfpo_separate_async runs the rollout on GPUs of its own: set "
            "actor_rollout_ref.rollout.n_gpus_per_node "
            f"(the recipes' ROLLOUT_GPUS_PER_NODE, and ROLLOUT_NNODES), got {gpus}"
        )


def check_separate_async_engine(config) -> None:
    """separate_async's rollout has devices of its own: the naive engine cannot reach them."""
    if str(config.trainer.v1.trainer_mode) != "dfpo_separate_async":
        return
    backend = str(config.actor_rollout_ref.rollout.checkpoint_engine.backend)
    if backend == "naive":
        raise PreflightError(
            "actor_rollout_ref.rollout.checkpoint_engine.backend=naive cannot reach separate_async's own rollout "
            "devices: use nccl (GPU) or local (CPU) (the recipes' CHECKPOINT_ENGINE)."
        )


def _model_config(config) -> dict:
    path = Path(_absolute(str(config.actor_rollout_ref.model.path))) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # not a local checkpoint (yet): verl reports it


def _named_model(config) -> str | None:
    """``dfpo.model``: the model's name in dfpo/launch/memory_plan.py's table (the recipes set it)."""
    return config.dfpo.get("model") if "dfpo" in config else None


def check_response_format(config) -> None:
    """The reward's ``response_format`` is the one the model's tokenizer and chat template produce
    (``reward.response_format.template_response_format``): a thinking template read as ``plain``
    credits answers tried in the thinking, and ``plain`` responses read as thinking all score 0 as
    unfinished. Checked where the model is a local checkpoint and the reward is ``reward/score.py``."""
    reward_fn = config.get("reward", {}).get("custom_reward_function", {})
    if not str(reward_fn.get("path") or "").endswith(str(Path("reward", "score.py"))):
        return
    model_dir = Path(_absolute(str(config.actor_rollout_ref.model.path)))
    if not (model_dir / "tokenizer_config.json").is_file():
        return  # not a local checkpoint (yet): verl reports it
    from transformers import AutoTokenizer

    from reward.response_format import PLAIN, template_response_format

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        return  # no chat template: verl's data loader reports it
    template_kwargs = dict(config.data.get("apply_chat_template_kwargs") or {})
    produced = template_response_format(tokenizer, template_kwargs)
    configured = (reward_fn.get("reward_kwargs") or {}).get("response_format", PLAIN)
    if produced != configured:
        raise PreflightError(
            f"reward.custom_reward_function.reward_kwargs.response_format={configured!r}, but {model_dir}'s chat "
            f"template with data.apply_chat_template_kwargs={template_kwargs} produces {produced!r} responses "
            f"(docs/rewards.md, 'Thinking models'): set response_format={produced!r}, or the template switch "
            "(e.g. enable_thinking) that matches the recipe"
        )


def check_attention_sinks_with_ulysses(config) -> None:
    """GPT-OSS's attention sinks are not split by verl 0.9.1's Ulysses attention."""
    sp = int(config.actor_rollout_ref.actor.ulysses_sequence_parallel_size)
    named = str(_named_model(config) or "")
    if sp > 1 and (named.startswith("gpt_oss") or _model_config(config).get("model_type") == "gpt_oss"):
        raise PreflightError(
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp} with a GPT-OSS checkpoint "
            f"({config.actor_rollout_ref.model.path}): verl 0.9.1's Ulysses sequence parallel does not split the "
            "attention sinks per head group (and does not patch flex_attention/eager), so log-probs would be "
            "silently wrong. Use 1 (the recipes' SP_SIZE=1, the GPT-OSS default)."
        )


def memory_plan_report(config, environ: dict[str, str] | None = None) -> str | None:
    """The plan of a GPU run (text; :mod:`dfpo.launch.memory_plan`): per-GPU memory by phase, host memory
    per node, collective bytes and step time, and for a MoE recipe's model the step time under the
    expert-parallel engines (:mod:`dfpo.launch.engine_plan`). A CPU run's plan is per CPU rank, without
    GPU capacity or step time (:func:`dfpo.launch.memory_plan.render`): the plan the resource meter checks
    on the tiny MoE runs. ``GPU_MEMORY_GB`` (default 80) is the GPU's memory. The model is the checkpoint's
    config.json when there is one, else the published config of the model ``dfpo.model`` names (or whose
    shape the config.json has)."""
    from dfpo.launch import memory_plan

    on_cpu = str(config.trainer.device) == "cpu"
    environ = os.environ if environ is None else environ
    gpu_memory_gb = float(environ.get("GPU_MEMORY_GB", "80"))
    name = _named_model(config)
    model_path = str(config.actor_rollout_ref.model.path)
    hf_config = _model_config(config)
    example = OmegaConf.select(config, "dfpo.example")
    if not hf_config and example:  # one of dfpo's CPU examples, built in code by the launch (a dry run writes nothing)
        return (
            f"dfpo preflight: the plan of {name or model_path} needs {model_path}/config.json, which a launch writes "
            f"first (dfpo.example={example}), as does python -m cpu_examples.prepare --output-root "
            f"{config.dfpo.output_root} --model {example}"
        )
    if name is None:
        name = memory_plan.known_model_of(hf_config) if hf_config else None
    if name is None and not hf_config:
        return (
            f"dfpo preflight: no memory plan for {model_path}: there is no config.json there, and dfpo.model names "
            "no model of PUBLISHED_CONFIGS in dfpo/launch/model_anatomy.py "
            f"({', '.join(sorted(memory_plan.KNOWN_MODELS))}); set dfpo.model, or point "
            "actor_rollout_ref.model.path at the checkpoint, for a plan."
        )
    try:
        hf_config = hf_config.get("text_config", hf_config) if hf_config else memory_plan.hf_config_for(name, None)
        plan = memory_plan.plan_of_config(config, str(name or Path(model_path).name), hf_config, gpu_memory_gb)
    except (KeyError, ValueError) as error:
        return f"dfpo preflight: no memory plan: {error.args[0]}"
    if on_cpu:
        return memory_plan.render(plan, on_cpu=True)
    from dfpo.launch.engine_plan import engine_report_for_config

    engines = engine_report_for_config(config)  # the MoE recipes: FSDP2 against the expert-parallel engines
    return memory_plan.render(plan) + (f"\n{engines}" if engines else "")


def check_checkpoint_storage(config, environ: dict[str, str] | None = None, mounts_text: str | None = None) -> None:
    """Several nodes need their checkpoint directory on storage every node sees."""
    environ = os.environ if environ is None else environ
    nnodes = int(config.trainer.nnodes)
    if nnodes <= 1 or environ.get("ALLOW_LOCAL_CHECKPOINTS", "0").lower() in ("1", "true", "yes", "on"):
        return
    directory = _absolute(str(config.trainer.default_local_dir))
    fs_type = storage_type(directory, mounts_text)
    if not is_shared_filesystem(fs_type):
        raise PreflightError(
            f"trainer.default_local_dir={directory} is on {fs_type or 'an unknown filesystem'}, not shared storage, "
            f"with trainer.nnodes={nnodes}: every rank writes its checkpoint shard there, and resume and "
            "verl.model_merger need all shards at one path. Set OUTPUT_ROOT (or CKPT_DIR, or "
            "trainer.default_local_dir) to shared storage (NFS, Lustre, GPFS, ...), or export "
            "ALLOW_LOCAL_CHECKPOINTS=1 if this path is shared in a way this check does not recognise."
        )


@dataclass(frozen=True)
class CheckpointProblem:
    path: Path
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def checkpoint_problem(step_dir: Path) -> CheckpointProblem | None:
    """The first missing or damaged file of verl checkpoint folder ``global_step_<N>``, or None."""
    if not step_dir.is_dir():
        return CheckpointProblem(step_dir, "the folder does not exist")
    actor = step_dir / "actor"
    shards: dict[str, dict[int, set[int]]] = {kind: {} for kind in SHARD_KINDS}
    if actor.is_dir():
        for path in actor.iterdir():
            match = _SHARD.fullmatch(path.name)
            if match:
                shards[match.group(1)].setdefault(int(match.group(2)), set()).add(int(match.group(3)))
    if not shards["model"]:
        return CheckpointProblem(actor, "no model shard (model_world_size_<W>_rank_<r>.pt)")
    (world_size, *others) = sorted(shards["model"])
    if others:
        return CheckpointProblem(actor, f"model shards of several world sizes ({[world_size, *others]})")
    for kind, by_world in shards.items():
        ranks = by_world.get(world_size, set())
        if kind != "model" and not by_world:
            continue  # not saved (checkpoint.save_contents)
        missing = sorted(set(range(world_size)) - ranks)
        if missing:
            return CheckpointProblem(actor / f"{kind}_world_size_{world_size}_rank_{missing[0]}.pt", "missing")
    files = [
        actor / f"{kind}_world_size_{world_size}_rank_{rank}.pt"
        for kind in SHARD_KINDS
        if shards[kind]
        for rank in range(world_size)
    ]
    data = step_dir / "data.pt"
    files += [data] if data.exists() else []
    for path in files:
        why = _archive_problem(path)
        if why:
            return CheckpointProblem(path, why)
    return None


def _archive_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable torch archive (torch.save's zip format), or None. Reads the
    archive's directory only, which sits at its end: a file cut short has none."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as error:
        size = path.stat().st_size if path.exists() else 0
        return f"not a readable torch archive ({error}; {size} bytes): cut short or overwritten"
    if not any(name.endswith("data.pkl") for name in names):
        return "a zip archive without torch's data.pkl: not a torch checkpoint"
    return None


def _absolute(path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def _steps(folder: Path) -> list[int]:
    found = []
    for entry in folder.glob("global_step_*"):
        suffix = entry.name.removeprefix("global_step_")
        if entry.is_dir() and suffix.isdigit():
            found.append(int(suffix))
    return sorted(found, reverse=True)


def check_resume_checkpoint(config, say=print) -> None:
    """Validate the checkpoint verl would resume from; fall back (``auto``) or stop naming the file."""
    mode = str(config.trainer.resume_mode)
    if mode == "disable" or str(config.actor_rollout_ref.actor.strategy) not in FSDP_STRATEGIES:
        return  # another engine's checkpoint layout: verl checks it itself
    if mode == "resume_path":
        step_dir = Path(_absolute(str(config.trainer.resume_from_path)))
        problem = checkpoint_problem(step_dir)
        if problem:
            raise PreflightError(
                f"trainer.resume_from_path={step_dir} cannot be resumed: {problem}. Point it at an intact "
                "global_step_<N> folder, or set trainer.resume_mode=auto."
            )
        return
    folder = Path(_absolute(str(config.trainer.default_local_dir)))
    tracker = folder / TRACKER_FILE
    if not tracker.exists():
        return  # nothing saved yet: verl trains from scratch
    text = tracker.read_text().strip()
    if not text.isdigit():
        raise PreflightError(
            f"{tracker} holds {text!r}, not a step number: delete it to resume from the newest intact step, or fix it"
        )
    latest = int(text)
    problem = checkpoint_problem(folder / f"global_step_{latest}")
    if problem is None:
        return
    for step in _steps(folder):
        if step < latest and checkpoint_problem(folder / f"global_step_{step}") is None:
            with open_dict(config):
                config.trainer.resume_mode = "resume_path"
                config.trainer.resume_from_path = str(folder / f"global_step_{step}")
            say(
                f"dfpo preflight: the latest checkpoint (step {latest}, named by {tracker}) is damaged: {problem}. "
                f"Resuming from step {step}, the newest intact one "
                f"(trainer.resume_from_path={config.trainer.resume_from_path})."
            )
            return
    raise PreflightError(
        f"the latest checkpoint (step {latest}, named by {tracker}) is damaged: {problem}; and no earlier intact step "
        f"is under {folder}. Delete {folder / f'global_step_{latest}'} and {tracker} to train from scratch, or set "
        "trainer.resume_mode=disable (or resume_path to a checkpoint elsewhere)."
    )


def resume_folder(config) -> Path | None:
    """The run folder verl will resume from (after :func:`check_resume_checkpoint`), or None."""
    mode = str(config.trainer.resume_mode)
    if mode == "resume_path":
        return Path(_absolute(str(config.trainer.resume_from_path))).parent
    folder = str(config.trainer.default_local_dir)
    if mode != "auto" or "://" in folder:
        return None
    folder_path = Path(_absolute(folder))
    return folder_path if (folder_path / TRACKER_FILE).exists() else None


def _data_sources(path: str) -> set[str] | None:
    """The ``data_source`` values of one parquet file, or None when they cannot be read here."""
    if "://" in path or not os.path.exists(os.path.expanduser(path)):
        return None
    try:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        column = pq.read_table(os.path.expanduser(path), columns=["data_source"]).column("data_source")
        return {str(value) for value in pc.unique(column).to_pylist()}
    except Exception:  # noqa: BLE001  (no such column, not parquet: unknown, so code is assumed)
        return None


def local_code_scoring(config) -> tuple[bool, str]:
    """Whether the run's reward runs model-written code in this project's sandbox, and why: its
    ``code_backend`` is ``local`` and a file of ``data.train_files`` or ``data.val_files`` has a
    ``data_source`` that is not a math source (a file whose sources cannot be read here counts as code)."""
    from reward.sources import MATH_SOURCES

    kwargs = OmegaConf.select(config, "reward.custom_reward_function.reward_kwargs") or {}
    backend = str(kwargs.get("code_backend", "local"))
    if backend != "local":
        return False, f"reward_kwargs.code_backend={backend}: code runs on the SandboxFusion server, not on these nodes"
    for key in ("train_files", "val_files"):
        for path in _file_list(config.data.get(key)):
            sources = _data_sources(path)
            if sources is None:
                return True, f"data.{key} {path}: its data_source column cannot be read here, so it may hold code"
            code = sorted(sources - set(MATH_SOURCES))
            if code:
                return True, f"data.{key} {path} has code sources ({', '.join(code)})"
    return False, "math only: no file of data.train_files or data.val_files has a code source"


def check_sandbox_isolation(config, say=print, environ: dict[str, str] | None = None, report=None) -> bool:
    """A GPU run whose reward runs code on these nodes needs the strong sandbox on this node, or the
    explicit opt-in ``REWARD_SANDBOX_ALLOW_WEAK=1`` (said loudly); returns whether the run scores
    code in the sandbox (its Ray workers are then told to require it too:
    :func:`dfpo.launch.driver_setup.require_strong_sandbox`). CPU runs are not checked. ``report``: this node's
    isolation (default: detected here, once per process)."""
    from reward.sandbox.detect import REQUIRE_STRONG_ENV, SandboxUnavailable, isolation, require_strong, weak_refusal

    if str(config.trainer.device) == "cpu":
        return False
    environ = os.environ if environ is None else environ
    needed, why = local_code_scoring(config)
    if not needed:
        say(f"dfpo preflight: the code-reward sandbox is not used by this run ({why}): not checked")
        return False
    try:
        report = report or isolation()
    except SandboxUnavailable as error:
        raise PreflightError(f"{weak_refusal(None, str(error))} [{why}]") from None
    try:
        require_strong(report, {**environ, REQUIRE_STRONG_ENV: "1"}, say=say)
    except SandboxUnavailable as error:
        raise PreflightError(f"{error} [{why}]") from None
    if report.strong:
        say(
            f"dfpo preflight: code rewards run in the sandbox at level {report.level} (strong) on this node; "
            "every Ray node is checked when the cluster is up"
        )
    return True


def preflight(config, say=print, environ: dict[str, str] | None = None, files: bool = True) -> None:
    """Every check above, in order; may point the run at an earlier checkpoint (see the module).
    Warnings and the memory plan are said through ``say``; ``environ`` (default: this process's
    environment) gives ``ALLOW_LOCAL_CHECKPOINTS`` and ``GPU_MEMORY_GB``. ``files=False`` leaves out
    the files the run reads (a dry run of an example whose files are written at launch)."""
    check_group_size(config)
    check_batch_sizes(config)
    if files:
        check_input_files(config, environ=environ)
        check_response_format(config)
    check_separate_async_rollout(config)
    check_separate_async_engine(config)
    check_attention_sinks_with_ulysses(config)
    check_checkpoint_storage(config, environ=environ)
    check_resume_checkpoint(config, say=say)
    try:
        check_resume_config(config, resume_folder(config), say=say)
    except ResumeConfigChanged as error:
        raise PreflightError(str(error)) from None
    for text in (padding_warning(config), memory_plan_report(config, environ=environ)):
        if text:
            say(text)
