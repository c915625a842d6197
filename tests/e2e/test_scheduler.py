"""``kai-scheduler run`` as a process against the real control plane: placements, gangs, explanations, restarts.

Each test works in its own namespace on its own kwok nodes (pods select them by label), so the
tests share one scheduler process and one control plane without seeing each other's capacity.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest

from kai.kube.views import timestamp
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


#: KAI's default actions.
ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"


def items(kube, kind, ns) -> dict[str, dict]:
    return {i["metadata"]["name"]: i for i in kube.get(m.collection(kind, ns)).get("items", [])}


def events(kube, ns, name=None) -> list[dict]:
    return [e for e in kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
            if name is None or e["involvedObject"]["name"] == name]


class Scheduler:
    """``kai-scheduler run --components scheduler,binder,podgrouper`` with KAI's default actions."""

    def __init__(self, kai_run, kubeconfig, workdir) -> None:
        self.kai_run, self.kubeconfig = kai_run, kubeconfig
        self.config = workdir / "config.yaml"
        self.config.write_text(f"actions: {ACTIONS}\n")
        self.start()

    def start(self) -> None:
        self.process = self.kai_run(["--config", str(self.config), "--components", "scheduler,binder,podgrouper"],
                                    self.kubeconfig, name="scheduler")

    def log(self) -> str:
        return self.process.log()


@pytest.fixture(scope="module")
def scheduler(kube, kai_chart, kai_run, control_plane, tmp_path_factory):
    proc = Scheduler(kai_run, control_plane.kubeconfig, tmp_path_factory.mktemp("scheduler"))
    yield proc
    if proc.process.proc.poll() is None:
        assert proc.process.terminate() == 0, proc.log()[-3000:]


def node(kube, name, labels, gpus=8):
    m.apply(kube, m.gpu_node(name, gpus=gpus, labels=labels))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])),
               what=f"node {name} Ready")


def nodes(kube, ns, count):
    """``count`` 8-GPU nodes for this test only; returns the selector the test's pods use."""
    for i in range(count):
        node(kube, f"{ns}-n{i}", {"e2e": ns})
    return {"e2e": ns}


def queue(kube, ns, name, **spec):
    """A top-level queue of this test (deleted with its namespace)."""
    body = m.queue(f"{ns}-{name}", **spec)
    body["metadata"]["labels"] = {"e2e": ns}
    m.apply(kube, body)
    return body["metadata"]["name"]


def job(kube, ns, name, pods=1, min_member=1, queue="default-queue", priority_class="train", **pod_args):
    """A PodGroup and its pods (``name`` alone for one pod, else ``name-i``)."""
    m.apply(kube, m.podgroup(ns, name, queue=queue, min_member=min_member, priority_class=priority_class))
    names = [name] if pods == 1 else [f"{name}-{i}" for i in range(pods)]
    for pod_name in names:
        m.apply(kube, m.pod(ns, pod_name, name, **pod_args))
    return names


def running(kube, ns, names):
    pods = items(kube, "Pod", ns)
    return all(pods[n]["status"].get("phase") == "Running" for n in names)


def event_reasons(kube, ns, name):
    return {(e["reason"], e["message"]) for e in events(kube, ns, name)}


def test_quickstart_cpu_and_gpu_pods_are_scheduled(kube, scheduler, ns):
    """Bare pods naming a queue, as in KAI's quickstart: the podgrouper groups them, the scheduler places them."""
    sel = nodes(kube, ns, 1)
    queue_label = {"kai.scheduler/queue": "default-queue"}
    m.apply(kube, m.pod(ns, "cpu-only", labels=queue_label, node_selector=sel))
    m.apply(kube, m.pod(ns, "gpu", gpus=1, labels=queue_label, node_selector=sel))
    wait_until(lambda: running(kube, ns, ["cpu-only", "gpu"]), 30, "both pods Running")
    # plain pods: bound by the scheduler itself, with the annotation the binder would write, and no BindRequest
    assert items(kube, "BindRequest", ns) == {}
    pods = items(kube, "Pod", ns)
    assert pods["gpu"]["spec"]["nodeName"] == f"{ns}-n0"
    assert pods["gpu"]["metadata"]["annotations"]["received-resource-type"] == "Regular"
    assert {"type": "PodScheduled", "status": "True"}.items() <= next(
        c for c in pods["gpu"]["status"]["conditions"] if c["type"] == "PodScheduled").items()
    scheduled = ("Scheduled", f"Successfully assigned pod {ns}/gpu to node {ns}-n0 at node-pool default")
    # the scheduler's event is written by its commit workers after the Binding
    wait_until(lambda: scheduled in event_reasons(kube, ns, "gpu"), 10, "the Scheduled event")
    assert {pg["spec"]["queue"] for pg in items(kube, "PodGroup", ns).values()} == {"default-queue"}


