"""Lease-based leader election against an in-memory Lease with the API server's write rules and watch.

Two processes with real timing are exercised in tests/e2e/test_leader.py.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time

import pytest

from kai.kube import leader as leader_mod
from kai.kube.client import ApiError
from kai.kube.leader import LeaderElector
from support.waiting import wait_until


class LeaseStore:
    """One namespace's Leases: create (409 if present), get, list and watch by name, and PUT with
    resourceVersion checks."""

    def __init__(self) -> None:
        self.leases: dict[str, dict] = {}
        self.version = 0
        self.fail = False
        self.forbid_watch = False
        self.events: list[tuple[int, str, dict]] = []
        self.changed = threading.Condition()

    def handle(self, method, path, body=None, query=None):
        if self.fail:
            raise ApiError(method, path, 0, "connection refused")
        name = path.rsplit("/", 1)[1]
        if method == "GET" and name == "leases":  # a list, by field selector metadata.name
            wanted = (query or {})["fieldSelector"].removeprefix("metadata.name=")
            items = [copy.deepcopy(lease) for n, lease in self.leases.items() if n == wanted]
            return {"items": items, "metadata": {"resourceVersion": str(self.version)}}
        if method == "GET":
            if name not in self.leases:
                raise ApiError(method, path, 404, "Not Found")
            return copy.deepcopy(self.leases[name])
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.leases:
                raise ApiError(method, path, 409, "AlreadyExists")
            return self._store(name, body)
        if method == "PUT":
            current = self.leases[name]
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiError(method, path, 409, "Conflict")
            return self._store(name, body)
        raise AssertionError(method)

    def _store(self, name, body):
        with self.changed:
            self.version += 1
            stored = copy.deepcopy(body)
            stored["metadata"]["resourceVersion"] = str(self.version)
            kind = "MODIFIED" if name in self.leases else "ADDED"
            self.leases[name] = stored
            self.events.append((self.version, kind, copy.deepcopy(stored)))
            self.changed.notify_all()
        return copy.deepcopy(stored)

    def delete(self, name):
        with self.changed:
            self.version += 1
            lease = self.leases.pop(name)
            lease["metadata"]["resourceVersion"] = str(self.version)
            self.events.append((self.version, "DELETED", lease))
            self.changed.notify_all()


class WatchStream:
    """The open response of a watch: events after ``since`` for the lease ``name``, one JSON line each."""

    def __init__(self, store: LeaseStore, name: str, since: int) -> None:
        self.store, self.name, self.since = store, name, since
        self.closed = False

    def stream(self, _size):
        while True:
            with self.store.changed:
                self.store.changed.wait_for(lambda: self.closed or self.store.version > self.since)
                if self.closed:
                    return
                events = [e for e in self.store.events if e[0] > self.since]
                self.since = self.store.version
            yield b"".join(json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                           for _, kind, obj in events if obj["metadata"]["name"] == self.name)

    def shutdown(self):
        with self.store.changed:
            self.closed = True
            self.store.changed.notify_all()


class FakeKube:
    timeout = 30.0

    def __init__(self, store: LeaseStore) -> None:
        self.api_client = store

    def get(self, path, query=None):
        return self.api_client.handle("GET", path, query=query)

    def post(self, path, body):
        return self.api_client.handle("POST", path, body)

    def request(self, method, path, query=None, body=None, **kw):
        return self.api_client.handle(method, path, body)

    @contextlib.contextmanager
    def stream(self, path, query, read_timeout):
        if self.api_client.forbid_watch:
            raise ApiError("GET", path, 403, "Forbidden")
        response = WatchStream(self.api_client, query["fieldSelector"].removeprefix("metadata.name="),
                               int(query["resourceVersion"]))
        try:
            yield response
        finally:
            response.shutdown()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(monkeypatch):
    store = LeaseStore()
    monkeypatch.setattr(leader_mod, "Kube", lambda api_client, timeout: FakeKube(api_client))
    return store


def elector(store, identity, clock, **kw):
    return LeaderElector(FakeKube(store), "kai-scheduler", "kai", identity, clock=clock, wall=clock,
                         lease_duration=15, renew_deadline=10, retry_period=5, **kw)


def holder(store):
    return store.leases["kai-scheduler"]["spec"]["holderIdentity"]


def test_first_takes_the_lease_second_stands_by_until_it_expires(store):
    clock = Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew() and holder(store) == "a"
    assert not b.try_acquire_or_renew()
    clock.now += 5
    assert a.try_acquire_or_renew()  # renewal
    assert not b.try_acquire_or_renew()  # b sees the renewal (it checks every retry period)
    clock.now += 14
    assert not b.try_acquire_or_renew()  # b saw the renewal 14 s ago: still valid
    clock.now += 2
    assert b.try_acquire_or_renew() and holder(store) == "b"  # a stopped renewing (died)
    spec = store.leases["kai-scheduler"]["spec"]
    assert spec["leaseTransitions"] == 1 and spec["leaseDurationSeconds"] == 15
    assert not a.try_acquire_or_renew()  # the old leader cannot renew someone else's lease


def test_expiry_uses_the_local_observation_not_the_remote_timestamp(store):
    clock = Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew()
    store.leases["kai-scheduler"]["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"  # skewed writer
    b = elector(store, "b", clock)
    assert not b.try_acquire_or_renew()  # first sight of the lease starts b's own 15 s


def test_racing_standbys_only_one_wins(store):
    clock = Clock()
    a, b, c = (elector(store, n, clock) for n in "abc")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.now += 16
    original = store.handle
    reads = []

    def interleaved(method, path, body=None, query=None):  # both read before either writes
        if method == "GET" and len(reads) < 1:
            reads.append(1)
            c_result.append(c.try_acquire_or_renew())
        return original(method, path, body, query)

    c_result: list[bool] = []
    store.handle = interleaved
    b_result = b.try_acquire_or_renew()
    assert c_result == [True] and b_result is False and holder(store) == "c"


def test_release_lets_a_standby_take_over_at_once(store):
    clock = Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert holder(store) == ""
    assert b.try_acquire_or_renew() and holder(store) == "b"


def test_timings_must_be_ordered(store):
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElector(FakeKube(store), "x", "kai", "a", lease_duration=10, renew_deadline=10, retry_period=2)


def test_run_leads_until_stopped_then_releases(store):
    stop = threading.Event()
    a = LeaderElector(FakeKube(store), "kai-scheduler", "kai", "a", lease_duration=3, renew_deadline=2,
                      retry_period=0.05)
    states = []

    def lead(over):
        states.append(a.state)
        stop.set()
        assert over.wait(5)

    assert a.run(stop, lead) is True
    assert states == ["leading"] and holder(store) == "" and a.state == "standing by"


def test_run_ends_leading_when_renewal_fails_past_the_deadline(store):
    stop = threading.Event()
    a = LeaderElector(FakeKube(store), "kai-scheduler", "kai", "a", lease_duration=0.6, renew_deadline=0.3,
                      retry_period=0.05)

    def lead(over):
        store.fail = True  # the API server becomes unreachable
        assert over.wait(5)

    assert a.run(stop, lead) is False
    assert a.lost and a.state == "lost"


def _lead_until_over(leads: threading.Event):
    def lead(over):
        leads.set()
        over.wait()

    return lead


def _campaign(elector_, stop, leads) -> threading.Thread:
    thread = threading.Thread(target=elector_.run, args=(stop, _lead_until_over(leads)), daemon=True)
    thread.start()
    return thread


def test_a_watching_standby_takes_over_as_soon_as_the_leader_releases(store):
    timings = dict(lease_duration=60, renew_deadline=45, retry_period=30)  # polling alone would take 30 s
    a = LeaderElector(FakeKube(store), "kai-scheduler", "kai", "a", **timings)
    b = LeaderElector(FakeKube(store), "kai-scheduler", "kai", "b", **timings)
    stop_a, stop_b, a_leads, b_leads = (threading.Event() for _ in range(4))
    threads = [_campaign(a, stop_a, a_leads)]
    assert a_leads.wait(5)
    threads.append(_campaign(b, stop_b, b_leads))
    wait_until(lambda: b._observed is not None, 5, "b reading the lease", interval=0.01)  # then it waits
    assert b._observed is not None and not b_leads.is_set()
    released = time.monotonic()
    stop_a.set()
    assert b_leads.wait(10), "the standby did not take over"
    took = time.monotonic() - released
    assert took < timings["retry_period"] / 3, f"took {took:.1f}s"
    assert holder(store) == "b" and store.leases["kai-scheduler"]["spec"]["leaseTransitions"] == 1
    stop_b.set()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()
    assert holder(store) == ""


def test_without_the_watch_a_standby_still_takes_over_by_reading_every_retry_period(store):
    store.forbid_watch = True  # no RBAC for watch: the watch fails, the periodic read remains
    timings = dict(lease_duration=3, renew_deadline=2, retry_period=0.2)
    a = LeaderElector(FakeKube(store), "kai-scheduler", "kai", "a", **timings)
    b = LeaderElector(FakeKube(store), "kai-scheduler", "kai", "b", **timings)
    stop_a, stop_b, a_leads, b_leads = (threading.Event() for _ in range(4))
    threads = [_campaign(a, stop_a, a_leads)]
    assert a_leads.wait(5)
    threads.append(_campaign(b, stop_b, b_leads))
    stop_a.set()
    assert b_leads.wait(10) and holder(store) == "b"
    stop_b.set()
    for thread in threads:
        thread.join(5)


def test_renewals_seen_by_the_watch_restart_the_standby_s_expiry_clock(store):
    clock = Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b reads the lease at 1000
    clock.now += 10
    assert a.try_acquire_or_renew()
    b._on_watch("MODIFIED", copy.deepcopy(store.leases["kai-scheduler"]))  # b sees the renewal at 1010
    clock.now += 6  # 16 s after b's read, 6 s after the renewal it saw
    assert not b.try_acquire_or_renew() and holder(store) == "a"
    clock.now += 9
    assert b.try_acquire_or_renew() and holder(store) == "b"


def test_a_standby_waits_until_the_lease_it_saw_expires_not_until_its_next_read(store):
    class Ticking(Clock):
        def __call__(self) -> float:
            self.now += 0.25
            return self.now

    clock = Ticking()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    expiry = b._observed_at + 15
    clock.now = expiry - 1
    b._wait_for_chance(threading.Event(), attempted=expiry - 3)  # the next read is due at expiry + 2
    assert expiry <= clock.now < expiry + 1
    assert b.try_acquire_or_renew() and holder(store) == "b"


def _returns(fn, *args, timeout: float = 5.0) -> bool:
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


def test_a_release_or_deletion_seen_by_the_watch_ends_the_wait_at_once(store):
    clock = Clock()  # stands still: only a wake can end the wait
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    stop = threading.Event()
    b._on_watch("MODIFIED", copy.deepcopy(store.leases["kai-scheduler"]))  # a renewal does not wake
    assert not _returns(b._wait_for_chance, stop, clock.now, timeout=0.3)
    a.release()
    b._on_watch("MODIFIED", copy.deepcopy(store.leases["kai-scheduler"]))
    assert _returns(b._wait_for_chance, stop, clock.now)
    assert b.try_acquire_or_renew() and holder(store) == "b"
    b._freed.clear()
    store.delete("kai-scheduler")
    b._on_watch("DELETED", {"metadata": {"name": "kai-scheduler"}})
    assert _returns(b._wait_for_chance, stop, clock.now)
    stop.set()  # ends the first wait's thread
