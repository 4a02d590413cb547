"""The CPU backend's switch: a ``verl.plugins`` entry point of its own (``dfpo_cpu_backend``).

verl loads every entry point of the ``verl.plugins`` group on ``import verl``, in the driver, the
Ray TaskRunner and every worker actor. This one registers the CPU platform always (inert until
selected) and activates the rest of the backend only in a process started with
``VERL_PLATFORM=cpu`` (:func:`cpu_backend.activate.activate_on_import`: each piece when verl's
module it touches is imported); GPU runs are unaffected. verl logs a plugin's error at debug level
only, so the driver activates the backend again, all of it at once and checked, where an error is
raised (:func:`dfpo.launch.driver_setup.check_platform` calls :func:`cpu_backend.activate.activate`).
DFPO's own registrations (the loss and the advantage estimator) are the other entry point,
:mod:`dfpo.verl.plugin`.
"""

from __future__ import annotations

from cpu_backend.activate import activate_on_import
from cpu_backend.selection import local_backend_selected

if local_backend_selected():
    activate_on_import()
