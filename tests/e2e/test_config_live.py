"""The admission webhook and the podgrouper take ``Config kai-config`` up live, as KAI's operator would by
restarting them: GPU sharing switched off and on in the admission section, the queue label key changed in
the global section, without a restart.

The admission component runs in this process behind the chart's webhook configurations (limited to the
module's namespace); the podgrouper runs as a ``kai-scheduler run`` process. The Config is deleted at the
end, so that other modules' components see none.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kai.admission.settings import policy_builder
from kai.admission.webhook import AdmissionServer
from kai.api import names
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.kaiconfig import KaiObjects
from support import manifests as m
from support.chart import render_chart
from support.cleanup import delete_if_present
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "chart" / "kai-scheduler"
CONFIG = object_path(*names.CONFIGS, name=names.KAI_CONFIG_NAME)
CONFIGURATIONS = {kind: f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s"
                  for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")}
SHARING_OFF = "with gpu sharing request, while GPU sharing is disabled"


def set_config(kube: Kube, spec: dict) -> None:
    """``Config kai-config`` with exactly ``spec``."""
    try:
        current = kube.get(CONFIG)
    except ApiError as exc:
        if exc.status != 404:
            raise
        kube.post(object_path(*names.CONFIGS), {"apiVersion": "kai.scheduler/v1", "kind": "Config",
                                                "metadata": {"name": names.KAI_CONFIG_NAME}, "spec": spec})
        return
    kube.request("PUT", CONFIG, body={**current, "spec": spec})


def delete_config(kube: Kube) -> None:
    delete_if_present(kube, CONFIG)


@pytest.fixture(scope="module")
def namespace(kube: Kube):
    name = f"cfglive-{uuid.uuid4().hex[:6]}"
    m.install(kube, DEPLOY)
    delete_config(kube)
    m.apply(kube, m.namespace(name))
    yield name
    delete_config(kube)
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})


@pytest.fixture(scope="module")
def webhook(kube: Kube, namespace: str, tmp_path_factory):
    """The admission component, its settings following the Config, serving the namespace's pods."""
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(tmp_path_factory.mktemp("certs")))
    server.settings = KaiObjects(kube, policy_builder(server.base_policy), server.base_policy,
                                 component="admission", shard=None)
    server.start()
    values = {"components": {"admission": {"enabled": True, "tls": {"caBundle": server.ca_bundle}}}}
    configs = [d for d in render_chart(CHART, values=values) if d["kind"] in CONFIGURATIONS]
    for config in configs:
        config["metadata"]["name"] = f"kai-admission-{namespace}"
        config["webhooks"] = [hook for hook in config["webhooks"] if "pod" in hook["clientConfig"]["service"]["path"]]
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{path}", "caBundle": server.ca_bundle}
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        kube.post(CONFIGURATIONS[config["kind"]], config)
    try:
        wait_until(lambda: "runai/shared-gpu-configmap" in admitted(kube, namespace, "0.5")["metadata"]["annotations"],
                   30, "the webhooks in force")
        yield server
    finally:
        for config in configs:
            kube.delete(f"{CONFIGURATIONS[config['kind']]}/{config['metadata']['name']}")
        server.stop()


def admitted(kube: Kube, namespace: str, fraction: str) -> dict:
    """A fractional pod as the API server would store it (dry run); ApiError when a webhook refuses it."""
    pod = m.pod(namespace, f"probe-{uuid.uuid4().hex[:6]}", annotations={"gpu-fraction": fraction})
    return kube.request("POST", object_path("", "v1", "pods", namespace), {"dryRun": "All"}, body=pod)


def refusal(kube: Kube, namespace: str) -> str | None:
    try:
        admitted(kube, namespace, "0.5")
    except ApiError as exc:
        if exc.status == 403:
            return str(exc)
        raise
    return None


def invalid_events(kube: Kube, needle: str) -> list[dict]:
    return [e for e in kube.get("/api/v1/namespaces/default/events")["items"]
            if e["reason"] == names.REASON_INVALID_CONFIGURATION and e["involvedObject"]["kind"] == "Config"
            and needle in e["message"]]


