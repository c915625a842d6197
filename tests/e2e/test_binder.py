"""The binder and the queue controller as ``kai-scheduler run`` processes, each under the chart's
ServiceAccount for it (so a call missing from their RBAC fails here), against the real API server."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from kai.kube.client import ApiError, object_path
from support import manifests as m
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kai_chart")]

BIND_REQUESTS = ("scheduling.run.ai", "v1alpha2", "bindrequests")


class Restartable:
    """The module's binder process, which a test may restart; ``get`` and ``log`` are the current one's."""

    def __init__(self, start) -> None:
        self.start = start
        self.processes = [start()]

    @property
    def current(self):
        return self.processes[-1]

    def get(self, path: str):
        return self.current.get(path)

    def log(self) -> str:
        return "".join(p.log() for p in self.processes)

    def ready(self) -> None:
        wait_until(lambda: self.get("/readyz")[0] == 200, what="binder ready")

    def restart(self) -> None:
        assert self.current.terminate() == 0, self.log()[-3000:]
        self.processes.append(self.start())
        self.ready()


@pytest.fixture(scope="module")
def binder(kai_run, component_kubeconfig, kube):
    process = Restartable(lambda: kai_run(["--components=binder", "--log-format=json"],
                                          component_kubeconfig("binder"), name="binder"))
    process.ready()
    yield process
    assert process.current.terminate() == 0, process.log()[-3000:]
    assert "Forbidden" not in process.log() and " 403" not in process.log(), process.log()[-3000:]


@pytest.fixture(scope="module")
def ns(kube):
    name = f"e2e-bind-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    return name


@pytest.fixture(scope="module")
def node(kube, ns):
    name = f"{ns}-n0"
    m.apply(kube, m.gpu_node(name, labels={"e2e": ns}))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])),
               what=f"node {name} Ready")
    return name


def pending_pod(kube, ns, name) -> dict:
    """A pod nobody schedules (there is no scheduler here): only a BindRequest places it."""
    return kube.post(m.collection("Pod", ns), m.pod(ns, name, "none", scheduler_name="nobody"))


def bind_request(kube, pod: dict, node: str, backoff_limit: int | None = None) -> str:
    meta = pod["metadata"]
    spec = {"podName": meta["name"], "selectedNode": node, "receivedResourceType": "Regular"}
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    kube.post(object_path(*BIND_REQUESTS, meta["namespace"]), {
        "apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                          "controller": True}]},
        "spec": spec,
    })
    return meta["name"]


def read_bind_request(kube, ns, name) -> dict | None:
    try:
        return kube.get(object_path(*BIND_REQUESTS, ns, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def status(kube, ns, name) -> dict:
    return (read_bind_request(kube, ns, name) or {}).get("status") or {}


def pod_condition(kube, ns, name) -> dict | None:
    """The pod's ``PodBound`` condition, if it has one."""
    conditions = kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")["status"].get("conditions") or ()
    return next((c for c in conditions if c["type"] == "PodBound"), None)


def reasons(kube, ns, name) -> list[str]:
    return [e["reason"] for e in kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
            if e["involvedObject"]["name"] == name]


def test_hand_made_bind_request_is_bound(kube, binder, ns, node):
    pod = pending_pod(kube, ns, "by-hand")
    bind_request(kube, pod, node)
    br = wait_until(lambda: status(kube, ns, "by-hand").get("phase") == "Succeeded" and status(kube, ns, "by-hand"),
                    what="BindRequest Succeeded")
    assert br.get("failedAttempts", 0) == 0
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/by-hand")
    assert pod["spec"]["nodeName"] == node
    assert pod["metadata"]["annotations"]["received-resource-type"] == "Regular"
    # the condition and the event report the bind after the BindRequest's status
    bound = wait_until(lambda: pod_condition(kube, ns, "by-hand"), what="PodBound condition")
    assert bound["status"] == "True" and bound["reason"] == "Bound"
    wait_until(lambda: "Bound" in reasons(kube, ns, "by-hand"), what="Bound event")
    wait_until(lambda: kube.get(f"/api/v1/namespaces/{ns}/pods/by-hand")["status"].get("phase") == "Running",
               what="kwok runs the bound pod")


