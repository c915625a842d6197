"""Lease-based leader election against an in-memory Lease with the API server's write rules and watch.

Two processes with real timing are exercised in tests/e2e/test_leader.py.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest

from kai.kube import leader as leader_mod
from kai.kube.leader import LeaderElector
from support.kube import FakeApi
from support.waiting import wait_until

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kai/leases/kai-scheduler"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kube(monkeypatch):
    kube = FakeApi()
    monkeypatch.setattr(leader_mod, "Kube", lambda api_client, timeout: kube)  # the elector's own client
    return kube


def elector(kube, identity, clock, **kw):
    return LeaderElector(kube, "kai-scheduler", "kai", identity, clock=clock, wall=clock,
                         lease_duration=15, renew_deadline=10, retry_period=5, **kw)


def lease(kube):
    return kube.objects[LEASE]


def holder(kube):
    return lease(kube)["spec"]["holderIdentity"]


def test_first_takes_the_lease_second_stands_by_until_it_expires(kube):
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and holder(kube) == "a"
    assert not b.try_acquire_or_renew()
    clock.now += 5
    assert a.try_acquire_or_renew()  # renewal
    assert not b.try_acquire_or_renew()  # b sees the renewal (it checks every retry period)
    clock.now += 14
    assert not b.try_acquire_or_renew()  # b saw the renewal 14 s ago: still valid
    clock.now += 2
    assert b.try_acquire_or_renew() and holder(kube) == "b"  # a stopped renewing (died)
    spec = lease(kube)["spec"]
    assert spec["leaseTransitions"] == 1 and spec["leaseDurationSeconds"] == 15
    assert not a.try_acquire_or_renew()  # the old leader cannot renew someone else's lease


def test_expiry_uses_the_local_observation_not_the_remote_timestamp(kube):
    clock = Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    lease(kube)["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"  # skewed writer
    b = elector(kube, "b", clock)
    assert not b.try_acquire_or_renew()  # first sight of the lease starts b's own 15 s


def test_racing_standbys_only_one_wins(kube):
    clock = Clock()
    a, b, c = (elector(kube, n, clock) for n in "abc")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.now += 16
    original = kube.request
    reads = []

    def interleaved(method, path, *args, **kwargs):  # both read before either writes
        if method == "GET" and len(reads) < 1:
            reads.append(1)
            c_result.append(c.try_acquire_or_renew())
        return original(method, path, *args, **kwargs)

    c_result: list[bool] = []
    kube.request = interleaved
    b_result = b.try_acquire_or_renew()
    assert c_result == [True] and b_result is False and holder(kube) == "c"


def test_release_lets_a_standby_take_over_at_once(kube):
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert holder(kube) == ""
    assert b.try_acquire_or_renew() and holder(kube) == "b"


def test_timings_must_be_ordered(kube):
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElector(kube, "x", "kai", "a", lease_duration=10, renew_deadline=10, retry_period=2)


def test_run_leads_until_stopped_then_releases(kube):
    stop = threading.Event()
    a = LeaderElector(kube, "kai-scheduler", "kai", "a", lease_duration=3, renew_deadline=2,
                      retry_period=0.05)
    states = []

    def lead(over):
        states.append(a.state)
        stop.set()
        assert over.wait(5)

    assert a.run(stop, lead) is True
    assert states == ["leading"] and holder(kube) == "" and a.state == "standing by"


def test_run_ends_leading_when_renewal_fails_past_the_deadline(kube):
    stop = threading.Event()
    a = LeaderElector(kube, "kai-scheduler", "kai", "a", lease_duration=0.6, renew_deadline=0.3,
                      retry_period=0.05)

    def lead(over):
        kube.fail(0, "connection refused", times=None)  # the API server becomes unreachable
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


def test_a_watching_standby_takes_over_as_soon_as_the_leader_releases(kube):
    timings = dict(lease_duration=60, renew_deadline=45, retry_period=30)  # polling alone would take 30 s
    a = LeaderElector(kube, "kai-scheduler", "kai", "a", **timings)
    b = LeaderElector(kube, "kai-scheduler", "kai", "b", **timings)
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
    assert holder(kube) == "b" and lease(kube)["spec"]["leaseTransitions"] == 1
    stop_b.set()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()
    assert holder(kube) == ""


def test_without_the_watch_a_standby_still_takes_over_by_reading_every_retry_period(kube):
    kube.fail(403, "Forbidden", "WATCH", times=None)  # no RBAC for watch: the periodic read remains
    timings = dict(lease_duration=3, renew_deadline=2, retry_period=0.2)
    a = LeaderElector(kube, "kai-scheduler", "kai", "a", **timings)
    b = LeaderElector(kube, "kai-scheduler", "kai", "b", **timings)
    stop_a, stop_b, a_leads, b_leads = (threading.Event() for _ in range(4))
    threads = [_campaign(a, stop_a, a_leads)]
    assert a_leads.wait(5)
    threads.append(_campaign(b, stop_b, b_leads))
    stop_a.set()
    assert b_leads.wait(10) and holder(kube) == "b"
    stop_b.set()
    for thread in threads:
        thread.join(5)


def test_renewals_seen_by_the_watch_restart_the_standby_s_expiry_clock(kube):
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b reads the lease at 1000
    clock.now += 10
    assert a.try_acquire_or_renew()
    b._on_watch("MODIFIED", copy.deepcopy(lease(kube)))  # b sees the renewal at 1010
    clock.now += 6  # 16 s after b's read, 6 s after the renewal it saw
    assert not b.try_acquire_or_renew() and holder(kube) == "a"
    clock.now += 9
    assert b.try_acquire_or_renew() and holder(kube) == "b"


def test_a_standby_waits_until_the_lease_it_saw_expires_not_until_its_next_read(kube):
    class Ticking(Clock):
        def __call__(self) -> float:
            self.now += 0.25
            return self.now

    clock = Ticking()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    expiry = b._observed_at + 15
    clock.now = expiry - 1
    b._wait_for_chance(threading.Event(), attempted=expiry - 3)  # the next read is due at expiry + 2
    assert expiry <= clock.now < expiry + 1
    assert b.try_acquire_or_renew() and holder(kube) == "b"


def _returns(fn, *args, timeout: float = 5.0) -> bool:
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


def test_a_release_or_deletion_seen_by_the_watch_ends_the_wait_at_once(kube):
    clock = Clock()  # stands still: only a wake can end the wait
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    stop = threading.Event()
    b._on_watch("MODIFIED", copy.deepcopy(lease(kube)))  # a renewal does not wake
    assert not _returns(b._wait_for_chance, stop, clock.now, timeout=0.3)
    a.release()
    b._on_watch("MODIFIED", copy.deepcopy(lease(kube)))
    assert _returns(b._wait_for_chance, stop, clock.now)
    assert b.try_acquire_or_renew() and holder(kube) == "b"
    b._freed.clear()
    kube.delete(LEASE)
    b._on_watch("DELETED", {"metadata": {"name": "kai-scheduler"}})
    assert _returns(b._wait_for_chance, stop, clock.now)
    stop.set()  # ends the first wait's thread
