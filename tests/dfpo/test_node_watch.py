"""dfpo.operations.node_watch: a Ray node lost during the run ends the driver, saying which node.

The watch runs against a scripted node table here (Ray's ``ray.nodes()`` rows: ``NodeID``,
``Alive``, ``NodeManagerAddress``, ``NodeManagerHostname``); the real loss of a node of a 2-node
Ray cluster is tests/e2e/test_multi_node_cpu.py.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from dfpo.operations.node_watch import NODE_LOST_EXIT_STATUS, PERIOD_ENV, NodeWatch, lost_nodes, run_watched


def node(node_id: str, alive: bool = True, address: str = "10.0.0.1", host: str = "gpu-a") -> dict:
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": address, "NodeManagerHostname": host}


class Table:
    """A node table that changes when told to; counts reads."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.reads = 0

    def __call__(self) -> list[dict]:
        self.reads += 1
        return list(self.rows)


def _never_exit(status: int) -> None:
    """The watch's last resort (os._exit) would end the test process: refuse it here."""
    raise AssertionError(f"the watch tried to exit the process with status {status}")


def wait_for(condition, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_lost_nodes_are_the_watched_ones_now_dead_or_gone():
    watched = {"a": node("a"), "b": node("b", address="10.0.0.2", host="gpu-b"), "c": node("c")}
    lost = lost_nodes(watched, [node("a"), node("b", alive=False)])
    assert [(n.node_id, n.address, n.hostname) for n in lost] == [
        ("b", "10.0.0.2", "gpu-b"),
        ("c", "10.0.0.1", "gpu-a"),
    ]
    assert lost_nodes(watched, [node("a"), node("b"), node("c"), node("d", alive=False)]) == []


def test_a_node_lost_during_the_run_is_named_and_the_driver_interrupted():
    table = Table([node("head", host="h"), node("worker", address="10.0.0.2", host="w"), node("old", alive=False)])
    said, interrupted = [], threading.Event()
    watch = NodeWatch(
        period_s=0.01,
        grace_s=5,
        nodes=table,
        ready=lambda: True,
        interrupt=interrupted.set,
        exit_now=pytest.fail,
        say=said.append,
    )
    watch.start()
    assert wait_for(lambda: table.reads >= 3)
    assert not interrupted.is_set()  # a node dead before the watch began is not this run's loss
    table.rows = [node("head", host="h"), node("worker", alive=False, address="10.0.0.2", host="w")]
    assert interrupted.wait(5)
    watch.stop()
    (message,) = said
    assert "Ray node worker (w, 10.0.0.2) was lost during the run" in message
    assert "relaunch the same command: it resumes from the last complete checkpoint" in message
    assert watch.ended_by_node_loss()


def test_a_node_that_joins_later_is_watched_from_then():
    table = Table([node("head")])
    interrupted = threading.Event()
    watch = NodeWatch(
        period_s=0.01,
        exit_now=_never_exit,
        nodes=table,
        ready=lambda: True,
        interrupt=interrupted.set,
        say=lambda _: None,
    )
    watch.start()
    assert wait_for(lambda: table.reads >= 2)
    table.rows = [node("head"), node("late")]
    reads = table.reads
    assert wait_for(lambda: table.reads >= reads + 2)
    table.rows = [node("head")]  # the late node disappears from the table
    assert interrupted.wait(5)
    watch.stop()
    assert [n.node_id for n in watch.lost] == ["late"]


def test_nothing_is_read_before_ray_is_up_and_a_failing_read_is_retried():
    up = threading.Event()
    calls = []

    def flaky() -> list[dict]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("GCS busy")
        return [node("head")]

    watch = NodeWatch(
        period_s=0.01, exit_now=_never_exit, nodes=flaky, ready=up.is_set, interrupt=pytest.fail, say=pytest.fail
    )
    watch.start()
    time.sleep(0.1)
    assert calls == []
    up.set()
    assert wait_for(lambda: len(calls) >= 3)
    watch.stop()
    assert not watch.ended_by_node_loss()


def test_a_driver_that_does_not_end_after_the_interrupt_exits_with_the_node_lost_status():
    table = Table([node("head"), node("worker")])
    exited = []
    watch = NodeWatch(
        period_s=0.01,
        grace_s=0.05,
        nodes=table,
        ready=lambda: True,
        interrupt=lambda: None,
        exit_now=exited.append,
        say=lambda _: None,
    )
    watch.start()
    assert wait_for(lambda: table.reads >= 2)
    table.rows = [node("head")]
    assert wait_for(lambda: exited == [NODE_LOST_EXIT_STATUS])
    watch.stop()


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler (KeyboardInterrupt), whatever an earlier test left installed."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_run_watched_turns_the_interrupt_into_the_node_lost_status_after_shutdown(python_sigint_handler):
    table = Table([node("head"), node("worker")])
    shut = []
    exited = []
    watch = NodeWatch(
        period_s=0.01, grace_s=5, nodes=table, ready=lambda: True, exit_now=exited.append, say=lambda _: None
    )

    def run():  # verl's run_ppo, blocked until the interrupt arrives
        assert wait_for(lambda: table.reads >= 2)
        table.rows = [node("head")]
        time.sleep(10)

    with pytest.raises(SystemExit) as ended:
        run_watched(run, watch, shutdown=lambda: shut.append(True))
    assert ended.value.code == NODE_LOST_EXIT_STATUS and shut == [True] and exited == []


def test_run_watched_leaves_a_user_interrupt_and_a_normal_end_alone(python_sigint_handler):
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_watched(
            interrupted, NodeWatch(period_s=0.01, exit_now=_never_exit, nodes=Table([node("head")]), ready=lambda: True)
        )
    done = []
    run_watched(
        lambda: done.append(True),
        NodeWatch(period_s=0.01, exit_now=_never_exit, nodes=Table([node("head")]), ready=lambda: True),
    )
    run_watched(lambda: done.append(True), None)
    assert done == [True, True]


@pytest.mark.parametrize(("value", "period"), [(None, 10.0), ("2.5", 2.5), ("0", None)])
def test_the_period_comes_from_the_environment(value, period):
    watch = NodeWatch.from_environment({} if value is None else {PERIOD_ENV: value})
    assert (watch.period_s if watch else None) == period


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_period_is_refused_naming_the_variable(value):
    with pytest.raises(ValueError, match=PERIOD_ENV):
        NodeWatch.from_environment({PERIOD_ENV: value})


def test_a_ray_error_before_the_watch_saw_the_loss_is_confirmed_from_the_node_table():
    """verl may see the lost node's actor dead (a Ray error) before Ray marks the node dead: the
    driver asks the node table for a while, then names the node and ends with the same status."""
    from ray.exceptions import RayError

    table = Table([node("head"), node("worker")])
    said = []
    watch = NodeWatch(
        period_s=0.01, exit_now=_never_exit, nodes=table, ready=lambda: True, interrupt=pytest.fail, say=said.append
    )

    def run():
        assert wait_for(lambda: table.reads >= 2)  # the worker is watched
        watch._stop.set()  # the periodic check is not the one that finds it here
        watch._thread.join()
        threading.Timer(0.2, lambda: setattr(table, "rows", [node("head"), node("worker", alive=False)])).start()
        raise RayError("The actor died unexpectedly before finishing this task.")

    with pytest.raises(SystemExit) as ended:
        run_watched(run, watch)
    assert ended.value.code == NODE_LOST_EXIT_STATUS
    assert "Ray node worker" in said[0]


def test_other_errors_are_raised_as_they_are_without_waiting():
    watch = NodeWatch(
        period_s=0.01,
        exit_now=_never_exit,
        nodes=Table([node("head"), node("worker")]),
        ready=lambda: True,
        interrupt=pytest.fail,
    )
    started = time.monotonic()
    with pytest.raises(ValueError, match="a bug"):
        run_watched(lambda: (_ for _ in ()).throw(ValueError("a bug")), watch)
    assert time.monotonic() - started < 5


def test_a_loss_the_thread_finds_while_the_driver_handles_a_ray_error_does_not_interrupt_it(python_sigint_handler):
    """Seen in CI: verl raised the lost node's Ray error first; the watch's own check found the
    node dead a moment later, while the driver was already asking the node table, and its
    interrupt (a KeyboardInterrupt there) ended the driver with status 1 instead of 75."""
    from ray.exceptions import RayError

    table = Table([node("head"), node("worker")])
    interrupts, exited = [], []
    watch = NodeWatch(
        period_s=0.01,
        grace_s=5,
        nodes=table,
        ready=lambda: True,
        interrupt=lambda: interrupts.append(1),
        exit_now=exited.append,
        say=lambda _: None,
    )

    def run():
        assert wait_for(lambda: table.reads >= 2)
        threading.Timer(0.2, lambda: setattr(table, "rows", [node("head")])).start()
        raise RayError("The actor died unexpectedly before finishing this task.")

    with pytest.raises(SystemExit) as ended:
        run_watched(run, watch)
    assert ended.value.code == NODE_LOST_EXIT_STATUS
    assert [n.node_id for n in watch.lost] == ["worker"] and interrupts == [] and exited == []


def test_the_watch_interrupt_arriving_while_the_driver_decides_still_ends_with_the_node_lost_status(
    python_sigint_handler, monkeypatch
):
    """The interrupt sent just before the driver said it was ending lands in its handler: the
    loss it carries is recorded, so the driver still ends with the node-lost status."""
    from ray.exceptions import RayError

    watch = NodeWatch(
        period_s=60,
        exit_now=_never_exit,
        nodes=Table([node("head"), node("worker")]),
        ready=lambda: True,
        say=lambda _: None,
    )

    def interrupted_while_confirming(timeout_s: float, poll_s: float = 1.0) -> bool:
        watch._report(lost_nodes({"worker": node("worker")}, [node("head")]))
        raise KeyboardInterrupt

    monkeypatch.setattr(watch, "confirm_loss", interrupted_while_confirming)
    with pytest.raises(SystemExit) as ended:
        run_watched(lambda: (_ for _ in ()).throw(RayError("actor died")), watch)
    assert ended.value.code == NODE_LOST_EXIT_STATUS