def test_bind_to_a_missing_node_fails_is_recorded_and_the_pod_stays_pending(kube, binder, ns):
    pod = pending_pod(kube, ns, "to-ghost")
    bind_request(kube, pod, "no-such-node", backoff_limit=2)
    br = wait_until(lambda: status(kube, ns, "to-ghost").get("failedAttempts") == 2 and status(kube, ns, "to-ghost"),
                    what="two failed attempts (backoffLimit 2)")
    assert br["phase"] == "Failed"
    assert br["reason"] == "node no-such-node not found"
    time.sleep(2.5)  # the next retry would be due by now: there must be none
    assert read_bind_request(kube, ns, "to-ghost")["status"]["failedAttempts"] == 2
    wait_until(lambda: reasons(kube, ns, "to-ghost").count("BindingError") >= 2, what="both BindingError events")
    assert reasons(kube, ns, "to-ghost").count("BindingError") == 2
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/to-ghost")
    assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
    condition = pod_condition(kube, ns, "to-ghost")
    assert condition["status"] == "False" and "no-such-node not found" in condition["message"]


def test_bind_request_of_a_missing_pod_is_deleted(kube, binder, ns, node):
    pod = pending_pod(kube, ns, "short-lived")
    kube.delete(f"/api/v1/namespaces/{ns}/pods/short-lived")
    bind_request(kube, pod, node)
    wait_until(lambda: read_bind_request(kube, ns, "short-lived") is None, what="stale BindRequest deleted")


def test_second_bind_request_for_a_bound_pod_never_moves_it(kube, binder, ns, node):
    other = f"{ns}-n1"
    m.apply(kube, m.gpu_node(other, labels={"e2e": ns}))
    pod = pending_pod(kube, ns, "twice")
    bind_request(kube, pod, node)
    wait_until(lambda: kube.get(f"/api/v1/namespaces/{ns}/pods/twice")["spec"].get("nodeName"), what="bound")
    kube.delete(object_path(*BIND_REQUESTS, ns, "twice"))
    wait_until(lambda: read_bind_request(kube, ns, "twice") is None, what="deleted")
    bind_request(kube, pod, other)  # a stale decision naming another node
    wait_until(lambda: read_bind_request(kube, ns, "twice") is None, what="stale request for a bound pod deleted")
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/twice")["spec"]["nodeName"] == node
    assert reasons(kube, ns, "twice").count("Bound") == 1


def test_binder_serves_metrics_and_probes(binder):
    assert binder.get("/healthz") == (200, "ok\n")
    status, body = binder.get("/readyz")
    assert status == 200 and "[+]binder ok" in body
    status, text = binder.get("/metrics")
    assert status == 200
    succeeded = re.search(r'^kai_binder_bind_attempts_total\{result="succeeded"\} (\S+)$', text, re.M)
    failed = re.search(r'^kai_binder_bind_attempts_total\{result="failed"\} (\S+)$', text, re.M)
    assert succeeded and float(succeeded.group(1)) >= 2
    assert failed and float(failed.group(1)) >= 2
    assert "kai_binder_bind_latency_seconds_bucket" in text
    # client-go's and controller-runtime's series of the binder's work queue, and the process's
    adds = re.search(r'^workqueue_adds_total\{controller="binder",name="binder"\} (\S+)$', text, re.M)
    reconciled = re.search(r'^controller_runtime_reconcile_total\{controller="binder",result="success"\} (\S+)$',
                           text, re.M)
    assert adds and float(adds.group(1)) >= 4
    assert reconciled and float(reconciled.group(1)) >= 2
    assert 'workqueue_work_duration_seconds_count{controller="binder",name="binder"}' in text
    assert re.search(r"^process_resident_memory_bytes \S+$", text, re.M)


# -- queue controller ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def queue_controller(kai_run, component_kubeconfig, kube):
    process = kai_run(["--components=queue-controller", "--queue-label-to-metric-label=team=team"],
                      component_kubeconfig("queue-controller"), name="queue-controller")
    wait_until(lambda: process.get("/readyz")[0] == 200, what="queue controller ready")
    yield process
    assert process.terminate() == 0, process.log()[-3000:]
    assert "Forbidden" not in process.log() and " 403" not in process.log(), process.log()[-3000:]


def queue_status(kube, name) -> dict:
    return kube.get(object_path("scheduling.run.ai", "v2", "queues", name=name)).get("status") or {}


