"""GPU quota per resource type on the real control plane: a queue that gives a quota only for one GPU type gets its
pods only on that type's kwok nodes, up to the type's limit, while a queue without resource types uses any node.
"""

from __future__ import annotations

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"


@pytest.fixture(scope="module")
def scheduler(kube, kai_chart, kai_run, control_plane, tmp_path_factory):
    config = tmp_path_factory.mktemp("gpu-types") / "config.yaml"
    config.write_text(f"actions: {ACTIONS}\n")
    process = kai_run(["--config", str(config), "--components", "scheduler,binder"], control_plane.kubeconfig,
                      name="gpu-types-scheduler")
    yield process
    assert process.terminate() == 0, process.log()[-3000:]


def pods(kube, ns) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.get(m.collection("Pod", ns)).get("items", [])}


def test_a_queue_with_quota_only_for_one_type_gets_only_that_type_up_to_its_limit(kube, scheduler, ns):
    # Two GPU types of this test's own nodes, told apart by one label.
    a100, h100 = {"e2e-gpu": f"{ns}-a100"}, {"e2e-gpu": f"{ns}-h100"}
    for name, labels in ((f"{ns}-h0", h100), (f"{ns}-a0", a100), (f"{ns}-h1", h100)):
        m.apply(kube, m.gpu_node(name, gpus=4, labels={"e2e": ns, **labels}))
    typed = m.queue(f"{ns}-vision", gpu_quota=2)
    typed["metadata"]["labels"] = {"e2e": ns}
    typed["spec"]["resourceTypes"] = [{"name": f"{ns}-a100", "nodeSelector": a100,
                                       "gpu": {"quota": 2, "limit": 3, "overQuotaWeight": 1}}]
    m.apply(kube, typed)
    stored = kube.get(f"{m.collection('Queue')}/{ns}-vision")
    assert stored["spec"]["resourceTypes"][0]["nodeSelector"] == a100  # the CRD keeps the field

    # Five one-GPU pods of an elastic job, with no node selector: the queue's type alone keeps them on a100.
    m.apply(kube, m.podgroup(ns, "train", queue=f"{ns}-vision", min_member=1))
    for i in range(5):
        m.apply(kube, m.pod(ns, f"train-{i}", "train", gpus=1))
    # A queue without resource types still uses any node (here one of type h100).
    m.apply(kube, m.podgroup(ns, "any", queue="default-queue"))
    m.apply(kube, m.pod(ns, "any", "any", gpus=1, node_selector={"kubernetes.io/hostname": f"{ns}-h0"}))

    def bound() -> dict[str, str]:
        return {name: p["spec"]["nodeName"] for name, p in pods(kube, ns).items() if p["spec"].get("nodeName")}

    wait_until(lambda: len(bound()) == 4, 60, "three train pods and the other queue's pod bound",
               detail=scheduler.log)
    placed = bound()
    assert placed.pop("any") == f"{ns}-h0"
    assert set(placed.values()) == {f"{ns}-a0"}, placed  # only the a100 node, though the h100 nodes are free
    assert len(placed) == 3  # the a100 limit

    def limit_reported() -> bool:
        waiting = [p for p in pods(kube, ns).values() if not p["spec"].get("nodeName")]
        messages = [c.get("message", "") for p in waiting for c in p.get("status", {}).get("conditions", [])]
        return len(waiting) == 2 and all(f"where queue {ns}-vision has reached its limit of 3 GPUs" in text
                                         for text in messages) and len(messages) == 2

    wait_until(limit_reported, 30, "the waiting pods' condition naming the type's limit", detail=scheduler.log)
    assert len(bound()) == 4  # several cycles later, still nothing on the h100 nodes