def test_gang_binds_only_when_all_fit_then_all_at_once(kube, scheduler, ns):
    sel = nodes(kube, ns, 1)
    names = job(kube, ns, "gang", pods=4, min_member=4, gpus=3, node_selector=sel)
    message = ("PodSchedulingErrors: Resources were found for 2 pods while 4 are required for gang scheduling. "
               "Additional pods cannot be scheduled due to: ")
    wait_until(lambda: any(r == "Unschedulable" and text.startswith(message)
                           for r, text in event_reasons(kube, ns, "gang")), 30, "the gang's Unschedulable event")
    wait_until(lambda: items(kube, "PodGroup", ns)["gang"].get("status"), 10, "the PodGroup's condition")
    condition = items(kube, "PodGroup", ns)["gang"]["status"]["schedulingConditions"][-1]
    assert condition["type"] == "UnschedulableOnNodePool" and condition["message"].startswith(message)
    assert condition["reasons"][0]["reason"] == "PodSchedulingErrors"
    assert not any(p["spec"].get("nodeName") for p in items(kube, "Pod", ns).values())
    wait_until(lambda: all(p["status"].get("conditions", [{}])[0].get("reason") == "Unschedulable"
                           for p in items(kube, "Pod", ns).values()), 10, "PodScheduled=False on every pod")

    node(kube, f"{ns}-n1", sel)
    wait_until(lambda: running(kube, ns, names), 30, "the whole gang Running")
    pods = items(kube, "Pod", ns)
    bound = [timestamp(next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
                       ["lastTransitionTime"]) for p in pods.values()]
    assert max(bound) - min(bound) <= 1  # committed in one cycle
    assert sorted(Counter(p["spec"]["nodeName"] for p in pods.values()).values()) == [2, 2]


def test_bad_annotation_and_unknown_queue_are_explained_while_others_schedule(kube, scheduler, ns):
    sel = nodes(kube, ns, 1)
    job(kube, ns, "bad", annotations={"gpu-fraction": "half"}, node_selector=sel)
    job(kube, ns, "lost", queue="no-such-queue", gpus=1, node_selector=sel)
    job(kube, ns, "good", gpus=1, node_selector=sel)
    wait_until(lambda: running(kube, ns, ["good"]), 30, "the valid pod Running")
    wait_until(lambda: any(r == "Unschedulable" and "gpu-fraction" in text
                           for r, text in event_reasons(kube, ns, "bad")), 20, "the bad pod's event")
    wait_until(lambda: ("Unschedulable", "Queue 'no-such-queue' does not exist") in event_reasons(kube, ns, "lost"),
               20, "the unknown queue's event")
    wait_until(lambda: items(kube, "PodGroup", ns)["lost"].get("status"), 10, "the PodGroup's condition")
    pods = items(kube, "Pod", ns)
    assert "gpu-fraction" in pods["bad"]["status"]["conditions"][0]["message"]
    assert not pods["bad"]["spec"].get("nodeName") and not pods["lost"]["spec"].get("nodeName")
    assert items(kube, "PodGroup", ns)["lost"]["status"]["schedulingConditions"][-1]["reasons"] == [
        {"reason": "QueueDoesNotExist", "message": "Queue 'no-such-queue' does not exist"}]
    assert scheduler.process.proc.poll() is None
    assert "Queue 'no-such-queue' does not exist" in scheduler.log()


def test_killed_scheduler_restarts_without_double_binds_or_lost_pods(kube, scheduler, ns):
    sel = nodes(kube, ns, 3)  # 24 GPUs for 20 one-GPU pods
    names = []
    for i in range(20):
        names += job(kube, ns, f"job-{i}", gpus=1, node_selector=sel)
        if i == 9:
            wait_until(lambda: len(bound(kube, ns)) >= 3, 30, "the first bindings")
            scheduler.process.kill()
    assert len(bound(kube, ns)) < 20
    scheduler.start()
    wait_until(lambda: running(kube, ns, names), 60, "all 20 pods Running after the restart")
    pods = items(kube, "Pod", ns)
    assert items(kube, "BindRequest", ns) == {}  # plain pods, bound directly
    gpus: dict[str, int] = defaultdict(int)
    for p in pods.values():
        gpus[p["spec"]["nodeName"]] += 1
    assert max(gpus.values()) <= 8
    # Never placed twice. A kill between a Binding and its event may leave an earlier pod without
    # one; every pod created after the restart gets it.
    later = {f"job-{i}" for i in range(10, 20)}
    def counts() -> Counter:
        return Counter(e["involvedObject"]["name"] for e in events(kube, ns) if e["reason"] == "Scheduled")

    wait_until(lambda: later <= set(counts()), 30, "Scheduled events of the later pods")
    assert set(counts().values()) == {1}, counts()
    placed = {n: p["spec"]["nodeName"] for n, p in pods.items()}
    time.sleep(2)  # more cycles change nothing
    assert {n: p["spec"]["nodeName"] for n, p in items(kube, "Pod", ns).items()} == placed


