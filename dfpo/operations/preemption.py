"""Preemption with grace: SIGTERM to the driver ends the run after the step in flight, checkpointed.

SLURM ends a job that is preempted or reaches its time limit with SIGTERM and, a grace period
later, SIGKILL (``GraceTime`` of the partition's preemption, or ``sbatch --signal=B:TERM@<s>``
before the time limit: ``scripts/launch/slurm_ray.sbatch``); Kubernetes does the same with
``terminationGracePeriodSeconds``. Without this module the driver (``python -m dfpo.main``) dies at
once (Ray's own driver handler is ``sys.exit``) and the step in flight, and every step since the
last ``trainer.save_freq`` checkpoint, is lost.

With it, in the driver:

1. the first SIGTERM is said, and a stop is requested from the trainer: a named Ray actor
   ``dfpo_stop_<job id>`` (:class:`StopRequest`) that the trainer looks up at the end of every step
   (:func:`stop_requested`, one GCS lookup);
2. the trainer finishes the step in flight, saves its checkpoint unless verl has just saved that
   step (:meth:`dfpo.verl.trainer._DFPOTrainer.on_step_end`), records the step and ends its loop as at
   the last step; the driver then exits with :data:`PREEMPTED_EXIT_STATUS`, saying the step;
3. if the run has not ended ``grace_s`` after the signal (``DFPO_PREEMPT_GRACE_S``, default
   :data:`DEFAULT_GRACE_S`; set it below the scheduler's grace), or on a second SIGTERM at least
   :data:`REPEAT_S` after the first (one stop often arrives twice at once: from the scheduler and
   forwarded by the batch script), the step is abandoned: the driver is interrupted and exits with the same
   status; the last complete checkpoint is where a relaunch resumes (verl writes ``latest_checkpointed_iteration.txt``
   after a checkpoint's files, and ``dfpo.launch.preflight`` checks them before Ray starts).

Either way relaunching the same command resumes (``trainer.resume_mode=auto``). The handler is
installed when the TaskRunner is created, i.e. after ``ray.init`` (which installs Ray's).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dfpo.operations.environment_seconds import seconds_from_environment
from dfpo.operations.node_watch import interrupt_driver

PREEMPTED_EXIT_STATUS = 75  # EX_TEMPFAIL, as a lost node: relaunching the same command resumes
GRACE_ENV = "DFPO_PREEMPT_GRACE_S"
DEFAULT_GRACE_S = 300.0
REPEAT_S = 5.0  # a SIGTERM this soon after the first is the same stop delivered twice
_NAME_PREFIX = "dfpo_stop_"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class StopRequest:
    """The stop request of one job, as a named Ray actor: created by the driver on SIGTERM, read
    by the trainer; the trainer records the step it stopped after."""

    def __init__(self) -> None:
        self.step: int | None = None

    def stopped_after(self, step: int) -> None:
        self.step = step

    def stopped_step(self) -> int | None:
        return self.step


def _request_name() -> str:
    import ray

    return _NAME_PREFIX + ray.get_runtime_context().get_job_id()


def _request_handle() -> Any | None:
    import ray

    try:
        return ray.get_actor(_request_name())
    except ValueError:  # no such actor: no stop requested
        return None


def stop_requested() -> Any | None:
    """In the trainer (any process of the job): the stop request's handle, or None."""
    return _request_handle()


def record_stop(handle: Any, step: int) -> None:
    """In the trainer: the step after which it stopped (its checkpoint saved)."""
    import ray

    ray.get(handle.stopped_after.remote(step))


def grace_from_environment(environ: dict[str, str] | None = None) -> float:
    """``DFPO_PREEMPT_GRACE_S``: how long a SIGTERM'd run may take to finish its step (default 300 s)."""
    return seconds_from_environment(
        GRACE_ENV, DEFAULT_GRACE_S, "the seconds a SIGTERM'd run may take to finish its step", environ=environ
    )


