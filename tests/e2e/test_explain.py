"""``kai-scheduler explain`` against a running scheduler: the dominant reason of a pending job, and a "would run
if" that the kernel checked and that, once applied, lets it run.

Each test works in its own namespace on its own kwok nodes; one scheduler process serves them all.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"
RACK = "e2e.kai.scheduler/rack"


@pytest.fixture(scope="module")
def scheduler(kai_scheduler):
    return kai_scheduler(ACTIONS, name="explain")


def pods(kube, ns) -> dict[str, dict]:
    return {i["metadata"]["name"]: i for i in kube.get(m.collection("Pod", ns)).get("items", [])}


def node(kube, ns, name, gpus=8, labels=None):
    m.apply(kube, m.gpu_node(f"{ns}-{name}", gpus=gpus, labels={"e2e": ns, **(labels or {})}))


def queue(kube, ns, **spec):
    body = m.queue(f"{ns}-q", **spec)
    body["metadata"]["labels"] = {"e2e": ns}
    m.apply(kube, body)
    return body["metadata"]["name"]


def job(kube, ns, name, queue, pods_=1, gpus=1, priority_class="train", group=None):
    body = m.podgroup(ns, name, queue=queue, min_member=pods_, priority_class=priority_class)
    body.update(group or {})
    m.apply(kube, body)
    names = [f"{name}-{i}" for i in range(pods_)]
    for pod_name in names:
        m.apply(kube, m.pod(ns, pod_name, name, gpus=gpus, node_selector={"e2e": ns}))
    return names


def running(kube, ns, names):
    found = pods(kube, ns)
    return all(found.get(n, {}).get("status", {}).get("phase") == "Running" for n in names)


def explain(scheduler, ns, name):
    """``kai-scheduler explain --json`` of ``ns/name``; None while the job is not pending in the last cycle."""
    out = subprocess.run([sys.executable, "-m", "kai.cli", "explain", f"{ns}/{name}", "--json",
                          "--server", f"http://127.0.0.1:{scheduler.port}"],
                         capture_output=True, text=True, cwd="/")  # the installed package, not the source tree
    answer = json.loads(out.stdout) if out.stdout else {}
    return answer if out.returncode == 0 else None


def reason_of(scheduler, ns, name, kind):
    """The answer once its dominant reason is of ``kind``."""
    found = {}

    def check():
        answer = explain(scheduler, ns, name)
        found["answer"] = answer
        return answer is not None and answer["reason"]["details"]["kind"] == kind

    wait_until(check, 60, f"{ns}/{name} pending with a {kind} reason", interval=1.0,
               detail=lambda: f"last answer: {found.get('answer')}")
    return found["answer"]


def change(answer, key):
    """The suggested change with ``key``; the kernel found, on a copy of the cycle's snapshot, that it lets the
    job run."""
    hint = next(w for w in answer["reason"]["would_run_if"] if w["change"] and key in w["change"])
    assert hint["verified"] is True, answer
    return hint["change"]


def written_reasons(kube, ns, name):
    """The dominant reasons written about PodGroup ``ns/name``: its annotation's, then those of the Unschedulable
    events about it and its pods (annotation ``kai.scheduler/pending-reason``, decoded; None where there is none)."""
    key = "kai.scheduler/pending-reason"
    group = kube.get(f"{m.collection('PodGroup', ns)}/{name}")
    events = kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
    notes = [(group["metadata"].get("annotations") or {}).get(key)]
    notes += [(e["metadata"].get("annotations") or {}).get(key) for e in events
              if e["reason"] == "Unschedulable" and e["involvedObject"]["name"].startswith(name)]
    return [json.loads(n) if n else None for n in notes]


def test_a_gang_over_its_queue_limit_runs_once_the_limit_is_raised(kube, scheduler, ns):
    node(kube, ns, "n0")
    q = queue(kube, ns, gpu_quota=4, gpu_limit=4)
    held = job(kube, ns, "held", q, gpus=2)
    wait_until(lambda: running(kube, ns, held), 30, "the held pod Running")
    gang = job(kube, ns, "gang", q, pods_=2, gpus=2)
    answer = reason_of(scheduler, ns, "gang", "queue-limit")
    assert answer["reason"]["code"] == "OverLimit" and answer["queue"] == q
    assert answer["reason"]["details"]["missing"] == 2
    raise_limit = change(answer, "limit")
    assert raise_limit == {"queue": q, "resource": "gpu", "limit": 6}
    served = {"code": "OverLimit", "details": answer["reason"]["details"]}  # the same on the PodGroup and events
    wait_until(lambda: (found := written_reasons(kube, ns, "gang"))[1:] and all(n == served for n in found), 30,
               "the reason written as served", detail=lambda: f"written: {written_reasons(kube, ns, 'gang')}")
    kube.patch(f"{m.collection('Queue')}/{q}", {"spec": {"resources": {"gpu": {"limit": raise_limit["limit"]}}}})
    wait_until(lambda: running(kube, ns, gang), 60, "the gang Running")
    wait_until(lambda: written_reasons(kube, ns, "gang")[0] is None, 30, "the reason taken off the PodGroup")


def test_a_pod_larger_than_any_node_runs_once_such_a_node_joins(kube, scheduler, ns):
    node(kube, ns, "n0")
    q = queue(kube, ns, gpu_quota=32)
    giant = job(kube, ns, "giant", q, gpus=24)
    answer = reason_of(scheduler, ns, "giant", "no-node-large-enough")
    assert answer["reason"]["details"]["requested_per_pod"] == 24
    wanted = change(answer, "add_node_gpus")["add_node_gpus"]
    assert wanted == 24
    node(kube, ns, "big", gpus=int(wanted))
    wait_until(lambda: running(kube, ns, giant), 60, "the large pod Running")


def test_a_gang_blocked_by_topology_runs_once_the_requirement_is_a_preference(kube, scheduler, ns):
    topology = f"{ns}-racks"
    m.apply(kube, {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": topology},
                   "spec": {"levels": [{"nodeLabel": RACK}]}})
    try:
        node(kube, ns, "a0", gpus=4, labels={RACK: "ra"})
        node(kube, ns, "b0", gpus=4, labels={RACK: "rb"})
        q = queue(kube, ns, gpu_quota=8)
        required = {"topologyConstraint": {"topology": topology, "requiredTopologyLevel": RACK}}
        ring = job(kube, ns, "ring", q, pods_=2, gpus=4, group={"spec": {
            **m.podgroup(ns, "ring", queue=q, min_member=2)["spec"], **required}})
        answer = reason_of(scheduler, ns, "ring", "topology")
        assert answer["reason"]["details"]["required_level"] == RACK
        assert change(answer, "relax_topology") == {"relax_topology": True}
        path = f"{m.collection('PodGroup', ns)}/ring"
        kube.patch(path, {"spec": {"topologyConstraint": {"topology": topology, "requiredTopologyLevel": None,
                                                          "preferredTopologyLevel": RACK}}})
        wait_until(lambda: running(kube, ns, ring), 60, "the gang Running across racks")
    finally:
        kube.delete(f"{m.collection('Topology')}/{topology}")


def test_a_job_behind_higher_priority_work_runs_once_that_work_ends(kube, scheduler, ns):
    node(kube, ns, "n0")
    q = queue(kube, ns, gpu_quota=8)
    serve = job(kube, ns, "serve", q, gpus=8, priority_class="inference")
    wait_until(lambda: running(kube, ns, serve), 30, "the inference pod Running")
    late = job(kube, ns, "late", q, gpus=4)
    answer = reason_of(scheduler, ns, "late", "behind-higher-priority")
    assert answer["reason"]["details"]["held_by"][0]["job"] == f"{ns}/serve"
    ending = change(answer, "end_jobs")["end_jobs"]
    assert ending == [f"{ns}/serve"]
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/serve-0", body={"gracePeriodSeconds": 0})
    wait_until(lambda: running(kube, ns, late), 60, "the waiting pod Running")
