"""Run verl's whole trainer on CPU: dfpo's CPU backend (platform, engine, process group, rollout).

This package is the backend only. The example assets the CPU recipes train on (the tiny model, the
toy and digit-sum tasks, the pretrained-model conversion) are :mod:`cpu_examples`; the README's
main job that runs them end to end is :mod:`quickstart.pipeline`.

verl 0.9.1 needs a GPU at five places; this package fills each through verl's own extension
points, without editing verl (every internal it touches is listed and checked in
:mod:`cpu_backend.verl_internals`):

1. platform — :class:`cpu_backend.platform.PlatformCPU` (device ``cpu``, collectives over gloo,
   each rank a logical Ray ``GPU``);
2. engine — verl's own ``FSDPEngineWithLMHead`` registered for device ``cpu``, backend ``fsdp2``;
3. process group — verl asks torch for ``"cpu:gloo,cpu:gloo"``, which torch rejects; the name
   verl's workers call is wrapped to ask for plain ``gloo`` (:func:`cpu_backend.activate.gloo_process_group`);
4. rollout — ``actor_rollout_ref.rollout.name=vllm`` (the CPU recipes' default): verl's own vLLM
   rollout on vLLM's CPU build, with the one fix its weight sync needs applied in vLLM's processes
   by a vLLM plugin (:mod:`cpu_backend.vllm_cpu`); or ``name=local``: a transformers server actor per
   replica (:mod:`cpu_backend.server`) behind verl's rollout registries (:mod:`cpu_backend.local_rollout`),
   which starts faster and serves tests of the trainer rather than of the rollout engine;
5. weight sync to standalone rollout replicas (verl's separate-async trainer) —
   ``rollout.checkpoint_engine.backend=local``: a gloo broadcast (:mod:`cpu_backend.checkpoint_engine`);
   and verl's sharded save of π_old to CPU made to copy (on CPU it aliased the live weights).

Selecting it: ``VERL_PLATFORM=cpu`` in the environment of every process (the driver and, through
``ray_kwargs.ray_init.runtime_env.env_vars``, every Ray actor). dfpo's verl plugin, loaded by every
``import verl``, then calls :func:`cpu_backend.activate.activate`. Without it nothing here runs:
GPU runs are unaffected.
"""
