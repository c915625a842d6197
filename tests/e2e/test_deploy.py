"""The Helm chart's manifests on a real API server: they apply, and each component's ServiceAccount
may do exactly what the component's declaration says (checked with SelfSubjectAccessReviews)."""

from __future__ import annotations

import re
import uuid

import pytest

from kai.kube.client import Kube, object_path
from kai.rbac import components
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

NAMESPACE = "kai-scheduler"


def allowed(kube: Kube, group: str, resource: str, verb: str, namespace: str = "") -> bool:
    resource, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": resource, "subresource": subresource, "verb": verb}
    if namespace:
        attributes["namespace"] = namespace
    review = kube.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                       {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                        "spec": {"resourceAttributes": attributes}})
    return review["status"].get("allowed", False)


def test_chart_objects_are_installed_as_rendered(kube, kai_chart, chart_object_path):
    kinds = set()
    for doc in kai_chart:
        if doc["kind"] in ("Deployment", "Service"):
            continue  # validated by a server-side dry run only: no controller manager runs them
        stored = kube.get(chart_object_path(doc, doc["metadata"]["name"]))
        for field in ("rules", "roleRef", "subjects", "value"):
            assert stored.get(field) == doc.get(field), (doc["kind"], doc["metadata"]["name"], field)
        kinds.add(doc["kind"])
    assert {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
            "Queue", "PriorityClass"} <= kinds


@pytest.mark.parametrize("component", sorted(components()))
def test_service_account_may_do_what_the_component_declares_and_no_more(component, component_kubeconfig):
    kube = Kube.connect(component_kubeconfig(component))
    for access in components()[component]:
        for verb in access.verbs:
            assert allowed(kube, access.group, access.resource, verb, "some-namespace"), (component, access, verb)
    assert allowed(kube, "coordination.k8s.io", "leases", "update", NAMESPACE)  # leader election, own namespace
    assert not allowed(kube, "coordination.k8s.io", "leases", "update", "default")
    assert not allowed(kube, "", "secrets", "get", "some-namespace")
    assert not allowed(kube, "", "nodes", "delete")
    if not any(a.resource == "pods/binding" for a in components()[component]):
        assert not allowed(kube, "", "pods/binding", "create", "some-namespace")  # only the binder binds


def test_podgrouper_groups_a_job_pod_under_its_service_account(kube, kai_run, component_kubeconfig):
    ns = f"e2e-pg-{uuid.uuid4().hex[:6]}"
    kube.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    process = kai_run(["--components=podgrouper"], component_kubeconfig("podgrouper"), name="podgrouper")
    job = kube.post(f"/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "schedulerName": "kai-scheduler",
                                       "containers": [{"name": "main", "image": "busybox"}]}}}})

    def group_of_the_job_controllers_pod() -> str | None:
        pods = kube.get(f"/api/v1/namespaces/{ns}/pods", {"labelSelector": "batch.kubernetes.io/job-name=train"})
        return next((p["metadata"].get("annotations", {}).get("pod-group-name") for p in pods["items"]), None)

    group = wait_until(group_of_the_job_controllers_pod, 30, "the Job controller's pod grouped",
                       detail=lambda: process.log()[-3000:])
    assert group == f"pg-train-{job['metadata']['uid']}"
    podgroup = kube.get(object_path("scheduling.run.ai", "v2alpha2", "podgroups", ns, group))
    assert podgroup["metadata"]["ownerReferences"][0]["name"] == "train"
    assert process.terminate() == 0
    log = process.log()  # a 403 status, not the digits inside a generated name or uid
    assert "forbidden" not in log.lower() and not re.search(r"\b403\b", log), log[-3000:]
