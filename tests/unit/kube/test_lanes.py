"""Keyed lanes of background writes: order per key, independence across keys, the cap, stopping."""

from __future__ import annotations

import threading
import time

import pytest

from kai.kube.lanes import Lanes
from kai.logs import record_fields


def keys_on_different_lanes(lanes: Lanes) -> tuple[str, str]:
    first = "a"
    other = next(k for k in (f"k{i}" for i in range(100)) if hash(k) % lanes.count != hash(first) % lanes.count)
    return first, other


def test_writes_of_one_key_run_in_submission_order():
    lanes = Lanes("test", count=3).start()
    done: list[int] = []
    for i in range(50):
        lanes.submit("pod", "write", lambda i=i: (time.sleep(0.001 * (i % 3)), done.append(i)))
    assert lanes.flush(5)
    assert done == list(range(50))
    lanes.close(1)


def test_a_slow_write_does_not_hold_up_another_keys():
    lanes = Lanes("test", count=2).start()
    slow, fast = keys_on_different_lanes(lanes)
    release, ran = threading.Event(), threading.Event()
    lanes.submit(slow, "slow", release.wait)
    lanes.submit(fast, "fast", ran.set)
    assert ran.wait(2)
    assert not lanes.flush(0.05)  # the slow one still runs
    release.set()
    assert lanes.flush(2)
    lanes.close(1)


def test_before_start_a_write_runs_on_the_callers_thread():
    lanes = Lanes("test")
    seen = []
    assert lanes.submit("k", "write", lambda: seen.append(threading.current_thread()))
    assert seen == [threading.current_thread()]


def test_a_failing_write_is_logged_and_the_lane_goes_on(caplog):
    lanes = Lanes("test", count=1).start()
    done = []

    def fail():
        raise RuntimeError("boom")

    lanes.submit("k", "bad write", fail)
    lanes.submit("k", "good write", lambda: done.append(1))
    assert lanes.flush(2) and done == [1]
    assert [record_fields(r)["write"] for r in caplog.records if "write failed" in r.getMessage()] == ["bad write"]
    lanes.close(1)


def test_writes_beyond_the_limit_are_dropped_and_counted(caplog):
    lanes = Lanes("test", count=1, limit=2).start()
    started, release = threading.Event(), threading.Event()
    lanes.submit("k", "blocker", lambda: (started.set(), release.wait()))
    assert started.wait(2)  # the blocker left the queue: two may wait behind it
    assert lanes.submit("k", "w1", lambda: None) and lanes.submit("k", "w2", lambda: None)
    assert not lanes.submit("k", "w3", lambda: None)
    assert lanes.dropped == 1 and "write dropped" in caplog.text
    release.set()
    assert lanes.flush(2)
    lanes.close(1)


def test_close_finishes_queued_writes_within_the_timeout_and_drops_the_rest():
    lanes = Lanes("test", count=1).start()
    done = []
    for i in range(3):
        lanes.submit("k", "write", lambda i=i: done.append(i))
    assert lanes.close(2) and done == [0, 1, 2]
    assert not lanes.submit("k", "late", lambda: done.append(9)) and done == [0, 1, 2]

    stuck = Lanes("test", count=1).start()
    release = threading.Event()
    stuck.submit("k", "stuck", release.wait)
    stuck.submit("k", "behind", lambda: done.append(99))
    assert not stuck.close(0.1)
    assert stuck.dropped == 1
    release.set()
    time.sleep(0.05)
    assert 99 not in done


def test_lanes_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        Lanes("test", count=0)
