"""A lost Ray node ends the run in seconds instead of hanging it for the collectives' timeout.

When a node dies mid-step (its raylet and every process on it gone), verl's ranks on the other
nodes wait in a collective for a peer that will never answer, and the TaskRunner waits on them:
gloo's and NCCL's timeouts are 30 minutes to hours, so a lost node could hold a whole allocation
that long before anything said so. Ray itself notices within seconds: the GCS health-checks every
raylet (``health_check_period_ms`` 3 s, ``health_check_failure_threshold`` 5) and marks an
unreachable node dead.

:class:`NodeWatch` runs in the driver (``python -m dfpo.main``) beside verl's ``run_ppo``: every
``period_s`` it reads Ray's node table (``ray.nodes()``, the GCS's view). A node that was alive
during the run and is now dead is reported — its id, address and hostname, and what to do — and
the driver is interrupted, so it ends with :data:`NODE_LOST_EXIT_STATUS`; ending the driver ends
the run's actors on the surviving nodes (Ray ties them to the job). If the driver does not end
within ``grace_s`` of the interrupt (blocked where the interrupt cannot reach), the process exits
at once with the same status. When verl raises a Ray error first (an actor of the lost node seen
dead before Ray has marked the node), the driver asks Ray's node table for up to 30 s before
reporting the error as it is, so the loss is still named and the status is the same.

Nodes that join during the run are watched from when they are first seen alive; nodes already
dead when the watch starts (an earlier node of a long-lived cluster) are ignored.
``DFPO_NODE_WATCH_S`` sets the period (default 10 s; 0 turns the watch off).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from dfpo.operations.environment_seconds import seconds_from_environment

NODE_LOST_EXIT_STATUS = 75  # EX_TEMPFAIL: a temporary failure; relaunching the same command resumes
PERIOD_ENV = "DFPO_NODE_WATCH_S"
DEFAULT_PERIOD_S = 10.0
DEFAULT_GRACE_S = 60.0
# how long a Ray error is held back to see whether a node was lost (Ray marks a node whose raylet
# died dead after about 15 s of failed health checks)
CONFIRM_S = 30.0


@dataclass(frozen=True)
class LostNode:
    node_id: str
    address: str
    hostname: str

    def message(self) -> str:
        return (
            f"dfpo: Ray node {self.node_id} ({self.hostname}, {self.address}) was lost during the run: its ranks and "
            "rollout servers are gone, and the ranks on the other nodes would wait for them in their collectives "
            "until torch's timeout. Ending the run. Restart Ray on that node (bash scripts/launch/ray_cluster.sh "
            "worker <head address>, or replace the node), then relaunch the same command: it resumes from the last "
            "complete checkpoint."
        )


def _alive(nodes: list[dict]) -> dict[str, dict]:
    return {node["NodeID"]: node for node in nodes if node.get("Alive")}


def lost_nodes(watched: dict[str, dict], nodes: list[dict]) -> list[LostNode]:
    """The watched nodes that Ray's node table now lists as not alive, or no longer lists."""
    now = {node["NodeID"]: node for node in nodes}
    lost = []
    for node_id, seen in watched.items():
        current = now.get(node_id)
        if current is None or not current.get("Alive"):
            lost.append(
                LostNode(node_id, str(seen.get("NodeManagerAddress", "?")), str(seen.get("NodeManagerHostname", "?")))
            )
    return lost


def interrupt_driver() -> None:
    """SIGINT to this process, as Ctrl-C: ``ray.get`` checks for it while it waits."""
    os.kill(os.getpid(), signal.SIGINT)


