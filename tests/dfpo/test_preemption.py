"""dfpo.operations.preemption: SIGTERM to the driver stops the run after the step in flight, checkpointed.

The driver's side with real signals to this process (the request is a stand-in); the trainer's
side on verl's loop attributes; the request as a real named Ray actor read from another process
of the job. The whole path on the 2-node cluster is tests/e2e/test_multi_node_cpu.py.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from dfpo.operations import preemption
from dfpo.operations.preemption import (
    GRACE_ENV,
    PREEMPTED_EXIT_STATUS,
    InstallOnCreate,
    Preemption,
    grace_from_environment,
    run_preemptible,
)
from dfpo.verl import trainer


@pytest.fixture
def own_signals():
    """Python's SIGINT handler and the default SIGTERM, whatever an earlier test left; restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler), signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])


class Request:
    """The trainer's side of a stand-in request: it stops after ``step``."""

    def __init__(self, step: int | None = 3) -> None:
        self.step = step
        self.made = threading.Event()


def preemption_with(request: Request, grace_s: float = 5.0, said: list | None = None) -> Preemption:
    def make():
        request.made.set()
        return request

    stop = Preemption(grace_s=grace_s, request=make, say=(said.append if said is not None else lambda _: None))
    stop.stopped_step = lambda: request.step if stop.handle is not None else None
    return stop


def sigterm_soon(delay: float = 0.1) -> None:
    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()


def test_sigterm_asks_the_trainer_to_stop_and_the_driver_ends_with_75_naming_the_step(own_signals, capsys):
    request, said = Request(step=3), []
    stop = preemption_with(request, said=said)
    stop.install()

    def run():  # verl's run_ppo: the trainer sees the request, finishes its step, returns
        sigterm_soon()
        assert request.made.wait(5), "no stop was requested"
        time.sleep(0.2)

    with pytest.raises(SystemExit) as ended:
        run_preemptible(run, stop)
    assert ended.value.code == PREEMPTED_EXIT_STATUS
    assert "finishing the step in flight and saving its checkpoint" in said[0]
    assert (
        "dfpo: stopped on SIGTERM after step 3, its checkpoint saved; relaunch the same command to resume"
        in capsys.readouterr().err
    )


def test_a_step_that_outlasts_the_grace_is_abandoned_with_the_same_status(own_signals, capsys):
    request, said = Request(), []
    stop = preemption_with(request, grace_s=0.3, said=said)
    stop.install()

    def run():
        sigterm_soon()
        time.sleep(10)  # the step never finishes

    started = time.monotonic()
    with pytest.raises(SystemExit) as ended:
        run_preemptible(run, stop)
    assert ended.value.code == PREEMPTED_EXIT_STATUS and time.monotonic() - started < 5
    assert stop.abandoned and "did not finish within 0 s of SIGTERM" in said[-1]
    assert "without finishing the step" in capsys.readouterr().err


def test_a_second_sigterm_abandons_at_once_but_one_delivered_twice_does_not(own_signals, monkeypatch):
    monkeypatch.setattr(preemption, "REPEAT_S", 0.5)
    stop = preemption_with(Request(), grace_s=60)
    stop.install()
    reached = []

    def run():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # the same stop, also forwarded by the batch script: ignored
        time.sleep(1.0)
        reached.append("the step went on")
        os.kill(os.getpid(), signal.SIGTERM)  # a second stop
        time.sleep(10)

    started = time.monotonic()
    with pytest.raises(SystemExit) as ended:
        run_preemptible(run, stop)
    assert reached == ["the step went on"]
    assert ended.value.code == PREEMPTED_EXIT_STATUS and stop.abandoned and time.monotonic() - started < 5


def test_without_sigterm_nothing_changes_and_a_users_ctrl_c_stays_a_keyboard_interrupt(own_signals):
    stop = preemption_with(Request())
    stop.install()
    done = []
    run_preemptible(lambda: done.append(True), stop)
    assert done == [True] and not stop.requested

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_preemptible(interrupted, preemption_with(Request()))