class Preemption:
    """The driver's side (see the module docstring)."""

    def __init__(
        self,
        grace_s: float = DEFAULT_GRACE_S,
        request: Callable[[], Any] | None = None,
        interrupt: Callable[[], None] = interrupt_driver,
        say: Callable[[str], None] = _say,
    ) -> None:
        self.grace_s = grace_s
        self._request = request or self._create_request
        self._interrupt = interrupt
        self._say = say
        self._signals = 0
        self._first_signal_at = 0.0
        self._signalled = threading.Event()
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None
        self.handle: Any | None = None
        self.abandoned = False

    @staticmethod
    def _create_request() -> Any:
        import ray

        # num_cpus=0: schedulable however full the cluster; lives as long as the job
        return ray.remote(num_cpus=0)(StopRequest).options(name=_request_name()).remote()

    @property
    def requested(self) -> bool:
        return self._signals > 0

    def install(self) -> None:
        """Take SIGTERM over (main thread; after ``ray.init``, whose handler exits at once)."""
        if self._thread is not None:
            return
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._thread = threading.Thread(target=self._serve, name="dfpo-preemption", daemon=True)
        self._thread.start()

    def _on_sigterm(self, signum, frame) -> None:
        self._signals += 1
        if self._signals == 1:
            self._first_signal_at = time.monotonic()
            self._signalled.set()
            return
        if time.monotonic() - self._first_signal_at < REPEAT_S:
            return
        self._say(
            "dfpo: a second SIGTERM: abandoning the step in flight; a relaunch resumes from the last complete "
            "checkpoint"
        )
        self.abandoned = True
        raise KeyboardInterrupt

    def _serve(self) -> None:
        self._signalled.wait()
        if self._ended.is_set():
            return
        self._say(
            "dfpo: SIGTERM: finishing the step in flight and saving its checkpoint, then stopping (within "
            f"{self.grace_s:.0f} s, "
            f"{GRACE_ENV}; a second SIGTERM abandons the step)"
        )
        try:
            self.handle = self._request()
        except Exception as error:  # noqa: BLE001  (Ray unreachable: nothing can be asked to stop)
            self._say(f"dfpo: could not ask the trainer to stop ({error!r}); abandoning the step in flight")
            self._abandon()
            return
        if not self._ended.wait(self.grace_s):
            self._say(f"dfpo: the step did not finish within {self.grace_s:.0f} s of SIGTERM; abandoning it")
            self._abandon()

    def _abandon(self) -> None:
        self.abandoned = True
        self._interrupt()

    def stopped_step(self) -> int | None:
        if self.handle is None:
            return None
        import ray

        try:
            return ray.get(self.handle.stopped_step.remote(), timeout=30)
        except Exception:  # noqa: BLE001
            return None

    def end(self) -> None:
        self._ended.set()


def run_preemptible(run: Callable[[], None], preemption: Preemption | None) -> None:
    """``run()``, ended with :data:`PREEMPTED_EXIT_STATUS` and a message when SIGTERM stopped it
    (the handler is installed by ``preemption.install``, which the caller arranges after ``ray.init``)."""
    if preemption is None:
        run()
        return
    try:
        run()
    except KeyboardInterrupt:
        preemption.end()
        if not preemption.abandoned:
            raise
        _say(
            "dfpo: stopped after SIGTERM without finishing the step; relaunch the same command: it resumes from the "
            "last complete checkpoint"
        )
        raise SystemExit(PREEMPTED_EXIT_STATUS) from None
    preemption.end()
    if preemption.requested:
        step = preemption.stopped_step()
        where = f"after step {step}, its checkpoint saved" if step is not None else "at the end of the run"
        _say(f"dfpo: stopped on SIGTERM {where}; relaunch the same command to resume")
        raise SystemExit(PREEMPTED_EXIT_STATUS)


class InstallOnCreate:
    """A Ray actor class whose ``remote()`` first calls ``on_create``: verl's ``run_ppo`` creates the
    TaskRunner right after ``ray.init``, the first moment the driver's SIGTERM handler can be ours."""

    def __init__(self, actor_class: Any, on_create: Callable[[], None]) -> None:
        self._actor_class = actor_class
        self._on_create = on_create

    def options(self, **kwargs) -> InstallOnCreate:
        return InstallOnCreate(self._actor_class.options(**kwargs), self._on_create)

    def remote(self, *args, **kwargs):
        self._on_create()
        return self._actor_class.remote(*args, **kwargs)
