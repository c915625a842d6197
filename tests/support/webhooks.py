"""The chart's mutating pod webhook, served in the test process for one namespace (e2e tests of GPU sharing)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from kai.admission.webhook import MUTATE_PATH, AdmissionServer
from kai.kube.client import ApiError, Kube
from support import manifests as m
from support.waiting import wait_until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@contextmanager
def mutating_webhook(kube: Kube, namespace: str, cert_dir: Path) -> Iterator[AdmissionServer]:
    """deploy/admission-mutating-webhook.yaml calling an admission server of this process, limited to
    ``namespace``, once a dry-run pod shows it in force; removed afterwards."""
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(cert_dir))
    server.start()
    config = yaml.safe_load((DEPLOY / "admission-mutating-webhook.yaml").read_text())
    config["metadata"]["name"] = f"kai-admission-{namespace}"
    hook = config["webhooks"][0]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{MUTATE_PATH}", "caBundle": server.ca_bundle}
    hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    kube.post(WEBHOOKS, config)
    probe = m.pod(namespace, "probe", "probe", annotations={"gpu-fraction": "0.5"})
    try:
        wait_until(lambda: _mutated(kube, namespace, probe), 30, "the mutating webhook in force")
        yield server
    finally:
        kube.delete(f"{WEBHOOKS}/{config['metadata']['name']}")
        server.stop()


def _mutated(kube: Kube, namespace: str, pod: dict) -> bool:
    try:
        out = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", {"dryRun": "All"}, pod)
    except ApiError:
        return False
    return "runai/shared-gpu-configmap" in out["metadata"].get("annotations", {})
