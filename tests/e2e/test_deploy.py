"""The Helm chart's manifests on a real API server: they apply, and each component's ServiceAccount
may do exactly what the component's declaration says (checked with SelfSubjectAccessReviews). KAI's
operator objects, which the chart and ``kai-scheduler run`` create, are deleted after each test of them."""

from __future__ import annotations

import re
import uuid

import pytest

from kai.api import names
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.operatorobjects import default_objects
from kai.rbac import components
from support.cleanup import delete_if_present
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

NAMESPACE = "kai-scheduler"
OPERATOR_OBJECTS = {"Config": object_path(*names.CONFIGS, name=names.KAI_CONFIG_NAME),
                    "SchedulingShard": object_path(*names.SCHEDULINGSHARDS, name=names.DEFAULT_SHARD)}


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
        if doc["kind"] in ("Deployment", "Service", "Job"):
            continue  # validated by a server-side dry run only: no controller manager runs them
        if doc["kind"] in OPERATOR_OBJECTS:
            continue  # installed by a test of their own
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


@pytest.fixture
def no_operator_objects(kube):
    """Neither of KAI's operator objects exists (as on a control plane with only the CRDs), before and after."""
    for path in OPERATOR_OBJECTS.values():
        delete_if_present(kube, path)
    yield
    for path in OPERATOR_OBJECTS.values():
        delete_if_present(kube, path)


def test_the_chart_s_operator_objects_install_as_rendered(kube, kai_chart, no_operator_objects):
    for doc in (d for d in kai_chart if d["kind"] in OPERATOR_OBJECTS):
        kube.post(OPERATOR_OBJECTS[doc["kind"]].rsplit("/", 1)[0], doc)
        stored = kube.get(OPERATOR_OBJECTS[doc["kind"]])
        assert stored["spec"] == doc["spec"], doc["kind"]  # nothing the CRD's schema drops or defaults
        assert stored["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_kai_scheduler_run_creates_kai_s_operator_objects_and_leaves_existing_ones(kube, kai_run, component_kubeconfig,
                                                                                    no_operator_objects):
    args = ["--components=queue-controller", "--create-default-objects"]  # under the chart's RBAC of a component
    first = kai_run(args, component_kubeconfig("queue-controller"), name="creates")
    wait_until(lambda: all(exists(kube, path) for path in OPERATOR_OBJECTS.values()), 30, "both objects created",
               detail=lambda: first.log()[-3000:])
    for made in default_objects(NAMESPACE):
        stored = kube.get(OPERATOR_OBJECTS[made["kind"]])
        assert stored["spec"] == made["spec"] and made["metadata"]["annotations"].items() <= \
            stored["metadata"]["annotations"].items()
    assert first.terminate() == 0

    # a customised shard is left as it is; a deleted Config is made again
    spread = {"placementStrategy": {"gpu": "spread", "cpu": "spread"}}
    kube.patch(OPERATOR_OBJECTS["SchedulingShard"], {"spec": spread})
    customised = kube.get(OPERATOR_OBJECTS["SchedulingShard"])
    kube.delete(OPERATOR_OBJECTS["Config"])
    second = kai_run(args, component_kubeconfig("queue-controller"), name="leaves")
    wait_until(lambda: exists(kube, OPERATOR_OBJECTS["Config"]), 30, "the Config created again",
               detail=lambda: second.log()[-3000:])
    wait_until(lambda: second.get("/readyz")[0] == 200, 30, "the process ready")
    assert kube.get(OPERATOR_OBJECTS["SchedulingShard"])["metadata"] == customised["metadata"]
    assert kube.get(OPERATOR_OBJECTS["SchedulingShard"])["spec"]["placementStrategy"] == spread["placementStrategy"]
    assert second.terminate() == 0
    log = first.log() + second.log()
    assert "forbidden" not in log.lower() and not re.search(r"\b403\b", log), log[-3000:]


def exists(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True
