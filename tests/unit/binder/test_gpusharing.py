"""GPU sharing in the binder against an in-memory API: reservation pods, device choice, ConfigMaps, clean-up.

The real control plane with kwok nodes and the real ``kai-scheduler run`` is exercised by
tests/e2e/test_gpu_sharing.py.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import re

import pytest

from kai.admission.webhook import mutation_review
from kai.binder.binder import Binder
from kai.binder.gpusharing import GpuSharing, configmap_names
from kai.binder.gpusharing import build as build_gpusharing
from kai.binder.reservation import (
    DEVICE_ANNOTATION,
    NAMESPACE,
    free_device,
    group_label,
    has_workload,
    pod_groups,
    reservation_pod,
    reservation_pod_name,
)
from kai.kube.client import ApiError
from kai.kube.sharedgpu import CONFIGMAP_ANNOTATION, configmap_data, configmap_prefix, mutate, mutation_patch
from support.kube import FakeApi

BR = "/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests/"


class FakeKube(FakeApi):
    """The in-memory API, whose node starts the reservation pods created in their namespace."""

    def __init__(self, on_reservation=None) -> None:
        super().__init__()
        self.on_reservation = on_reservation  # what the node does with a new reservation pod

    def serve(self, method, path, query, body, content_type):
        reply = super().serve(method, path, query, body, content_type)
        if method == "POST" and path == f"/api/v1/namespaces/{NAMESPACE}/pods" and self.on_reservation is not None:
            created = self.objects[f"{path}/{reply['metadata']['name']}"]
            self.on_reservation(created)
            reply = copy.deepcopy(created)
        return reply

    def pods(self, namespace: str) -> dict[str, dict]:
        prefix = f"/api/v1/namespaces/{namespace}/pods/"
        return {p[len(prefix):]: o for p, o in self.objects.items() if p.startswith(prefix)}


def run_it(pod: dict) -> None:
    """The node starts a reservation pod: Running (nothing reports its device, as on kwok)."""
    pod["status"] = {"phase": "Running"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def shared_pod(kube: FakeKube, name: str, fraction: str = "0.5", **annotations) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "annotations": {"gpu-fraction": fraction, **annotations}},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]},
           "status": {"phase": "Pending"}}
    return kube.add(f"/api/v1/namespaces/ns/pods/{name}", mutate(pod, random.Random(name)))


def setup(gpus: int = 2, **kw) -> tuple[FakeKube, Binder, Clock]:
    kube = FakeKube(run_it)
    kube.add("/api/v1/nodes/n1", {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}})
    clock = Clock()
    plugin = sharing(kube, fake_gpu_nodes=True, clock=clock, sleep=clock.sleep, **kw)
    return kube, stored(Binder(kube, plugins=[plugin]), kube), clock


def sharing(kube: FakeKube, cdi: bool = False, **reservation_options) -> GpuSharing:
    """The GPU-sharing plugin as the binder builds it: its reservation options, then the client."""
    plugin = GpuSharing(cdi=cdi, **reservation_options)
    plugin.setup(kube)
    return plugin


class Store:
    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def get(self, key, default=None):
        return copy.deepcopy(self.kube.objects.get(BR + key.split("/", 1)[1], default))


def stored(binder: Binder, kube: FakeKube) -> Binder:
    """``binder`` reading BindRequests from the fake API, as its informer would."""
    binder.stores = {"bindrequests": Store(kube), "nodes": {}}
    return binder


def bind_request(kube: FakeKube, pod: str, groups: list[str], portion: str = "0.50", backoff_limit: int = 3) -> str:
    kube.add(BR + pod, {"metadata": {"name": pod, "namespace": "ns"},
                        "spec": {"podName": pod, "selectedNode": "n1", "receivedResourceType": "Fraction",
                                 "selectedGPUGroups": groups, "receivedGPU": {"count": len(groups), "portion": portion},
                                 "backoffLimit": backoff_limit}})
    return f"ns/{pod}"


def configmap(kube: FakeKube, pod: str, which: int = 0) -> dict:
    name = configmap_names(kube.objects[f"/api/v1/namespaces/ns/pods/{pod}"])[which]
    return kube.objects[f"/api/v1/namespaces/ns/configmaps/{name}"]


def reservation_pods(kube: FakeKube) -> dict[str, dict]:
    return kube.pods(NAMESPACE)


# -- the pure parts ------------------------------------------------------------------------------

def test_free_device_is_the_lowest_index_nobody_holds():
    assert free_device([], 2) == "0"
    assert free_device(["0", "GPU-abc"], 2) == "1"
    assert free_device(["0", "1"], 2) is None


def test_group_labels_and_workload():
    assert group_label("g1", multi=False) == ("runai-gpu-group", "g1")
    assert group_label("g1", multi=True) == ("runai-gpu-group/g1", "g1")
    assert pod_groups({"runai-gpu-group/a": "a", "runai-gpu-group/b": "b", "x": "y"}) == ["a", "b"]
    ns_pod = {"metadata": {"namespace": "ns"}, "status": {"phase": "Succeeded"}}
    holder = {"metadata": {"namespace": NAMESPACE}, "status": {"phase": "Running"}}
    assert not has_workload([ns_pod, holder], NAMESPACE)
    assert has_workload([holder, {"metadata": {"namespace": "ns"}, "status": {"phase": "Pending"}}], NAMESPACE)


def test_reservation_pod_names_are_kais_per_node_and_group():
    # the values KAI v0.17's reservationPodName gives for these inputs
    assert reservation_pod_name("node-a", "g1") == "gpu-reservation-79a9de7e68ba7e9a"
    assert reservation_pod_name("gpu-node-17.example.com", "3f1c9a0e-5b7d-4c2e-9f11-0d6a2b8c7e45") == \
        "gpu-reservation-f49a16c2a42db4d6"
    names = {reservation_pod_name(node, group) for node in ("n1", "n2", "A" * 253) for group in ("g1", "g2")}
    assert len(names) == 6
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name) for name in names)
    assert reservation_pod_name("n1/g", "1") == reservation_pod_name("n1", "g/1")  # KAI's joining, kept as is


def test_reservation_pod_is_kais_shape():
    tolerations = [{"key": "hpc", "operator": "Equal", "value": "true", "effect": "NoExecute"}]
    pod = reservation_pod("node-a", "g1", service_account="sa", tolerations=tolerations)
    meta, container = pod["metadata"], pod["spec"]["containers"][0]
    assert meta["name"] == reservation_pod_name("node-a", "g1")
    assert meta["namespace"] == "kai-resource-reservation"
    assert meta["labels"] == {"app": "kai-resource-reservation", "runai-gpu-group": "g1"}
    assert meta["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert pod["spec"]["nodeName"] == "node-a" and pod["spec"]["serviceAccountName"] == "sa"
    assert pod["spec"]["tolerations"] == tolerations
    tolerations[0]["value"] = "changed"  # a copy: the workload pod's object is not shared
    assert pod["spec"]["tolerations"][0]["value"] == "true"
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    assert "args" not in container
    fake = reservation_pod("node-a", "g1", fake=True)
    assert (fake["spec"]["containers"][0]["image"], fake["spec"]["containers"][0]["args"]) == (
        "ubuntu", ["sleep", "infinity"])
    assert "tolerations" not in fake["spec"]


RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_reservation_pods_get_the_resources_and_security_contexts_given_but_always_one_gpu():
    sharing = build_gpusharing({"podResources": json.dumps({"requests": {"cpu": "10m", "nvidia.com/gpu": 4},
                                                            "limits": {"memory": "64Mi"}}),
                                "podSecurityContext": RESTRICTED_POD,
                                "containerSecurityContext": json.dumps(RESTRICTED_CONTAINER)})
    sharing.setup(None)
    reservations = sharing.reservations
    pod = reservation_pod("n", "g", pod_resources=reservations.pod_resources,
                          pod_security_context=reservations.pod_security_context,
                          container_security_context=reservations.container_security_context)
    container = pod["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "10m", "nvidia.com/gpu": "1"},
                                      "limits": {"memory": "64Mi", "nvidia.com/gpu": "1"}}
    assert container["securityContext"] == RESTRICTED_CONTAINER
    assert pod["spec"]["securityContext"] == RESTRICTED_POD


@pytest.mark.parametrize(("arguments", "message"), [
    ({"podResources": "{requests"}, "podResources: not JSON"),
    ({"podSecurityContext": "[1]"}, "podSecurityContext: expected a JSON object, not list"),
    ({"podResources": {"request": {}}}, "podResources: field 'request' is not known"),
    ({"podResources": {"limits": {"cpu": "lots"}}}, "podResources.limits.cpu: 'lots' is not a quantity"),
])
def test_malformed_reservation_pod_objects_are_refused_naming_the_argument(arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_gpusharing(arguments)


def test_admission_mutation_references_the_configmaps_the_binder_fills():
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {"gpu-fraction": "0.5"},
                        "ownerReferences": [{"name": "my-job"}]},
           "spec": {"containers": [{"name": "main", "env": [{"name": "GPU_PORTION", "value": "1"}]}],
                    "volumes": [{"name": "data", "emptyDir": {}}]}}
    out = mutate(pod, random.Random(0))
    prefix = out["metadata"]["annotations"][CONFIGMAP_ANNOTATION]
    assert re.fullmatch(r"my-job-[a-z0-9]{7}-shared-gpu", prefix)
    container = out["spec"]["containers"][0]
    assert {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in container["env"]} == {
        n: {"name": f"{prefix}-0", "key": n} for n in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")}
    assert container["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar", "optional": False}}]
    assert out["spec"]["volumes"][1] == {"name": f"{prefix}-0-vol", "configMap": {"name": f"{prefix}-0"}}
    assert configmap_names(out) == (f"{prefix}-0", f"{prefix}-0-evar")
    assert pod["spec"]["containers"][0].get("envFrom") is None  # the input is left alone
    assert mutate(out) == out  # reinvoked: nothing changes
    assert mutate({"metadata": {"annotations": {}}, "spec": {"containers": [{}]}}) is None


def test_admission_mutation_of_a_named_init_container_and_long_names():
    pod = {"metadata": {"name": "x" * 80, "annotations": {"gpu-memory": "1024",
                                                         "gpu-fraction-container-name": "prep"}},
           "spec": {"containers": [{"name": "main"}], "initContainers": [{"name": "a"}, {"name": "prep"}]}}
    out = mutate(pod)
    cap, evar = configmap_names(out)
    assert cap.endswith("-shared-gpu-i1") and evar == cap + "-evar"
    assert len(evar + "-vol") <= 63
    assert out["spec"]["initContainers"][1]["envFrom"][0]["configMapRef"]["name"] == evar
    assert "env" not in out["spec"]["containers"][0]
    pod["metadata"]["annotations"]["gpu-fraction-container-name"] = "nope"
    with pytest.raises(ValueError, match="'nope'"):
        mutate(pod)


def test_configmap_prefix_fits_a_volume_name_for_any_index():
    long = {"metadata": {"name": "y" * 200}}
    for tag in ("0", "i12"):
        assert len(f"{configmap_prefix(long, tag)}-{tag}-evar-vol") == 63


def test_mutating_review_returns_a_json_patch_for_kai_pods_only():
    pod = {"metadata": {"name": "p", "annotations": {"gpu-fraction": "0.5"}},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main"}]}}
    req = {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "ns", "name": "p", "object": pod}
    response = mutation_review(req)
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert [o["path"] for o in ops] == ["/metadata/annotations", "/spec/containers", "/spec/volumes"]
    assert mutation_review({**req, "object": {**pod, "spec": {**pod["spec"], "schedulerName": "other"}}}) == {
        "uid": "u", "allowed": True}
    assert mutation_review({**req, "operation": "UPDATE"}) == {"uid": "u", "allowed": True}
    bad = copy.deepcopy(pod)
    bad["metadata"]["annotations"]["gpu-fraction-container-name"] = "gone"
    refused = mutation_review({**req, "object": bad})
    assert not refused["allowed"] and "gone" in refused["status"]["message"]
    assert mutation_patch({"metadata": {}, "spec": {"containers": [{}]}}) == []


def test_configmap_data_follows_where_the_container_reads_visible_devices():
    pod = mutate({"metadata": {"name": "p", "annotations": {"gpu-fraction": "0.5"}}, "spec": {"containers": [{}]}})
    assert configmap_data(pod, ["0"], "0.50", {}) == (
        {"GPU_PORTION": "0.50", "RUNAI_NUM_OF_GPUS": "0.50", "NVIDIA_VISIBLE_DEVICES": "0"}, {})
    pod["spec"]["containers"][0]["env"] = []  # a pod prepared without the NVIDIA_VISIBLE_DEVICES reference
    cap, evar = configmap_data(pod, ["GPU-a", "GPU-b"], "0.25", {"RUNAI-VISIBLE-DEVICES": "old"})
    assert evar == {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"} and cap["RUNAI-VISIBLE-DEVICES"] == "GPU-a,GPU-b"


# -- the binder plugin ---------------------------------------------------------------------------

def test_two_halves_share_one_reservation_pod_and_device_a_third_pod_gets_the_next_device():
    kube, binder, _ = setup()
    for name in ("a", "b", "c"):
        shared_pod(kube, name, "0.6" if name == "c" else "0.5")
    binder.handle(bind_request(kube, "a", ["g1"]))
    binder.handle(bind_request(kube, "b", ["g1"]))
    binder.handle(bind_request(kube, "c", ["g2"], portion="0.60"))
    holders = reservation_pods(kube)
    assert sorted(h["metadata"]["labels"]["runai-gpu-group"] for h in holders.values()) == ["g1", "g2"]
    assert {h["metadata"]["labels"]["runai-gpu-group"]: h["metadata"]["annotations"][DEVICE_ANNOTATION]
            for h in holders.values()} == {"g1": "0", "g2": "1"}
    for name, device, portion, group in (("a", "0", "0.50", "g1"), ("b", "0", "0.50", "g1"), ("c", "1", "0.60", "g2")):
        pod = kube.objects[f"/api/v1/namespaces/ns/pods/{name}"]
        assert pod["spec"]["nodeName"] == "n1" and pod["metadata"]["labels"] == {"runai-gpu-group": group}
        assert configmap(kube, name)["data"] == {"NVIDIA_VISIBLE_DEVICES": device, "GPU_PORTION": portion,
                                                 "RUNAI_NUM_OF_GPUS": portion}
        assert configmap(kube, name)["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert configmap(kube, name, 1)["data"] == {}
        assert kube.objects[BR + name]["status"]["phase"] == "Succeeded"


def test_multi_device_pod_gets_one_label_per_group_and_all_devices():
    kube, binder, _ = setup(gpus=4)
    shared_pod(kube, "m", "0.5", **{"gpu-fraction-num-devices": "2"})
    binder.handle(bind_request(kube, "m", ["g1", "g2"]))
    pod = kube.objects["/api/v1/namespaces/ns/pods/m"]
    assert pod["metadata"]["labels"] == {"runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2"}
    assert configmap(kube, "m")["data"]["NVIDIA_VISIBLE_DEVICES"] == "0,1"


def test_the_device_the_reservation_image_reports_wins_and_cdi_names_it():
    kube, _, clock = setup()
    kube.on_reservation = lambda p: p["metadata"]["annotations"].update({DEVICE_ANNOTATION: "GPU-1234"})
    binder = stored(Binder(kube, plugins=[sharing(kube, cdi=True, clock=clock, sleep=clock.sleep)]), kube)
    shared_pod(kube, "a")
    binder.handle(bind_request(kube, "a", ["g1"]))
    assert configmap(kube, "a")["data"]["NVIDIA_VISIBLE_DEVICES"] == "k8s.device-plugin.nvidia.com/gpu=GPU-1234"


def test_no_device_reported_in_time_deletes_the_new_reservation_pod_and_fails_for_a_retry():
    kube, _, clock = setup()
    kube.on_reservation = None  # never Running, never annotated
    binder = stored(Binder(kube, plugins=[sharing(kube, timeout=40, clock=clock, sleep=clock.sleep)]), kube)
    shared_pod(kube, "a")
    assert binder.handle(bind_request(kube, "a", ["g1"])) == 1.0  # retried after 1s
    status = kube.objects[BR + "a"]["status"]
    assert status["phase"] == "Failed" and status["failedAttempts"] == 1
    assert "reported no device" in status["reason"] and "40s" in status["reason"]
    assert clock.now >= 40
    assert reservation_pods(kube) == {}
    pod = kube.objects["/api/v1/namespaces/ns/pods/a"]
    assert "nodeName" not in pod["spec"] and not pod["metadata"].get("labels")
    assert "/api/v1/namespaces/ns/configmaps/" + configmap_names(pod)[0] not in kube.objects


def test_a_failed_binding_rolls_back_labels_configmaps_and_the_unused_reservation_pod():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    kube.fail(500, "Internal Server Error", "POST", "/binding", times=None)
    binder.handle(bind_request(kube, "a", ["g1"]))
    pod = kube.objects["/api/v1/namespaces/ns/pods/a"]
    assert kube.objects[BR + "a"]["status"]["phase"] == "Failed"
    assert not pod["metadata"].get("labels") and reservation_pods(kube) == {}
    assert not [p for p in kube.objects if "/configmaps/" in p]
    # the retry binds it, once
    kube.faults.clear()
    binder._not_before.clear()
    binder.handle("ns/a")
    assert kube.objects[BR + "a"]["status"]["phase"] == "Succeeded" and len(reservation_pods(kube)) == 1


def test_a_failed_binding_keeps_a_reservation_pod_other_pods_use():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    shared_pod(kube, "b")
    binder.handle(bind_request(kube, "a", ["g1"]))
    kube.objects["/api/v1/namespaces/ns/pods/a"]["status"]["phase"] = "Running"
    kube.fail(500, "Internal Server Error", "POST", "/binding", times=None)
    binder.handle(bind_request(kube, "b", ["g1"]))
    assert len(reservation_pods(kube)) == 1 and kube.objects[BR + "b"]["status"]["phase"] == "Failed"


def test_a_pod_the_webhook_did_not_prepare_fails_with_a_clear_reason():
    kube, binder, _ = setup()
    pod = shared_pod(kube, "a")
    del pod["metadata"]["annotations"][CONFIGMAP_ANNOTATION]
    binder.handle(bind_request(kube, "a", ["g1"]))
    reason = kube.objects[BR + "a"]["status"]["reason"]
    assert "ns/a" in reason and CONFIGMAP_ANNOTATION in reason and "admission webhook" in reason
    assert reservation_pods(kube) == {} and "nodeName" not in pod["spec"]


def test_a_fraction_request_without_groups_is_invalid():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    binder.handle(bind_request(kube, "a", []))
    assert "selectedGPUGroups" in kube.objects[BR + "a"]["status"]["reason"]


def test_a_group_held_on_another_node_fails_the_bind():
    kube, binder, _ = setup()
    holder = reservation_pod("n2", "g1") | {"status": {"phase": "Running"}}
    kube.add(f"/api/v1/namespaces/{NAMESPACE}/pods/{holder['metadata']['name']}", holder)
    shared_pod(kube, "a")
    binder.handle(bind_request(kube, "a", ["g1"]))
    assert "held on node n2" in kube.objects[BR + "a"]["status"]["reason"]


def test_all_devices_held_fails_the_bind():
    kube, binder, _ = setup(gpus=1)
    shared_pod(kube, "a")
    shared_pod(kube, "b")
    binder.handle(bind_request(kube, "a", ["g1"]))
    binder.handle(bind_request(kube, "b", ["g2"]))
    assert "no GPU device left" in kube.objects[BR + "b"]["status"]["reason"]
    assert len(reservation_pods(kube)) == 1  # the second one was deleted again


def test_whole_gpu_requests_are_not_touched():
    kube, binder, _ = setup()
    kube.add("/api/v1/namespaces/ns/pods/w", {"metadata": {"name": "w", "namespace": "ns"}, "spec": {}})
    kube.add(BR + "w", {"metadata": {"name": "w", "namespace": "ns"},
                        "spec": {"podName": "w", "selectedNode": "n1", "receivedResourceType": "Regular"}})
    binder.handle("ns/w")
    assert kube.objects[BR + "w"]["status"]["phase"] == "Succeeded" and reservation_pods(kube) == {}


def test_sync_deletes_reservation_pods_once_their_group_has_no_pending_or_running_pod():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    shared_pod(kube, "b")
    binder.handle(bind_request(kube, "a", ["g1"]))
    binder.handle(bind_request(kube, "b", ["g2"]))
    kube.objects["/api/v1/namespaces/ns/pods/a"]["status"]["phase"] = "Running"
    kube.objects["/api/v1/namespaces/ns/pods/b"]["status"]["phase"] = "Succeeded"
    binder.sync_plugins({"other-node"})
    assert len(reservation_pods(kube)) == 2
    binder.on_event("DELETED", kube.objects[BR + "b"])  # its node is synced by the run loop
    assert binder._dirty_nodes == {"n1"}
    binder.sync_plugins(binder._dirty_nodes)
    assert [h["metadata"]["labels"]["runai-gpu-group"] for h in reservation_pods(kube).values()] == ["g1"]
    kube.delete("/api/v1/namespaces/ns/pods/a")
    binder.sync_plugins(None)
    assert reservation_pods(kube) == {}


def test_the_scheduler_counts_a_reservation_pods_cpu_but_not_its_gpu_or_pod_slot():
    from kai.scheduler.build import _add_usage
    from kai.scheduler.views import pod_view

    holder = reservation_pod("n1", "g1") | {"status": {"phase": "Running"}}
    holder["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    other = copy.deepcopy(holder)
    other["metadata"]["labels"] = {}
    used: dict = {}
    _add_usage(used, "n1", pod_view(holder), reservation=True)
    assert (used["n1"][0].cpu, used["n1"][0].gpu, used["n1"][1]) == (2000, 0, 0)
    _add_usage(used, "n1", pod_view(other))  # any other pod holding a GPU takes it and a slot
    assert (used["n1"][0].cpu, used["n1"][0].gpu, used["n1"][1]) == (4000, 1, 1)


def test_a_pod_deleted_during_the_attempt_still_frees_its_new_reservation_pod():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    deleted = {}

    def vanish(path, body):  # the pod is deleted just as it is being bound
        deleted.update(kube.objects.pop("/api/v1/namespaces/ns/pods/a"))
        raise ApiError("POST", path, 404, "Not Found")

    post = kube.post
    kube.post = lambda path, body: vanish(path, body) if path.endswith("/binding") else post(path, body)
    binder.handle(bind_request(kube, "a", ["g1"]))
    assert deleted and reservation_pods(kube) == {}


def test_the_reservation_pod_has_the_deterministic_name_and_the_workloads_tolerations():
    kube, binder, _ = setup()
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"},
                   {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    shared_pod(kube, "a")["spec"]["tolerations"] = tolerations
    binder.handle(bind_request(kube, "a", ["g1"]))
    assert kube.objects[BR + "a"]["status"]["phase"] == "Succeeded"
    (name, holder), = reservation_pods(kube).items()
    assert name == reservation_pod_name("n1", "g1")
    assert holder["spec"]["tolerations"] == tolerations


def test_a_restarted_binder_finds_the_groups_reservation_pod_and_creates_none():
    kube, binder, clock = setup()
    shared_pod(kube, "a")
    binder.handle(bind_request(kube, "a", ["g1"]))
    before = copy.deepcopy(reservation_pods(kube))
    restarted = stored(Binder(kube, plugins=[sharing(kube, fake_gpu_nodes=True, clock=clock, sleep=clock.sleep)]), kube)
    posts = []
    post = kube.post
    kube.post = lambda path, body: posts.append(path) or post(path, body)
    shared_pod(kube, "b")
    restarted.handle(bind_request(kube, "b", ["g1"]))
    assert kube.objects[BR + "b"]["status"]["phase"] == "Succeeded"
    assert reservation_pods(kube) == before
    assert not [p for p in posts if p == f"/api/v1/namespaces/{NAMESPACE}/pods"]
    assert configmap(kube, "b")["data"]["NVIDIA_VISIBLE_DEVICES"] == "0"


def test_a_reservation_pod_named_the_old_way_is_found_by_its_labels():
    kube, binder, _ = setup()
    old = reservation_pod("n1", "g1") | {"status": {"phase": "Running"}}
    old["metadata"]["name"] = "gpu-reservation-n1-x7k2p"
    old["metadata"]["annotations"][DEVICE_ANNOTATION] = "1"
    kube.add(f"/api/v1/namespaces/{NAMESPACE}/pods/gpu-reservation-n1-x7k2p", old)
    sharer = shared_pod(kube, "sharer")  # bound by an older binder: the group is in use
    sharer["metadata"]["labels"] = {"runai-gpu-group": "g1"}
    sharer["status"]["phase"] = "Running"
    shared_pod(kube, "a")
    binder.handle(bind_request(kube, "a", ["g1"]))
    assert list(reservation_pods(kube)) == ["gpu-reservation-n1-x7k2p"]
    assert configmap(kube, "a")["data"]["NVIDIA_VISIBLE_DEVICES"] == "1"


def test_a_binder_that_loses_the_create_race_adopts_the_winners_pod():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    winner = reservation_pod("n1", "g1") | {"status": {"phase": "Running"}}
    winner["metadata"]["annotations"][DEVICE_ANNOTATION] = "GPU-winner"
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{winner['metadata']['name']}"
    get = kube.get
    raced = []

    def missed_by_the_list(p, query=None):  # the other binder creates it just after this one looked
        result = get(p, query)
        if "runai-gpu-group=g1" in (query or {}).get("labelSelector", "") and not raced:
            raced.append(kube.add(path, copy.deepcopy(winner)))
        return result

    kube.get = missed_by_the_list
    binder.handle(bind_request(kube, "a", ["g1"]))
    assert raced and kube.objects[BR + "a"]["status"]["phase"] == "Succeeded"
    assert list(reservation_pods(kube)) == [winner["metadata"]["name"]]
    assert reservation_pods(kube)[winner["metadata"]["name"]]["metadata"]["uid"] == raced[0]["metadata"]["uid"]
    assert configmap(kube, "a")["data"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-winner"


def test_a_name_taken_by_a_pod_being_deleted_fails_the_attempt_for_a_retry():
    kube, binder, _ = setup()
    shared_pod(kube, "a")
    leaving = reservation_pod("n1", "g1")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    leaving["metadata"]["labels"] = {"app": "kai-resource-reservation"}  # its group label is gone already
    kube.add(f"/api/v1/namespaces/{NAMESPACE}/pods/{leaving['metadata']['name']}", leaving)
    assert binder.handle(bind_request(kube, "a", ["g1"])) == 1.0
    status = kube.objects[BR + "a"]["status"]
    assert status["phase"] == "Failed" and "does not hold GPU group g1" in status["reason"]
