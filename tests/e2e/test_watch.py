"""The informer against the real API server: list, watch, stop promptly."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from kai.kube.client import ApiError, Kube
from kai.kube.watch import Informer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def kube(control_plane):
    return Kube.connect(control_plane.kubeconfig)


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_informer_lists_watches_and_stops(kube):
    ns = f"watch-{uuid.uuid4().hex[:6]}"
    kube.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    path = f"/api/v1/namespaces/{ns}/configmaps"
    kube.post(path, {"metadata": {"name": "before"}, "data": {"v": "0"}})
    events, lock = [], threading.Lock()

    def on_event(kind, obj):
        if obj["metadata"]["name"] != "kube-root-ca.crt":  # published in every namespace by kube-controller-manager
            with lock:
                events.append((kind, obj["metadata"]["name"], obj.get("data", {}).get("v")))

    informer = Informer(kube, path, on_event=on_event, page_size=1, transform=lambda o: o).start()
    try:
        assert informer.wait_synced(20)
        kube.post(path, {"metadata": {"name": "after"}, "data": {"v": "1"}})
        kube.patch(f"{path}/after", {"data": {"v": "2"}})
        kube.delete(f"{path}/before")
        wait_for(lambda: len(events) >= 4)
        assert events == [
            ("ADDED", "before", "0"),
            ("ADDED", "after", "1"),
            ("MODIFIED", "after", "2"),
            ("DELETED", "before", "0"),
        ]
        assert informer.get(f"{ns}/after")["data"] == {"v": "2"}
        assert informer.get(f"{ns}/before") is None
    finally:
        started = time.monotonic()
        informer.stop()
        assert time.monotonic() - started < 2.0  # the open watch is cut, not waited out


def test_a_missing_resource_is_retried_until_it_exists(kube):
    with pytest.raises(ApiError) as err:
        kube.get("/apis/example.kai.test/v1/widgets")
    assert err.value.status == 404
    informer = Informer(kube, "/apis/example.kai.test/v1/widgets").start()
    try:
        assert not informer.wait_synced(0.5)
        assert informer._thread.is_alive()
    finally:
        informer.stop()
