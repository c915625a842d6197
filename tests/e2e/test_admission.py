"""The admission webhook registered with the real API server: bad GPU-sharing pods are refused with their reason.

The webhook configuration is the chart's, with a url clientConfig pointing at the admission
component running in this process, and a namespace selector limiting it to the test's namespace,
so that other tests of the session are not affected.
"""

from __future__ import annotations

import copy
import time
import uuid
from pathlib import Path

import pytest

from kai.admission.webhook import VALIDATE_PATH, AdmissionServer
from kai.kube.client import ApiError, Kube, object_path
from support.chart import render_chart

pytestmark = pytest.mark.e2e

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "kai-scheduler"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@pytest.fixture(scope="module")
def namespace(kube: Kube):
    name = f"admission-{uuid.uuid4().hex[:8]}"
    kube.post("/api/v1/namespaces", {"metadata": {"name": name, "labels": {"kai-admission-test": name}}})
    return name


@pytest.fixture(scope="module")
def webhook(kube: Kube, namespace: str, tmp_path_factory):
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(tmp_path_factory.mktemp("certs")))
    server.start()
    values = {"components": {"admission": {"enabled": True, "tls": {"caBundle": server.ca_bundle}}}}
    (config,) = [d for d in render_chart(CHART, values=values) if d["kind"] == "ValidatingWebhookConfiguration"]
    config["metadata"]["name"] = f"kai-admission-{namespace}"
    hook = config["webhooks"][0]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{VALIDATE_PATH}", "caBundle": server.ca_bundle}
    hook["namespaceSelector"] = {"matchLabels": {"kai-admission-test": namespace}}
    kube.post(WEBHOOKS, config)
    try:
        wait_until_enforced(kube, namespace)
        yield server
    finally:
        kube.delete(f"{WEBHOOKS}/{config['metadata']['name']}")
        server.stop()


def wait_until_enforced(kube: Kube, namespace: str, timeout: float = 30.0) -> None:
    """The API server picks up a new webhook configuration shortly after it is created."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            create(kube, namespace, {"gpu-fraction": "2"}, dry_run=True)
        except ApiError as exc:
            if "gpu-fraction" in str(exc):
                return
            raise
        assert time.monotonic() < deadline, "the webhook was not called"
        time.sleep(0.2)


POD = {"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]}}


def create(kube: Kube, namespace: str, annotations: dict, gpu_limit: str | None = None,
           scheduler: str = "kai-scheduler", dry_run: bool = False) -> dict:
    pod = copy.deepcopy(POD)
    pod["metadata"] = {"name": f"p-{uuid.uuid4().hex[:6]}", "annotations": annotations}
    pod["spec"]["schedulerName"] = scheduler
    if gpu_limit is not None:
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": gpu_limit}}
    path = object_path("", "v1", "pods", namespace)
    return kube.request("POST", path, {"dryRun": "All"} if dry_run else None, body=pod)


@pytest.mark.parametrize(
    ("annotations", "gpu_limit", "field"),
    [
        ({"gpu-fraction": "1.5"}, None, "gpu-fraction"),
        ({"gpu-fraction": "0"}, None, "gpu-fraction"),
        ({"gpu-fraction": "half"}, None, "gpu-fraction"),
        ({"gpu-fraction": "0.5", "gpu-memory": "4096"}, None, "gpu-memory"),
        ({"gpu-fraction": "0.5"}, "1", "nvidia.com/gpu"),
        ({"gpu-fraction-num-devices": "2"}, None, "gpu-fraction-num-devices"),
    ],
    ids=["fraction-above-1", "fraction-zero", "fraction-not-a-number", "fraction-and-memory",
         "fraction-and-gpu-limit", "num-devices-without-fraction"],
)
def test_a_bad_gpu_sharing_request_is_refused_naming_the_field(kube, namespace, webhook, annotations, gpu_limit,
                                                                field):
    with pytest.raises(ApiError) as refused:
        create(kube, namespace, annotations, gpu_limit)
    message = str(refused.value)
    assert refused.value.status == 403
    assert 'admission webhook "pod-validation.kai.scheduler" denied the request' in message
    assert field in message
    assert not kube.get(object_path("", "v1", "pods", namespace)).get("items")


def test_a_good_fractional_pod_is_admitted(kube, namespace, webhook):
    pod = create(kube, namespace, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    kube.delete(object_path("", "v1", "pods", namespace, pod["metadata"]["name"]))


def test_pods_of_other_schedulers_are_not_judged(kube, namespace, webhook):
    pod = create(kube, namespace, {"gpu-fraction": "1.5"}, scheduler="default-scheduler")
    kube.delete(object_path("", "v1", "pods", namespace, pod["metadata"]["name"]))