@pytest.mark.parametrize(("value", "grace"), [(None, 300.0), ("45", 45.0)])
def test_the_grace_comes_from_the_environment(value, grace):
    assert grace_from_environment({} if value is None else {GRACE_ENV: value}) == grace


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf"])
def test_a_bad_grace_is_refused_naming_the_variable(value):
    with pytest.raises(ValueError, match=GRACE_ENV):
        grace_from_environment({GRACE_ENV: value})


def test_the_handler_is_installed_when_the_task_runner_is_created():
    """verl's run_ppo calls ray.init (which installs Ray's own SIGTERM handler), then creates the
    TaskRunner: the first moment the driver's handler can be ours."""
    calls = []
    actor_class = SimpleNamespace(
        remote=lambda *a: calls.append(("remote", a)) or "handle",
        options=lambda **kw: SimpleNamespace(remote=lambda: calls.append(("options", kw)) or "h2"),
    )
    wrapped = InstallOnCreate(actor_class, lambda: calls.append("install"))
    assert calls == []
    assert wrapped.remote(1) == "handle" and calls == ["install", ("remote", (1,))]
    assert wrapped.options(runtime_env={"nsight": {}}).remote() == "h2" and calls[-2:] == [
        "install",
        ("options", {"runtime_env": {"nsight": {}}}),
    ]


class FakeTrainer:
    """verl's loop attributes that DFPO's trainer reads at the end of a step."""

    stop_if_preempted = trainer._DFPOTrainer.stop_if_preempted
    saved_this_step = trainer._DFPOTrainer.saved_this_step

    def __init__(self, step: int, total: int, save_freq: int) -> None:
        self.global_steps, self.total_training_steps = step, total
        self.config = SimpleNamespace(trainer=SimpleNamespace(save_freq=save_freq))
        self.saved = []

    def _save_checkpoint(self):
        self.saved.append(self.global_steps)


@pytest.mark.parametrize(
    ("step", "save_freq", "saves"),
    [(3, 5, [3]), (5, 5, []), (3, -1, [3]), (10, 5, [])],  # verl saves steps 5 and 10 itself; with save_freq -1 never
)
def test_the_trainer_checkpoints_the_step_unless_verl_just_did_and_makes_it_the_last(
    monkeypatch, step, save_freq, saves
):
    recorded = []
    monkeypatch.setattr(trainer, "stop_requested", lambda: "request")
    monkeypatch.setattr(trainer, "record_stop", lambda handle, at: recorded.append((handle, at)))
    fake = FakeTrainer(step, total=10, save_freq=save_freq)
    fake.stop_if_preempted()
    assert fake.saved == saves and recorded == [("request", step)]
    assert fake.total_training_steps == step  # verl's loop: global_steps <= total_training_steps ends after this step


def test_the_trainer_runs_on_when_no_stop_was_requested(monkeypatch):
    monkeypatch.setattr(trainer, "stop_requested", lambda: None)
    fake = FakeTrainer(3, total=10, save_freq=5)
    fake.stop_if_preempted()
    assert fake.saved == [] and fake.total_training_steps == 10


def test_the_request_is_a_named_actor_another_process_of_the_job_finds():
    """The real seam: the driver creates the request, a task of the same job (as verl's TaskRunner
    is) finds it by name and records its step, and the driver reads the step back."""
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        def trainer_process(step):
            handle = preemption.stop_requested()
            if handle is None:
                return False
            preemption.record_stop(handle, step)
            return True

        assert ray.get(trainer_process.remote(7)) is False  # no SIGTERM yet: no request
        stop = Preemption()
        stop.handle = stop._request()
        assert ray.get(trainer_process.remote(7)) is True
        assert stop.stopped_step() == 7
    finally:
        ray.shutdown()
