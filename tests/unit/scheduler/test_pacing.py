"""When the scheduler loop starts its next cycle: after changes, but not back to back after long cycles."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kai.scheduler.loop import Scheduler


def waited(scheduler: Scheduler, cycle_seconds: float) -> float:
    """Seconds ``_wait_next`` waits after a cycle of ``cycle_seconds`` when a change is already waiting."""
    scheduler.cache.changed.set()
    begin = time.monotonic()
    scheduler._wait_next(threading.Event(), started=begin - cycle_seconds)
    return time.monotonic() - begin


def test_a_change_after_a_short_cycle_starts_the_next_after_the_debounce_only():
    scheduler = Scheduler(None, period=30.0, debounce=0.01)
    assert waited(scheduler, 0.0) < 10.0  # far below the period: the change was not left to wait for it


def test_a_long_cycle_is_followed_by_a_pause_as_long_even_with_changes_waiting():
    scheduler = Scheduler(None, period=30.0, debounce=0.01)
    assert waited(scheduler, 0.4) >= 0.39


def test_the_pause_after_a_long_cycle_is_at_most_a_period():
    scheduler = Scheduler(None, period=0.2, debounce=0.01)
    assert 0.19 <= waited(scheduler, 60.0) < 30.0


def test_after_a_cycle_that_decided_changes_wait_for_the_period():
    scheduler = Scheduler(None, period=0.5, debounce=0.01)
    scheduler.cache.changed.set()
    begin = time.monotonic()
    scheduler._wait_next(threading.Event(), started=begin, decided=True)
    assert time.monotonic() - begin >= 0.49


def test_no_cycle_starts_while_the_decisions_before_it_are_still_being_written():
    scheduler = Scheduler(None, period=0.05, debounce=0.01)
    release = threading.Event()
    scheduler.committer._submit("bind", "ns/p", lambda: release.wait(5), decision=True)
    threading.Timer(0.5, release.set).start()
    scheduler.cache.changed.set()
    begin = time.monotonic()
    scheduler._wait_next(threading.Event(), started=begin, decided=True)
    assert 0.45 <= time.monotonic() - begin < 4.0


def test_a_stop_ends_the_wait_for_the_writes():
    scheduler = Scheduler(None, period=0.05)
    release, stop = threading.Event(), threading.Event()
    scheduler.committer._submit("bind", "ns/p", lambda: release.wait(5), decision=True)
    threading.Timer(0.2, stop.set).start()
    begin = time.monotonic()
    scheduler._wait_next(stop, started=begin)
    assert time.monotonic() - begin < 2.0
    release.set()


def podgroup(annotations: dict | None = None, min_member: int = 1) -> dict:
    return {"metadata": {"name": "g", "namespace": "ns", "uid": "pg-g", "annotations": annotations or {}},
            "spec": {"queue": "q", "minMember": min_member}}


def waited_after(scheduler: Scheduler, raw: dict) -> float:
    """Seconds ``_wait_next`` waits after a short cycle when the watch brings ``raw`` (a PodGroup) meanwhile."""
    informer = scheduler.cache.informers["podgroups"]
    informer._replace([podgroup()], "1")
    scheduler.cache.changed.clear()
    begin = time.monotonic()
    informer._apply({"type": "MODIFIED", "object": raw})
    scheduler._wait_next(threading.Event(), started=begin)
    return time.monotonic() - begin


def test_the_schedulers_own_record_written_back_waits_for_the_period_a_spec_change_does_not():
    scheduler = Scheduler(None, period=0.5, debounce=0.01)
    stamped = podgroup({"kai.scheduler/last-start-timestamp": "2026-01-01T00:00:00Z"})
    assert waited_after(scheduler, stamped) >= 0.49  # the last-start time it stamped: no early cycle
    assert waited_after(scheduler, podgroup(min_member=2)) < 0.3  # a new gang size may let the job run


class Objects:
    """The watched SchedulingShard and Config as the loop sees them: a version and the settings built."""

    def __init__(self, value) -> None:
        self.version, self.value = 1, value

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_applied(self, timeout: float) -> bool:
        return True

    def describe(self) -> str:
        return "test"


def test_no_cycle_runs_while_the_config_disables_the_scheduler():
    from kai.framework import DEFAULT_CONFIG, Plugins
    from kai.scheduler.settings import Settings

    scheduler = Scheduler(None, period=0.05)
    scheduler.objects = Objects(Settings(Plugins(DEFAULT_CONFIG), None, 0.05, enabled=False))
    scheduler.cache.wait_synced = lambda timeout: []
    scheduler.cache.start = scheduler.cache.stop = lambda: None
    ran = []
    scheduler.run_once = lambda: ran.append(1) or SimpleNamespace(decisions=[])
    stop = threading.Event()
    worker = threading.Thread(target=scheduler.run, args=(stop,))
    worker.start()
    time.sleep(0.3)
    assert not ran and not scheduler.enabled
    scheduler.objects.value = Settings(Plugins(DEFAULT_CONFIG), None, 0.05)
    scheduler.objects.version = 2
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    worker.join(5)
    assert ran and scheduler.enabled
