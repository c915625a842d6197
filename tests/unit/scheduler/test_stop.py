"""How the scheduler stops: the loop notices at once, and the committer finishes the gang it submitted
within its bound, drops the explanations, and gives up on decisions past the bound."""

from __future__ import annotations

import logging
import threading
import time

from kai import testing as kt
from kai.kube.client import ApiError
from kai.scheduler.commit import Committer
from kai.scheduler.loop import Scheduler
from support.kube import FakeApi

from .test_commit import cache_for, pod, podgroup


class GatedKube(FakeApi):
    """Accepts every request (replying ``{}``); a POST of a Binding waits for ``gate`` (at most ``hold``
    seconds) before it reaches the server."""

    def __init__(self, hold: float = 0.0) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.hold = hold

    def request(self, method, path, *args, **kwargs):
        if method == "POST" and path.endswith("/binding"):
            self.gate.wait(self.hold)
        return super().request(method, path, *args, **kwargs)

    def serve(self, method, path, query, body, content_type):
        return {}

    def posted(self, what: str) -> int:
        return sum(1 for path in self.paths("POST") if path.rsplit("/", 1)[-1] == what)


def submit_gang(kube, pods: int = 4) -> Committer:
    """One cycle placing a gang of ``pods`` one-GPU pods, committed on a single decision worker."""
    cache = cache_for(kube, [pod(f"p{i}", "gang") for i in range(pods)], [podgroup("gang", min_member=pods)])
    committer = Committer(kube, cache, workers=1)
    cycle = cache.snapshot(now=1000.0)
    session = kt.run(cycle.snapshot)
    assert sum(d.kind == "bind" for d in session.decisions) == pods
    committer.commit(session, cycle)
    return committer


def test_close_finishes_the_gang_it_submitted_and_drops_the_events_after_it(caplog):
    kube = GatedKube(hold=0.05)  # each Binding takes a while: most of the gang is still queued
    committer = submit_gang(kube)
    with caplog.at_level(logging.WARNING):
        assert committer.close(timeout=30) is True
    assert kube.posted("binding") == 4  # the whole gang, none dropped
    assert kube.posted("events") < 4  # Scheduled events not started before closing are dropped
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # dropping them is no failure


def test_close_drops_decisions_not_started_within_its_timeout():
    kube = GatedKube(hold=60)
    committer = submit_gang(kube)
    begin = time.monotonic()
    assert committer.close(timeout=0.3) is False
    assert time.monotonic() - begin < 10  # the bound, not the 60 s the write hangs
    kube.gate.set()  # the write in flight completes; those still queued were dropped
    committer.decisions.shutdown(wait=True)
    assert kube.posted("binding") == 1


def test_close_reports_a_failed_decision_as_finished_and_the_error_as_usual(caplog):
    class Refusing(GatedKube):
        def request(self, method, path, query=None, body=None, **kw):
            if method == "POST" and path.endswith("/binding"):
                raise ApiError(method, path, 500, "etcd unavailable")
            return super().request(method, path, query, body, **kw)

    committer = submit_gang(Refusing(), pods=2)
    assert committer.close(timeout=10) is True
    assert "bind failed" in caplog.text


def test_a_stop_during_the_wait_between_cycles_ends_it_at_once():
    scheduler = Scheduler(None, period=30.0)
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    begin = time.monotonic()
    scheduler._wait_next(stop, started=begin)
    assert time.monotonic() - begin < 10  # not the 30 s period


def test_a_stop_while_waiting_for_the_first_lists_ends_the_wait_at_once():
    scheduler = Scheduler(None, sync_timeout=60.0)  # its informers never list
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    begin = time.monotonic()
    assert scheduler._wait_synced(stop) is False
    assert time.monotonic() - begin < 4  # the first warning comes after 5 s; the stop came long before