def bound(kube, ns) -> set[str]:
    return {n for n, p in items(kube, "Pod", ns).items() if p["spec"].get("nodeName")}


def evictions(kube, ns) -> list[str]:
    return [e["message"] for e in events(kube, ns) if e["reason"] == "Evict"]


def test_queue_under_quota_reclaims_from_queue_over_quota(kube, scheduler, ns):
    sel = nodes(kube, ns, 2)  # 16 GPUs
    greedy, owed = queue(kube, ns, "greedy", gpu_quota=8), queue(kube, ns, "owed", gpu_quota=8)
    greedy_pods = [p for i in range(16) for p in job(kube, ns, f"greedy-{i}", queue=greedy, gpus=1, node_selector=sel)]
    wait_until(lambda: running(kube, ns, greedy_pods), 40, "the over-quota queue filling both nodes")
    owed_pods = [p for i in range(8) for p in job(kube, ns, f"owed-{i}", queue=owed, gpus=1, node_selector=sel)]
    wait_until(lambda: running(kube, ns, owed_pods), 60, "the under-quota queue's pods Running")
    pods = items(kube, "Pod", ns)
    left = [n for n in greedy_pods if n in pods]
    assert len(left) == 8  # the over-quota queue keeps its deserved 8 GPUs
    messages = evictions(kube, ns)
    assert len(messages) == 8 and all("was preempted by workload" in text for text in messages)
    assert sum(1 for p in items(kube, "Pod", ns).values() if p["spec"].get("nodeName")) == 16


def test_higher_priority_job_preempts_lower_priority_in_its_queue(kube, scheduler, ns):
    sel = nodes(kube, ns, 1)
    team = queue(kube, ns, "team", gpu_quota=8)
    train = [p for i in range(8) for p in job(kube, ns, f"train-{i}", queue=team, gpus=1, node_selector=sel)]
    wait_until(lambda: running(kube, ns, train), 30, "the training pods filling the node")
    serve = job(kube, ns, "serve", pods=4, min_member=4, queue=team, priority_class="inference", gpus=1,
                node_selector=sel)
    wait_until(lambda: running(kube, ns, serve), 60, "the inference gang Running")
    messages = evictions(kube, ns)
    assert len(messages) == 4
    assert all(text.endswith(f"was preempted by higher priority workload {ns}/serve") for text in messages), messages
    assert len([n for n in train if n in items(kube, "Pod", ns)]) == 4


def test_subgroup_tree_with_a_rack_constraint_is_placed_as_one_unit_inside_one_rack(kube, scheduler, ns):
    rack = "e2e.kai.scheduler/rack"
    topology = f"{ns}-racks"
    m.apply(kube, {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": topology},
                   "spec": {"levels": [{"nodeLabel": rack}]}})
    try:
        for name, r in (("a0", "ra"), ("b0", "rb"), ("b1", "rb")):
            node(kube, f"{ns}-{name}", {"e2e": ns, rack: r}, gpus=4)
        sel = {"e2e": ns}
        in_rack = {"topology": topology, "requiredTopologyLevel": rack}
        group = m.podgroup(ns, "svc", min_member=1)
        group["spec"]["subGroups"] = [
            {"name": "frontend", "minMember": 1}, {"name": "workers", "topologyConstraint": in_rack},
            {"name": "prefill", "parent": "workers", "minMember": 2},
            {"name": "decode", "parent": "workers", "minMember": 2}]
        m.apply(kube, group)
        pods = {"svc-fe": ("frontend", 0), "svc-p0": ("prefill", 2), "svc-p1": ("prefill", 2),
                "svc-d0": ("decode", 2), "svc-d1": ("decode", 2)}
        for name, (subgroup, gpus) in pods.items():
            body = m.pod(ns, name, "svc", gpus=gpus, node_selector=sel)
            body["metadata"]["labels"] = {"kai.scheduler/subgroup-name": subgroup}
            m.apply(kube, body)
        typo = m.podgroup(ns, "typo")
        typo["spec"]["topologyConstraint"] = {"topology": topology, "requiredTopologyLevel": "no-such-level"}
        m.apply(kube, typo)
        m.apply(kube, m.pod(ns, "typo", "typo", gpus=1, node_selector=sel))

        wait_until(lambda: running(kube, ns, list(pods)), 30, "the service's pods Running")
        placed = {n: p["spec"].get("nodeName") for n, p in items(kube, "Pod", ns).items()}
        # Eight GPUs of workers fit only rack rb (two 4-GPU nodes), and they go there together.
        assert {placed[n] for n in pods if n != "svc-fe"} == {f"{ns}-b0", f"{ns}-b1"}
        wait_until(lambda: any(r == "Unschedulable" and "does not contain a level with this name" in text
                               for r, text in event_reasons(kube, ns, "typo")), 20, "the typo's event")
        assert not placed.get("typo")
    finally:
        kube.delete(f"{m.collection('Topology')}/{topology}")