def test_queue_status_sums_podgroups_and_child_queues(kube, queue_controller, ns):
    parent, child = f"{ns}-parent", f"{ns}-child"
    m.apply(kube, m.queue(parent))
    leaf = m.queue(child, parent=parent)
    leaf["metadata"]["labels"] = {"team": "vision"}
    leaf["spec"]["displayName"] = "Vision"
    m.apply(kube, leaf)
    groups = {"pg-a": {"cpu": "1500m", "nvidia.com/gpu": "2"}, "pg-b": {"cpu": "500m", "memory": "1Gi"}}
    for name, allocated in groups.items():
        m.apply(kube, m.podgroup(ns, name, queue=child))
        kube.patch(object_path("scheduling.run.ai", "v2alpha2", "podgroups", ns, name),
                   {"status": {"resourcesStatus": {"allocated": allocated, "requested": allocated}}},
                   subresource="status")
    want = {"cpu": "2", "memory": "1073741824", "nvidia.com/gpu": "2"}
    wait_until(lambda: queue_status(kube, child).get("allocated") == want, what="child queue allocated")
    wait_until(lambda: queue_status(kube, parent).get("allocated") == want, what="parent queue allocated")
    assert queue_status(kube, parent)["childQueues"] == [child]
    assert queue_status(kube, parent)["requested"] == want

    kube.delete(object_path("scheduling.run.ai", "v2alpha2", "podgroups", ns, "pg-a"))
    want = {"cpu": "500m", "memory": "1073741824"}
    wait_until(lambda: queue_status(kube, parent).get("allocated") == want, what="sums after a PodGroup is deleted")

    def metric(name, queue):  # KAI's labels: queue_name and queue_metadata_name are the Queue's name
        text = queue_controller.get("/metrics")[1]
        found = re.search(rf'^{name}\{{queue_display_name="([^"]*)",queue_metadata_name="{queue}",'
                          rf'queue_name="{queue}",team="(\w*)"\}} (\S+)$', text, re.M)
        return found and (found.group(1), found.group(2), float(found.group(3)))

    wait_until(lambda: metric("kai_queue_allocated_cpu_cores", child) == ("Vision", "vision", 0.5),
               what="queue metric")
    assert metric("kai_queue_allocated_memory_bytes", parent) == ("", "", 2.0**30)
    assert metric("kai_queue_allocated_gpus", parent) == ("", "", 0.0)
    assert metric("kai_queue_info", child) == ("Vision", "vision", 1.0)


@pytest.fixture(scope="module")
def podgroup_controller(kai_run, component_kubeconfig, kube):
    process = kai_run(["--components=podgroup-controller"], component_kubeconfig("podgroup-controller"),
                      name="podgroup-controller")
    wait_until(lambda: process.get("/readyz")[0] == 200, what="podgroup controller ready")
    yield process
    assert process.terminate() == 0, process.log()[-3000:]
    assert "Forbidden" not in process.log() and " 403" not in process.log(), process.log()[-3000:]


def test_running_pods_reach_podgroup_and_queue_status_and_metrics(kube, podgroup_controller, queue_controller, ns,
                                                                  node):
    queue = f"{ns}-team"
    m.apply(kube, m.queue(queue))
    m.apply(kube, m.podgroup(ns, "serve", queue=queue, priority_class="inference"))  # non-preemptible
    for i in range(2):
        pod = m.pod(ns, f"serve-{i}", "serve", cpu="250m", memory="512Mi", gpus=1)
        pod["spec"]["nodeName"] = node  # placed directly: kwok runs it
        m.apply(kube, pod)
    path = object_path("scheduling.run.ai", "v2alpha2", "podgroups", ns, "serve")
    want = {"cpu": "500m", "memory": "1073741824", "nvidia.com/gpu": "2"}
    status = wait_until(lambda: (s := (kube.get(path).get("status") or {}).get("resourcesStatus") or {}).get(
        "allocated") == want and s, what="PodGroup allocated")
    assert status["allocatedNonPreemptible"] == want and status["requested"] == want
    wait_until(lambda: queue_status(kube, queue).get("allocatedNonPreemptible") == want, what="queue status")
    wait_until(lambda: re.search(rf'^kai_queue_allocated_gpus\{{queue_display_name="",queue_metadata_name="{queue}",'
                                 rf'queue_name="{queue}",team=""\}} 2\.0$',
                                 queue_controller.get("/metrics")[1], re.M), what="queue GPU metric")

    kube.delete(f"/api/v1/namespaces/{ns}/pods/serve-1")
    half = {"cpu": "250m", "memory": "536870912", "nvidia.com/gpu": "1"}
    wait_until(lambda: queue_status(kube, queue).get("allocated") == half, what="queue status after a pod is gone")


