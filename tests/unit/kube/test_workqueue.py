"""The controllers' work queue and the client-side rate limit."""

from __future__ import annotations

import threading

import pytest

from kai.kube.ratelimit import TokenBucket
from kai.kube.workqueue import ShutDown, WorkQueue
from kai.metrics import ControllerMetrics, Registry, WorkQueueMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_waiting_key_is_held_once():
    q = WorkQueue()
    for key in ("a", "b", "a", "a"):
        q.add(key)
    assert len(q) == 2
    assert [q.get(0), q.get(0), q.get(0)] == ["a", "b", None]


def test_a_key_added_while_processing_waits_for_done():
    q = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")
    assert q.get(0) is None  # not handed to a second worker while the first holds it
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0) is None


def test_add_after_becomes_due_on_the_clock():
    clock = Clock()
    q = WorkQueue(clock=clock)
    q.add_after("late", 5.0)
    q.add_after("soon", 1.0)
    assert q.get(0) is None
    clock.now = 1.0
    assert q.get(0) == "soon"
    clock.now = 5.0
    assert q.get(0) == "late"


def test_shutdown_wakes_blocked_workers():
    q = WorkQueue()
    raised = threading.Event()

    def worker():
        try:
            q.get()
        except ShutDown:
            raised.set()

    thread = threading.Thread(target=worker)
    thread.start()
    q.shut_down()
    thread.join(5)
    assert raised.is_set()
    with pytest.raises(ShutDown):
        q.get(0)


def test_token_bucket_allows_a_burst_then_paces_at_qps():
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits[:3] == [0, 0, 0]
    assert waits[3] == pytest.approx(0.1) and waits[4] == pytest.approx(0.1)
    assert clock.now == pytest.approx(0.2)
    clock.now += 10  # idle refills up to the burst, not beyond
    assert [bucket.acquire() for _ in range(4)][:3] == [0, 0, 0]


def test_token_bucket_without_qps_never_waits():
    clock = Clock()
    bucket = TokenBucket(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    assert all(bucket.acquire() == 0 for _ in range(100)) and not clock.slept


def test_the_queue_reports_client_go_s_work_queue_metrics():
    registry, clock = Registry(), Clock()
    q = WorkQueue()
    q.metrics = WorkQueueMetrics(ControllerMetrics(registry), "things", clock=clock)
    labels = {"name": "things", "controller": "things"}

    def value(name: str, **extra: str) -> float | None:
        return registry.value(name, {**labels, **extra})

    q.add("a")
    q.add("a")  # held once: one add
    q.add("b")
    assert value("workqueue_adds_total") == 2
    assert value("workqueue_depth", priority="") == 2
    clock.now = 3.0
    key = q.get()
    assert value("workqueue_depth", priority="") == 1
    assert value("workqueue_queue_duration_seconds_sum") == 3.0
    clock.now = 5.0
    assert value("workqueue_unfinished_work_seconds") == value("workqueue_longest_running_processor_seconds") == 2.0
    q.add(key)  # added again while in hand: waits for done, counted once more
    q.done(key)
    assert value("workqueue_work_duration_seconds_sum") == 2.0
    assert value("workqueue_unfinished_work_seconds") == 0.0
    assert value("workqueue_adds_total") == 3 and value("workqueue_depth", priority="") == 2
    q.add_after("c", 1.0)
    q.add_after("d", 0.0)
    assert value("workqueue_retries_total") == 2
