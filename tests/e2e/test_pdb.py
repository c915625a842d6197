"""Evictions that respect the workload, against the real control plane: PodDisruptionBudgets hold in preemption,
evictions are paced within a budget, and a semi-preemptible gang loses only its surplus.

Each test works in its own namespace on its own 4-GPU kwok node; the disruption controller of
kube-controller-manager keeps the budgets' status, as on a real cluster.
"""

from __future__ import annotations

import time
import uuid

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"
SERVE = {"app": "serve"}


@pytest.fixture(scope="module")
def scheduler(kai_scheduler):
    return kai_scheduler(ACTIONS, name="pdb-scheduler")


@pytest.fixture
def ns(kube):
    """A namespace with one 4-GPU node and a queue deserving 4 GPUs; all deleted afterwards."""
    name = f"e2e-pdb-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    m.apply(kube, m.gpu_node(f"{name}-n0", gpus=4, labels={"e2e": name}))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                           kube.get(f"/api/v1/nodes/{name}-n0").get("status", {}).get("conditions", [])),
               what="the node Ready")
    queue = m.queue(name, gpu_quota=4)
    queue["metadata"]["labels"] = {"e2e": name}
    m.apply(kube, queue)
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    wait_until(lambda: not pods(kube, name), 30, f"the pods of {name} gone")
    kube.delete(f"/api/v1/nodes/{name}-n0")
    kube.delete(f"{m.collection('Queue')}/{name}")


def pods(kube, ns) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])}


def events(kube, ns, reason) -> list[dict]:
    return [e for e in kube.get(f"/api/v1/namespaces/{ns}/events").get("items", []) if e["reason"] == reason]


def running(kube, ns, names) -> bool:
    found = pods(kube, ns)
    return all(n in found and found[n]["status"].get("phase") == "Running" for n in names)


def job(kube, ns, name, pods=1, min_member=1, priority_class="train", labels=None, podgroup_labels=None):
    """A PodGroup of ``pods`` one-GPU pods on the test's node (``name`` alone for one pod, else ``name-i``)."""
    group = m.podgroup(ns, name, queue=ns, min_member=min_member, priority_class=priority_class)
    group["metadata"]["labels"] = dict(podgroup_labels or {})
    m.apply(kube, group)
    names = [name] if pods == 1 else [f"{name}-{i}" for i in range(pods)]
    for pod_name in names:
        m.apply(kube, m.pod(ns, pod_name, name, gpus=1, labels=labels, node_selector={"e2e": ns}))
    return names


def service(kube, ns) -> list[str]:
    """Four one-pod jobs of a service (label app=serve) filling the node's 4 GPUs."""
    names = [p for i in range(4) for p in job(kube, ns, f"serve-{i}", labels=SERVE)]
    wait_until(lambda: running(kube, ns, names), 40, "the service's four pods Running")
    return names


def budget(kube, ns, min_available, allowed):
    """A PodDisruptionBudget over the service; waits until its status allows ``allowed`` disruptions."""
    m.apply(kube, m.pod_disruption_budget(ns, "serve-pdb", min_available, SERVE))
    wait_for_budget(kube, ns, allowed)


def wait_for_budget(kube, ns, allowed):
    def observed():
        pdb = kube.get(f"{m.collection('PodDisruptionBudget', ns)}/serve-pdb")
        status = pdb.get("status", {})
        return status.get("observedGeneration", 0) >= pdb["metadata"].get("generation", 1) and \
            status.get("disruptionsAllowed") == allowed
    wait_until(observed, 30, f"the budget's status allowing {allowed} disruptions")


def untouched(kube, ns, names) -> bool:
    found = pods(kube, ns)
    return all(n in found and not found[n]["metadata"].get("deletionTimestamp") for n in names)


def test_a_preemption_a_budget_forbids_leaves_the_preemptor_pending_with_the_budget_named(kube, scheduler, ns):
    serve = service(kube, ns)
    budget(kube, ns, 4, 0)
    job(kube, ns, "urgent", priority_class="inference")
    named = f"PodDisruptionBudget {ns}/serve-pdb (0 disruptions allowed) forbids evicting 1 of its pods"

    def condition():
        status = kube.get(f"{m.collection('PodGroup', ns)}/urgent").get("status") or {}
        reasons = [r for c in status.get("schedulingConditions") or () for r in c.get("reasons") or ()]
        return [r for r in reasons if r["reason"] == "PodDisruptionBudget" and named in r["message"]]

    wait_until(condition, 30, "the preemptor's condition naming the budget")
    wait_until(lambda: any(named in e["message"] for e in events(kube, ns, "Unschedulable")), 10,
               "the preemptor's Unschedulable event naming the budget")
    time.sleep(3)  # several cycles
    assert untouched(kube, ns, serve) and not events(kube, ns, "Evict")
    assert not pods(kube, ns)["urgent"]["spec"].get("nodeName")

    kube.delete(f"{m.collection('PodDisruptionBudget', ns)}/serve-pdb")
    wait_until(lambda: running(kube, ns, ["urgent"]), 40, "the preemptor Running once the budget is gone")
    assert len([n for n in serve if n in pods(kube, ns)]) == 3


def test_a_budget_allowing_one_disruption_lets_one_pod_go_per_cycle(kube, scheduler, ns):
    serve = service(kube, ns)
    budget(kube, ns, 3, 1)
    urgent = job(kube, ns, "urgent", pods=2, min_member=1, priority_class="inference")
    wait_until(lambda: running(kube, ns, urgent[:1]), 40, "one preemptor pod Running")
    time.sleep(3)  # several cycles: the budget allows no more
    assert len(events(kube, ns, "Evict")) == 1
    assert len([n for n in serve if n in pods(kube, ns)]) == 3
    assert not pods(kube, ns)[urgent[1]]["spec"].get("nodeName")

    wait_for_budget(kube, ns, 0)
    kube.patch(f"{m.collection('PodDisruptionBudget', ns)}/serve-pdb", {"spec": {"minAvailable": 2}})
    wait_until(lambda: running(kube, ns, urgent), 40, "the second preemptor pod Running once the budget allows")
    assert len(events(kube, ns, "Evict")) == 2
    assert len([n for n in serve if n in pods(kube, ns)]) == 2


def test_a_semi_preemptible_gang_above_its_minimum_loses_only_its_surplus(kube, scheduler, ns):
    elastic = job(kube, ns, "elastic", pods=4, min_member=2,
                  podgroup_labels={"kai.scheduler/preemptibility": "semi-preemptible"})
    wait_until(lambda: running(kube, ns, elastic), 40, "the semi-preemptible gang Running above its minimum")
    urgent = job(kube, ns, "urgent", pods=2, min_member=2, priority_class="inference")
    wait_until(lambda: running(kube, ns, urgent), 40, "the higher-priority gang Running")
    left = [n for n in elastic if n in pods(kube, ns)]
    assert len(left) == 2 and untouched(kube, ns, left)

    more = job(kube, ns, "more", pods=2, min_member=2, priority_class="inference")
    time.sleep(3)  # several cycles: the core is not preempted
    assert untouched(kube, ns, left)
    assert not any(pods(kube, ns)[n]["spec"].get("nodeName") for n in more)