# -- GPU sharing with the resource-reservation program ---------------------------------------------
def reservation_account(kube, control_plane, tmp_path) -> dict[str, str]:
    """What the kubelet gives a reservation pod: its ServiceAccount's token and the cluster's CA, and the
    API server's address in the environment. Returns that environment; the files are in ``tmp_path``."""
    from kai.binder.reservation import APP, NAMESPACE

    token = kube.post(object_path("", "v1", "serviceaccounts", NAMESPACE, APP, "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    (tmp_path / "token").write_text(token["status"]["token"])
    (tmp_path / "ca.crt").write_bytes((control_plane.pki / "ca.crt").read_bytes())
    host, port = control_plane.server.removeprefix("https://").rsplit(":", 1)
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "POD_NAMESPACE": NAMESPACE}


def fraction_pod(kube, ns, name, toleration) -> dict:
    """A half-GPU pod as admission prepares it (the webhook does not run here), tolerating the node's taint."""
    import random

    from kai.kube.sharedgpu import mutate

    body = m.pod(ns, name, "none", scheduler_name="nobody", annotations={"gpu-fraction": "0.5"})
    body["spec"]["tolerations"] = [toleration]
    return kube.post(m.collection("Pod", ns), mutate(body, random.Random(name)))


def fraction_bind_request(kube, pod: dict, node: str, group: str) -> str:
    meta = pod["metadata"]
    kube.post(object_path(*BIND_REQUESTS, meta["namespace"]), {
        "apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                          "controller": True}]},
        "spec": {"podName": meta["name"], "selectedNode": node, "receivedResourceType": "Fraction",
                 "selectedGPUGroups": [group], "receivedGPU": {"count": 1, "portion": "0.5"}, "backoffLimit": 3},
    })
    return meta["name"]


def test_the_reservation_program_reports_the_gpu_and_a_restarted_binder_reuses_the_pod(
        kube, binder, ns, control_plane, tmp_path):
    import threading

    from kai.binder import reservationapp
    from kai.binder.gpusharing import configmap_names
    from kai.binder.reservation import DEVICE_ANNOTATION, NAMESPACE, reservation_pod_name

    node, group, uuid_ = f"{ns}-tainted", f"{ns}-group", "GPU-6b1f0c2e-8d3a-4e5f-9a7b-0c1d2e3f4a5b"
    body = m.gpu_node(node, labels={"e2e": ns})
    body["spec"] = {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}
    m.apply(kube, body)
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    first = fraction_pod(kube, ns, "share-a", toleration)
    fraction_bind_request(kube, first, node, group)

    # the binder makes the group's reservation pod under KAI's name and waits for it to report its GPU
    name = reservation_pod_name(node, group)
    path = object_path("", "v1", "pods", NAMESPACE, name)
    holder = wait_until(lambda: _get(kube, path), what="the reservation pod")
    assert holder["spec"]["nodeName"] == node and toleration in holder["spec"]["tolerations"]
    assert holder["spec"]["serviceAccountName"] == "kai-resource-reservation"
    assert holder["spec"]["containers"][0]["image"].startswith("kai-resource-reservation:")
    assert status(kube, ns, "share-a").get("phase") != "Succeeded"

    # the program, as the pod runs it: its ServiceAccount (the chart's RBAC), one GPU visible
    env = {**reservation_account(kube, control_plane, tmp_path), "POD_NAME": name}
    stop, exits = threading.Event(), []
    api = reservationapp.InClusterApi(env, account_dir=str(tmp_path))
    program = threading.Thread(target=lambda: exits.append(
        reservationapp.main([], env=env, api=api, read=lambda: [uuid_], stop=stop)))
    program.start()
    try:
        wait_until(lambda: status(kube, ns, "share-a").get("phase") == "Succeeded", what="the fraction bound")
    finally:
        stop.set()
        program.join(10)
    assert exits == [0]
    holder = kube.get(path)
    assert holder["metadata"]["annotations"][DEVICE_ANNOTATION] == uuid_
    pod = kube.get(object_path("", "v1", "pods", ns, "share-a"))
    assert pod["spec"]["nodeName"] == node and pod["metadata"]["labels"]["runai-gpu-group"] == group
    capabilities, _ = configmap_names(pod)
    assert kube.get(object_path("", "v1", "configmaps", ns, capabilities))["data"]["NVIDIA_VISIBLE_DEVICES"] == uuid_

    # a restarted binder finds the group's pod: the second half binds at once to the same GPU
    binder.restart()
    second = fraction_pod(kube, ns, "share-b", toleration)
    fraction_bind_request(kube, second, node, group)
    wait_until(lambda: status(kube, ns, "share-b").get("phase") == "Succeeded", what="the second fraction bound")
    pod = kube.get(object_path("", "v1", "pods", ns, "share-b"))
    capabilities, _ = configmap_names(pod)
    assert kube.get(object_path("", "v1", "configmaps", ns, capabilities))["data"]["NVIDIA_VISIBLE_DEVICES"] == uuid_
    holders = kube.get(object_path("", "v1", "pods", NAMESPACE), {"fieldSelector": f"spec.nodeName={node}"})["items"]
    assert [(h["metadata"]["name"], h["metadata"]["uid"]) for h in holders] == [(name, holder["metadata"]["uid"])]


def _get(kube, path: str) -> dict | None:
    try:
        return kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
