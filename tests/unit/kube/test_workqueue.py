"""The controllers' work queue and the client-side rate limit."""

from __future__ import annotations

import threading

import pytest

from kai.kube.ratelimit import TokenBucket
from kai.kube.workqueue import ShutDown, WorkQueue


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
