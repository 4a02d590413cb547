"""CPU demonstration of the learning tax (``python -m dfpo.demo``; the README's second example).

A tiny Qwen3 causal LM built in code learns a toy question-answering task with group-relative
RL. Every response begins with the same template header, so within a group the header
positions are shared steps (same history, same token); the reward ignores the header and is
negatively correlated with response length. Seven methods train from the same warm start with
the real loss functions that verl's actor calls (verl's ``vanilla``, ``gspo`` and ``cispo``
policy losses and DFPO's registered ``dfpo`` loss, verl's ``grpo`` and DFPO's ``dfpo``
advantage estimators), with several off-policy mini-batches per step. Per method and step the
demo measures the exact cancellation residual of the shared positions' own gradient, the drift
of the header's probabilities and of the policy entropy, and the reward.

Modules: :mod:`~dfpo.demo.toy_task` (vocabulary, prompts, reward rule),
:mod:`~dfpo.demo.policy_model` (the tiny LM), :mod:`~dfpo.demo.warm_start` (the supervised
start), :mod:`~dfpo.demo.rollout` (sampling groups), :mod:`~dfpo.demo.methods` (the seven
methods through verl's registries), :mod:`~dfpo.demo.training` (the update loop),
:mod:`~dfpo.demo.measures` (residual and drift), :mod:`~dfpo.demo.outputs` (table, PNG, JSON).
"""
