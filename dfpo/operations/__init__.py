"""Keeping a long run alive and honest: preemption with grace, a lost node, checking a run's log.

:mod:`~dfpo.operations.preemption` (SIGTERM ends the run after the step in flight, checkpointed),
:mod:`~dfpo.operations.node_watch` (a lost Ray node ends the run in seconds),
:mod:`~dfpo.operations.run_checks` (did a short run do what it should?),
:mod:`~dfpo.operations.training_logs` (the metrics verl's ``Tracking`` writes).
"""
