"""CPU demonstration of the learning tax (``python -m demo``; the README's second example).

A tiny Qwen3 causal LM built in code learns a toy question-answering task with group-relative
RL. Every response begins with the same template header, so within a group the header
positions are shared steps (same history, same token); the reward ignores the header and is
negatively correlated with response length. Seven methods train from the same warm start with
the real loss functions that verl's actor calls (verl's ``vanilla``, ``gspo`` and ``cispo``
policy losses and DFPO's registered ``dfpo`` loss, verl's ``grpo`` and DFPO's ``dfpo``
advantage estimators), with several off-policy mini-batches per step. Per method and step the
demo measures the exact cancellation residual of the shared positions' own gradient, the drift
of the header's probabilities and of the policy entropy, and the reward.

Modules: :mod:`~demo.task` (vocabulary, prompts, reward rule),
:mod:`~demo.policy_model` (the tiny LM), :mod:`~demo.warm_start` (the supervised
start), :mod:`~demo.group_sampling` (sampling groups), :mod:`~demo.compared_methods` (the seven
methods through verl's registries), :mod:`~demo.training` (the update loop),
:mod:`~demo.measures` (residual and drift), :mod:`~demo.outputs` (table, PNG, JSON).
"""