def test_admission_refuses_and_accepts_fractions_as_the_config_says_without_a_restart(kube, namespace, webhook):
    port = webhook.port
    set_config(kube, {"admission": {"gpuSharing": False}})
    message = wait_until(lambda: refusal(kube, namespace), 15, "fractional pods refused")
    assert SHARING_OFF in message and "attempting to create a pod" in message

    set_config(kube, {"admission": {"gpuSharing": True}})
    wait_until(lambda: refusal(kube, namespace) is None, 15, "fractional pods accepted again")

    # a runtime class that is no name: not applied, named in an event, sharing stays on
    set_config(kube, {"admission": {"gpuSharing": False, "gpuFractionRuntimeClassName": "Not_A_Name"}})
    (event,) = wait_until(lambda: invalid_events(kube, "Not_A_Name"), 15, "an InvalidConfiguration event")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == names.KAI_CONFIG_NAME
    assert "spec.admission.gpuFractionRuntimeClassName" in event["message"]
    assert refusal(kube, namespace) is None
    assert webhook.port == port and webhook.policy().gpu_sharing  # the same server, the last good settings


@pytest.fixture(scope="module")
def podgrouper(kube, control_plane, namespace, kai_run):
    process = kai_run(["--components", "podgrouper"], control_plane.kubeconfig, name="config-live")
    wait_until(lambda: process.get("/readyz")[0] == 200, 30, "the podgrouper ready")
    yield process
    assert process.proc.poll() is None, process.log()[-3000:]  # never restarted, never stopped
    assert process.terminate() == 0, process.log()[-3000:]


def queue_of(kube: Kube, namespace: str, pod: str) -> str | None:
    """The queue of ``pod``'s PodGroup, once the podgrouper made it."""
    current = kube.get(object_path("", "v1", "pods", namespace, pod))
    group = (current["metadata"].get("annotations") or {}).get(names.POD_GROUP_ANNOTATION)
    return kube.get(object_path(*names.PODGROUPS, namespace, group))["spec"].get("queue") if group else None


def test_the_podgrouper_reads_the_queue_from_the_label_the_config_names(kube, namespace, podgrouper):
    labels = {"kai.scheduler/queue": "default-queue", "team.example/queue": "team-queue"}
    applied = podgrouper.log().count("podgrouper configuration applied")
    set_config(kube, {"global": {"queueLabelKey": "team.example/queue"}})
    wait_until(lambda: podgrouper.log().count("podgrouper configuration applied") > applied, 15,
               "the podgrouper's new settings")
    m.apply(kube, m.pod(namespace, "first", labels=labels))
    assert wait_until(lambda: queue_of(kube, namespace, "first"), 30, "the first pod grouped") == "team-queue"

    applied = podgrouper.log().count("podgrouper configuration applied")
    set_config(kube, {"global": {}})
    wait_until(lambda: podgrouper.log().count("podgrouper configuration applied") > applied, 15,
               "the podgrouper's flags again")
    m.apply(kube, m.pod(namespace, "second", labels=labels))
    assert wait_until(lambda: queue_of(kube, namespace, "second"), 30, "the second pod grouped") == "default-queue"


def conditions_of_current_generation(kube: Kube) -> dict[str, dict] | None:
    """The Config's status conditions by type, once all of them observed its current generation."""
    config = kube.get(CONFIG)
    found = (config.get("status") or {}).get("conditions") or []
    if not found or any(c["observedGeneration"] != config["metadata"]["generation"] for c in found):
        return None
    return {c["type"]: c for c in found}


def test_the_config_s_conditions_follow_each_patch_as_kai_s_suites_wait_for_them(kube, namespace, podgrouper):
    # the podgrouper is the process's only component taking the Config up: it reports the conditions
    for patch in ({"podGrouper": {"args": {"genericKartaFallback": False}}},
                  {"podGrouper": {"args": {"genericKartaFallback": True}}}):
        kube.patch(CONFIG, {"spec": patch})  # a merge patch, as KAI's suites make
        found = wait_until(lambda: conditions_of_current_generation(kube), 15, "conditions of the new generation")
        assert {t: c["status"] for t, c in found.items()} == {
            "Deployed": "True", "Available": "True", "DependenciesFulfilled": "True", "Ready": "True",
            "Reconciling": "False"}
        assert found["Deployed"]["reason"] == "deployed" and found["Deployed"]["message"] == "Resources deployed"

    kube.patch(CONFIG, {"spec": {"global": {"queueLabelKey": " "}}})
    found = wait_until(lambda: conditions_of_current_generation(kube), 15, "conditions of the malformed generation")
    assert found["Deployed"]["status"] == "False" and "spec.global.queueLabelKey" in found["Deployed"]["message"]
    assert found["Available"]["status"] == "True"  # the previous settings stay in force
    kube.patch(CONFIG, {"spec": {"global": {"queueLabelKey": None}}})
    found = wait_until(lambda: conditions_of_current_generation(kube), 15, "conditions of the repaired generation")
    assert found["Deployed"]["status"] == "True"