class NodeWatch:
    """Watch Ray's nodes from a daemon thread; see the module docstring."""

    def __init__(
        self,
        period_s: float = DEFAULT_PERIOD_S,
        grace_s: float = DEFAULT_GRACE_S,
        nodes: Callable[[], list[dict]] | None = None,
        ready: Callable[[], bool] | None = None,
        interrupt: Callable[[], None] = interrupt_driver,
        exit_now: Callable[[int], None] = os._exit,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.period_s = period_s
        self.grace_s = grace_s
        self._nodes = nodes
        self._ready = ready
        self._interrupt = interrupt
        self._exit_now = exit_now
        self._say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watched: dict[str, dict] = {}
        self._report_lock = threading.Lock()
        self._driver_ending = False
        self.lost: list[LostNode] = []

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> NodeWatch | None:
        """The watch with ``DFPO_NODE_WATCH_S``'s period, or None when it is 0."""
        period = seconds_from_environment(
            PERIOD_ENV,
            DEFAULT_PERIOD_S,
            "seconds between checks of Ray's nodes",
            zero_means="0 turns the watch off",
            environ=environ,
        )
        return cls(period_s=period) if period > 0 else None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dfpo-node-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period_s + 5)

    def _node_table(self) -> list[dict]:
        if self._nodes is not None:
            return self._nodes()
        import ray

        return ray.nodes()

    def _cluster_up(self) -> bool:
        if self._ready is not None:
            return self._ready()
        import ray

        return ray.is_initialized()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if not self._cluster_up():
                continue
            try:
                nodes = self._node_table()
            except Exception:  # noqa: BLE001  (the GCS busy or restarting: ask again next period)
                continue
            if self._report(lost_nodes(self._watched, nodes)):
                with self._report_lock:
                    interrupt = not self._driver_ending
                if interrupt:  # a driver already ending (handling verl's error) is not interrupted again
                    self._interrupt()
                if not self._stop.wait(self.grace_s):
                    self._say(f"dfpo: the driver did not end within {self.grace_s:.0f} s of the interrupt; exiting now")
                    self._exit_now(NODE_LOST_EXIT_STATUS)
                return
            self._watched.update(_alive(nodes))

    def _report(self, lost: list[LostNode]) -> bool:
        """Record and say ``lost`` once; True if this call did."""
        with self._report_lock:
            if not lost or self.lost:
                return False
            self.lost = lost
            for node in lost:
                self._say(node.message())
            return True

    def confirm_loss(self, timeout_s: float, poll_s: float = 1.0) -> bool:
        """Whether a watched node is lost, asking Ray's node table for up to ``timeout_s``: verl may
        report a dead actor of the lost node before Ray has marked the node itself dead."""
        deadline = time.monotonic() + timeout_s
        while not self.lost:
            try:
                self._report(lost_nodes(self._watched, self._node_table()))
            except Exception:  # noqa: BLE001
                pass
            if self.lost or time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
        return bool(self.lost)

    def ended_by_node_loss(self) -> bool:
        return bool(self.lost)

    def driver_ending(self) -> None:
        """The driver has left ``run()`` and is deciding how to end: from now on a loss the thread
        finds is recorded and said, but the driver is not interrupted (the last resort still holds)."""
        with self._report_lock:
            self._driver_ending = True


def _is_ray_error(error: BaseException) -> bool:
    try:
        from ray.exceptions import RayError
    except ImportError:
        return False
    return isinstance(error, RayError)


def run_watched(run: Callable[[], None], watch: NodeWatch | None, shutdown: Callable[[], None] | None = None) -> None:
    """``run()`` with ``watch`` beside it: a node loss ends it with :data:`NODE_LOST_EXIT_STATUS`
    (``shutdown`` first, e.g. ``ray.shutdown``), after the watch has said which node."""
    if watch is None:
        run()
        return
    watch.start()
    try:
        run()
    except BaseException as error:
        # the watch's interrupt; or a Ray error (a dead actor of the lost node) that verl raised
        # before Ray marked the node dead: then ask Ray's node table for a while
        if not _ended_by_node_loss(watch, error):
            raise
        if shutdown is not None:
            shutdown()
        raise SystemExit(NODE_LOST_EXIT_STATUS) from None
    finally:
        watch.stop()


def _ended_by_node_loss(watch: NodeWatch, error: BaseException) -> bool:
    """Whether ``run()`` ended with ``error`` because a node was lost. The watch's own interrupt may
    arrive here too, when its check finds the loss while the driver is already handling verl's Ray
    error (seen in CI: the interrupt landed in :meth:`NodeWatch.confirm_loss`); it then means
    the same thing."""
    try:
        watch.driver_ending()
        return watch.ended_by_node_loss() or (
            _is_ray_error(error) and watch.confirm_loss(max(CONFIRM_S, 3 * watch.period_s))
        )
    except KeyboardInterrupt:
        if watch.ended_by_node_loss():
            return True
        raise
