"""The seam with verl 0.9.1: DFPO plugged into verl's trainer through its extension points only.

:mod:`~dfpo.verl.plugin` (the ``dfpo`` policy loss and advantage estimator in verl's registries),
:mod:`~dfpo.verl.loss_config` (DFPO's options as a verl ``PolicyLossConfig``),
:mod:`~dfpo.verl.loss_fn` (the actor's loss function), :mod:`~dfpo.verl.workers` (what DFPO changes in
verl's actor worker), :mod:`~dfpo.verl.group_prepass` (exact group statistics across micro-batches and
ranks), :mod:`~dfpo.verl.group_prepass_wiring` (the pre-pass wired into verl's batches),
:mod:`~dfpo.verl.sequence_parallel` (its log-probs under Ulysses), :mod:`~dfpo.verl.old_log_probs_flag`
(the trainer's word on the old log-probs), :mod:`~dfpo.verl.update_kl_probe` (the size of each update),
:mod:`~dfpo.verl.trainer` (verl's trainers with DFPO's worker), :mod:`~dfpo.verl.version` (the
verl release this is written against). Nothing in verl is modified; each departure from verl's
own behaviour is marked where it happens.
"""
