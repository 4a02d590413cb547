"""The CPU backend's switch: a ``verl.plugins`` entry point of its own (``dfpo_cpu_backend``).

verl loads every entry point of the ``verl.plugins`` group on ``import verl``, in the driver, the
Ray TaskRunner and every worker actor. This one registers the CPU platform always (inert until
selected) and activates the rest of the backend (:func:`cpu_backend.activate.activate`) only in a
process started with ``VERL_PLATFORM=cpu``; GPU runs are unaffected. verl logs a plugin's error at
debug level only, so the driver activates the backend again where an error is raised
(:func:`dfpo.launch.driver_setup.check_platform`). DFPO's own registrations (the loss and the
advantage estimator) are the other entry point, :mod:`dfpo.verl.plugin`.
"""

from __future__ import annotations

from cpu_backend.activate import activate
from cpu_backend.selection import local_backend_selected

if local_backend_selected():
    activate()
