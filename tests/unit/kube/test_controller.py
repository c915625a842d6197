"""The Controller base: informers started and stopped, keys handled by workers, readiness, sync waits."""

from __future__ import annotations

import threading
import time

import pytest

from kai.kube.controller import Controller
from kai.logs import record_fields
from kai.metrics import ControllerMetrics, Registry


class FakeInformer:
    def __init__(self, synced: bool = True) -> None:
        self.synced = threading.Event()
        if synced:
            self.synced.set()
        self.started = self.stopped = False

    def start(self) -> FakeInformer:
        self.started = True
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped = True


class Recorder(Controller):
    name = "recorder"
    tick_period = 0.01

    def __init__(self, informers: dict[str, FakeInformer], fail: set[str] = frozenset(), **kw) -> None:
        super().__init__(kube=None, **kw)
        self._fakes = informers
        self.fail = set(fail)
        self.handled: list[str] = []
        self.ticks = 0

    def informers(self):
        return self._fakes

    def handle(self, key):
        self.handled.append(key)
        if key in self.fail:
            self.fail.discard(key)
            raise RuntimeError(f"cannot handle {key}")
        return None

    def tick(self) -> None:
        self.ticks += 1


def run_until(controller: Controller, done, timeout: float = 5.0) -> threading.Thread:
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    return thread


def test_not_ready_before_it_runs_and_workers_must_be_positive():
    assert Recorder({}).ready() == (False, "not started")
    with pytest.raises(ValueError, match="recorder workers must be at least 1"):
        Recorder({}, workers=0)


def test_keys_are_handled_a_failing_key_is_retried_and_everything_stops():
    informers = {"things": FakeInformer()}
    controller = Recorder(informers, fail={"b"}, workers=2, error_delay=0.05)
    for key in "abc":
        controller.queue.add(key)
    run_until(controller, lambda: controller.handled.count("b") == 2 and controller.ticks > 0)
    assert sorted(controller.handled) == ["a", "b", "b", "c"]
    assert informers["things"].started and informers["things"].stopped
    assert controller.ready() == (True, "synced")


def test_wait_for_sync_postpones_keys_until_every_informer_listed():
    late = FakeInformer(synced=False)
    controller = Recorder({"early": FakeInformer(), "late": late})
    controller.wait_for_sync = True
    controller.queue.add("a")
    threading.Timer(0.3, late.synced.set).start()
    run_until(controller, lambda: controller.handled == ["a"])
    assert controller.handled == ["a"]


def test_readiness_names_the_informers_not_listed_yet():
    controller = Recorder({})
    controller.stores = {"pods": FakeInformer(synced=False), "nodes": FakeInformer()}
    assert controller.ready() == (False, "waiting for the first list of pods")


class Slow(Recorder):
    """Handles a key in ``seconds`` (or until released)."""

    def __init__(self, seconds: float, **kw) -> None:
        super().__init__({"things": FakeInformer()}, **kw)
        self.seconds = seconds
        self.started = threading.Event()
        self.finished: list[str] = []
        self.release = threading.Event()

    def handle(self, key):
        self.handled.append(key)
        self.started.set()
        self.release.wait(self.seconds)
        self.finished.append(key)
        return None


def _run_and_stop_while_handling(controller: Slow) -> float:
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,))
    thread.start()
    assert controller.started.wait(5)
    stopped = time.monotonic()
    stop.set()
    thread.join(30)
    assert not thread.is_alive()
    return time.monotonic() - stopped


def test_stop_takes_no_new_key_and_waits_for_the_one_in_hand():
    controller = Slow(0.3)
    for key in "abc":
        controller.queue.add(key)
    _run_and_stop_while_handling(controller)
    assert controller.handled == ["a"] and controller.finished == ["a"]  # finished, and b, c left for the next leader


def test_stop_leaves_a_worker_stuck_past_the_stop_timeout_behind(caplog):
    controller = Slow(60)
    controller.stop_timeout = 0.3
    controller.queue.add("a")
    took = _run_and_stop_while_handling(controller)
    assert took < 10  # not the 60 s the key takes
    assert controller.finished == []
    (record,) = [r for r in caplog.records if "stopped with keys still being handled" in r.getMessage()]
    assert record_fields(record)["workers"] == "recorder-0"
    controller.release.set()


def test_a_key_that_keeps_failing_is_retried_after_1_2_4_seconds_up_to_the_error_delay():
    controller = Recorder({}, fail=set(), error_delay=5.0)
    controller.handle = lambda key: 1 / 0  # every attempt raises
    assert [controller._handle("k") for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    controller.handle = lambda key: None  # a success starts the count again
    assert controller._handle("k") is None
    controller.handle = lambda key: 1 / 0
    assert controller._handle("k") == 1.0


def test_reconciles_and_the_work_queue_are_measured_under_the_controller_s_name():
    registry = Registry()
    controller = Recorder({"things": FakeInformer()}, fail={"b"}, workers=2, error_delay=0.05)
    controller.instrument(ControllerMetrics(registry))
    for key in "abc":
        controller.queue.add(key)
    run_until(controller, lambda: controller.handled.count("b") == 2)

    def value(metric: str, **labels: str) -> float | None:
        return registry.value(metric, {"controller": "recorder", **labels})

    assert value("controller_runtime_reconcile_total", result="success") == 3  # a, c and b the second time
    assert value("controller_runtime_reconcile_total", result="error") == 1
    assert value("controller_runtime_reconcile_total", result="requeue") == 0  # started at 0, as controller-runtime
    assert value("controller_runtime_reconcile_errors_total") == 1
    assert value("controller_runtime_reconcile_time_seconds_count") == 4
    assert value("controller_runtime_max_concurrent_reconciles") == 2
    assert value("controller_runtime_active_workers") == 0
    assert value("workqueue_adds_total", name="recorder") == 4  # a, b, c and b's retry
    assert value("workqueue_retries_total", name="recorder") == 1
