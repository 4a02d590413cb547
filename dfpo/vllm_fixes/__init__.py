"""The seam into vLLM: fixes to the installed vLLM that DFPO's rollout needs, one fix per module.

Each module is loaded by vLLM itself, in every process it starts (EngineCore, Workers), through an
entry point of the group ``vllm.general_plugins`` in pyproject.toml, before the model is built. A
fix checks the vLLM internals it relies on and raises a clear error if they changed; it patches only
while the installed vLLM still has the bug, so that it retires itself when vLLM is upgraded.

Nothing here imports DFPO's verl seam or its launchers: vLLM's processes need not import verl.

* :mod:`~dfpo.vllm_fixes.gpt_oss_bf16_loading`: unquantized (bf16) GPT-OSS checkpoints load into
  vLLM 0.24's fused MoE experts (vllm-project/vllm#45830).
"""
