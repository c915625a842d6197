"""Lease-based leader election against an in-memory Lease with the API server's write rules.

Two processes with real timing are exercised in tests/e2e/test_run.py.
"""

from __future__ import annotations

import copy
import threading

import pytest

from kai.kube import leader as leader_mod
from kai.kube.client import ApiError
from kai.kube.leader import LeaderElector


class LeaseStore:
    """One namespace's Leases: create (409 if present), get, and PUT with resourceVersion checks."""

    def __init__(self) -> None:
        self.leases: dict[str, dict] = {}
        self.version = 0
        self.fail = False

    def handle(self, method, path, body=None):
        if self.fail:
            raise ApiError(method, path, 0, "connection refused")
        name = path.rsplit("/", 1)[1]
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
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[name] = stored
        return copy.deepcopy(stored)


class FakeKube:
    timeout = 30.0

    def __init__(self, store: LeaseStore) -> None:
        self.api_client = store

    def get(self, path, query=None):
        return self.api_client.handle("GET", path)

    def post(self, path, body):
        return self.api_client.handle("POST", path, body)

    def request(self, method, path, query=None, body=None, **kw):
        return self.api_client.handle(method, path, body)


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

    def interleaved(method, path, body=None):  # both read before either writes
        if method == "GET" and len(reads) < 1:
            reads.append(1)
            c_result.append(c.try_acquire_or_renew())
        return original(method, path, body)

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
