"""The admission component without certificate files (the chart's ``tls.mode: selfManaged``), as a
``kai-scheduler run`` process under the chart's ServiceAccount and RBAC: it makes its certificate into a Secret,
sets the CA as the caBundle of the chart's webhook configurations, and the API server then admits pods
through it. A second start reuses the Secret; a caBundle dropped (by a ``helm upgrade``) is set again.

The configurations are the chart's, with url clientConfigs to the process and limited to the test's
namespace (and, cluster-scoped, to objects with its label), so other tests are not affected.
"""

from __future__ import annotations

import base64
import socket
import uuid
from pathlib import Path

import pytest

from kai.kube.client import ApiError, Kube, object_path
from support.chart import render_chart
from support.cleanup import delete_if_present
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

NAMESPACE = "kai-scheduler"
CONFIGURATIONS = {kind: f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s"
                  for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")}
RBAC = {"Role": object_path("rbac.authorization.k8s.io", "v1", "roles", NAMESPACE),
        "RoleBinding": object_path("rbac.authorization.k8s.io", "v1", "rolebindings", NAMESPACE),
        "ClusterRole": object_path("rbac.authorization.k8s.io", "v1", "clusterroles"),
        "ClusterRoleBinding": object_path("rbac.authorization.k8s.io", "v1", "clusterrolebindings")}
CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "kai-scheduler"
LABEL = "kai-admission-certificates-test"
CLUSTER_SCOPED = ("queue-validation.kai.scheduler", "topology-validation.kai.scheduler")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def setup(kube: Kube, kai_chart, kai_crds):
    """The test namespace, the chart's certificate RBAC and webhook configurations (no caBundle) pointing at
    a free port; yields (namespace, port, secret name)."""
    namespace = f"admission-certs-{uuid.uuid4().hex[:8]}"
    secret = f"kai-admission-tls-{uuid.uuid4().hex[:6]}"
    kube.post("/api/v1/namespaces", {"metadata": {"name": namespace, "labels": {LABEL: namespace}}})
    port = free_port()
    values = {"components": {"admission": {"enabled": True, "gpuFractionRuntimeClassName": "",
                                           "tls": {"secretName": secret}}}}
    docs = render_chart(CHART, values=values, namespace=NAMESPACE)
    rbac = [d for d in docs if d["metadata"]["name"] == "kai-admission-certificate"]
    assert sorted(d["kind"] for d in rbac) == sorted(RBAC)
    configs = [d for d in docs if d["kind"] in CONFIGURATIONS]
    for config in configs:
        for hook in config["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}"}
            if hook["name"] in CLUSTER_SCOPED:
                hook["objectSelector"] = {"matchLabels": {LABEL: namespace}}
            else:
                hook["namespaceSelector"] = {"matchLabels": {LABEL: namespace}}
    for doc in rbac:
        kube.post(RBAC[doc["kind"]], doc)
    for config in configs:
        kube.post(CONFIGURATIONS[config["kind"]], config)
    try:
        yield namespace, port, secret
    finally:
        for config in configs:
            delete_if_present(kube, f"{CONFIGURATIONS[config['kind']]}/{config['metadata']['name']}")
        for doc in rbac:
            delete_if_present(kube, f"{RBAC[doc['kind']]}/{doc['metadata']['name']}")
        delete_if_present(kube, object_path("", "v1", "secrets", NAMESPACE, secret))
        delete_if_present(kube, f"/api/v1/namespaces/{namespace}")


def bundles(kube: Kube) -> list[str | None]:
    return [hook["clientConfig"].get("caBundle") for path in CONFIGURATIONS.values()
            for hook in kube.get(f"{path}/kai-admission")["webhooks"]]


def start(kai_run, component_kubeconfig, port: int, secret: str, name: str):
    return kai_run(["--components", "admission", "--namespace", NAMESPACE, "--kai-config", "",
                    f"--webhook-addr=127.0.0.1:{port}", "--webhook-host=127.0.0.1",
                    f"--webhook-cert-secret={secret}", "--webhook-configuration=kai-admission",
                    "--gpu-fraction-runtime-class-name=", "--block-nvidia-visible-devices"],
                   component_kubeconfig("admission"), name=name)


def pod(kube: Kube, namespace: str, annotations: dict, dry_run: bool = True) -> dict:
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "p-", "namespace": namespace, "annotations": annotations},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]}}
    return kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", {"dryRun": "All"} if dry_run else None, body)


def refused(kube: Kube, namespace: str) -> bool:
    try:
        pod(kube, namespace, {"gpu-fraction": "2"})
    except ApiError as exc:
        if exc.status == 403 and "denied the request" in str(exc):
            return True
        raise
    return False


def test_the_component_makes_its_certificate_and_sets_the_ca_bundle(kube, setup, kai_run, component_kubeconfig):
    namespace, port, secret = setup
    first = start(kai_run, component_kubeconfig, port, secret, "admission-certs")
    try:
        wait_until(lambda: all(bundles(kube)), 60, "the caBundle set by the component", detail=first.log)
        stored = kube.get(object_path("", "v1", "secrets", NAMESPACE, secret))
        assert stored["type"] == "kubernetes.io/tls" and {"tls.crt", "tls.key", "ca.crt"} <= stored["data"].keys()
        assert set(bundles(kube)) == {stored["data"]["ca.crt"]}
        assert b"BEGIN CERTIFICATE" in base64.b64decode(stored["data"]["ca.crt"])
        wait_until(lambda: refused(kube, namespace), 30, "a bad pod refused through the webhook", detail=first.log)
        admitted = pod(kube, namespace, {}, dry_run=False)  # admitted, and prepared by the mutating webhook
        assert admitted["spec"]["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
        assert first.terminate() == 0
    finally:
        if first.proc.poll() is None:
            first.kill()

    # a restart (another replica) serves the stored certificate, and sets a dropped caBundle again
    for path in CONFIGURATIONS.values():
        config = kube.get(f"{path}/kai-admission")
        for hook in config["webhooks"]:
            hook["clientConfig"].pop("caBundle", None)
        kube.request("PUT", f"{path}/kai-admission", body=config)
    second = start(kai_run, component_kubeconfig, port, secret, "admission-certs-again")
    try:
        wait_until(lambda: all(bundles(kube)), 60, "the caBundle set again", detail=second.log)
        again = kube.get(object_path("", "v1", "secrets", NAMESPACE, secret))
        assert again["data"] == stored["data"] and set(bundles(kube)) == {stored["data"]["ca.crt"]}
        wait_until(lambda: refused(kube, namespace), 30, "a bad pod refused through the webhook", detail=second.log)
    finally:
        second.terminate()
