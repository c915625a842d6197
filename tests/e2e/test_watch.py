"""The informer against the real API server: list, watch, stop promptly."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from kai.kube.client import ApiError, Kube
from kai.kube.watch import Informer
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def kube(control_plane):
    return Kube.connect(control_plane.kubeconfig)


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
        wait_until(lambda: len(events) >= 4, timeout=20, what="four events")
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


def test_a_resource_not_served_is_synced_empty_and_read_once_its_crd_is_installed(kube):
    group = f"e{uuid.uuid4().hex[:6]}.kai.test"
    path = f"/apis/{group}/v1/widgets"
    with pytest.raises(ApiError) as err:
        kube.get(path)
    assert err.value.status == 404
    informer = Informer(kube, path).start()
    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}"
    try:
        assert informer.wait_synced(5) and len(informer) == 0  # nothing exists: listed, empty
        kube.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
            "metadata": {"name": f"widgets.{group}"},
            "spec": {"group": group, "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
        wait_until(lambda: any(c["type"] == "Established" and c["status"] == "True"
                               for c in (kube.get(crd).get("status") or {}).get("conditions") or ()),
                   timeout=20, what="the CRD established")
        kube.post(path, {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}})
        wait_until(lambda: informer.get("w1") is not None, timeout=30, what="w1 in the informer")
    finally:
        informer.stop()
        kube.delete(crd)
