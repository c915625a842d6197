"""Every request a Kube client sends is counted by verb and resource in ``kai_api_requests_total``."""

from __future__ import annotations

import pytest
from kubernetes import client

from kai.kube.client import ApiError, Kube, api_resource
from kai.kube.ratelimit import ThrottledKube, TokenBucket
from kai.metrics import Registry, count_api_requests


def unreachable_kube() -> Kube:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:1"  # nothing listens: every request fails to connect
    return Kube(client.ApiClient(configuration), timeout=1.0)


def test_each_request_is_counted_by_verb_and_resource_even_when_it_fails():
    registry = Registry()
    kube = unreachable_kube()
    count_api_requests(registry, kube)
    for call in (lambda: kube.get("/api/v1/pods"), lambda: kube.get("/api/v1/nodes"),
                 lambda: kube.get("/api/v1/pods", {"limit": 500}),
                 lambda: kube.patch("/api/v1/namespaces/ns/pods/p", {"metadata": {}}),
                 lambda: kube.post("/api/v1/namespaces/ns/pods/p/binding", {})):
        with pytest.raises(ApiError):
            call()
    assert registry.value("kai_api_requests_total", {"verb": "GET", "resource": "pods"}) == 2
    assert registry.value("kai_api_requests_total", {"verb": "GET", "resource": "nodes"}) == 1
    assert registry.value("kai_api_requests_total", {"verb": "PATCH", "resource": "pods"}) == 1
    assert registry.value("kai_api_requests_total", {"verb": "POST", "resource": "pods/binding"}) == 1
    assert registry.value("kai_api_requests_total", {"verb": "POST", "resource": "pods"}) is None


@pytest.mark.parametrize(("path", "resource"), [
    ("/api/v1/namespaces/ns/pods/p/status", "pods/status"),
    ("/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests/b/status", "bindrequests/status"),
    ("/apis/scheduling.run.ai/v2alpha2/podgroups?watch=1", "podgroups"),
    ("/api/v1/namespaces/ns", "namespaces"),
    ("/api/v1/nodes/n", "nodes"),
    ("/version", "/version"),
])
def test_the_resource_of_a_path(path, resource):
    assert api_resource(path) == resource


def test_a_client_without_a_counter_sends_as_before():
    kube = unreachable_kube()
    assert kube.on_request is None
    with pytest.raises(ApiError):
        kube.get("/api/v1/pods")


def test_a_components_throttled_client_counts_in_the_process_counter():
    registry = Registry()
    kube = unreachable_kube()
    count_api_requests(registry, kube)
    throttled = ThrottledKube(kube, TokenBucket(0, 0))
    with pytest.raises(ApiError):
        throttled.post("/api/v1/namespaces/ns/events", {})
    assert registry.value("kai_api_requests_total", {"verb": "POST", "resource": "events"}) == 1
