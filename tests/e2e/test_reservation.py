"""Reservations and runtime limits against the real control plane: a gang's reservation holds against a stream of
small jobs while a short job backfills, and a job is stopped at its runtime limit.

kwok's pods run until they are deleted, so every job that ends here ends at its declared maximum runtime.
"""

from __future__ import annotations

import json
import time

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

CONFIG = """actions: allocate, consolidation, reclaim, preempt, stalegangeviction, runtimelimit
reservation:
  enabled: true
  minGPUs: 4
  maxDuration: 10m
"""


@pytest.fixture(scope="module")
def scheduler(kai_run, control_plane, kai_chart, tmp_path_factory):
    config = tmp_path_factory.mktemp("reservation") / "config.yaml"
    config.write_text(CONFIG)
    process = kai_run(["--config", str(config), "--components", "scheduler,binder,podgrouper"],
                      control_plane.kubeconfig, name="reservation-scheduler")
    yield process
    if process.proc.poll() is None:
        assert process.terminate() == 0, process.log()[-3000:]


@pytest.fixture
def cluster(kube, ns):
    """Two 2-GPU nodes and a queue deserving their 4 GPUs, for the test's namespace."""
    for i in range(2):
        m.apply(kube, m.gpu_node(f"{ns}-n{i}", gpus=2, labels={"e2e": ns}))
    queue = m.queue(ns, gpu_quota=4)
    queue["metadata"]["labels"] = {"e2e": ns}
    m.apply(kube, queue)
    return ns


def pods(kube, ns) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])}


def phase(kube, ns, name) -> str | None:
    pod = pods(kube, ns).get(name)
    return None if pod is None else pod["status"].get("phase")


def events(kube, ns, reason) -> list[dict]:
    return [e for e in kube.get(f"/api/v1/namespaces/{ns}/events").get("items", []) if e["reason"] == reason]


def job(kube, ns, name, pods=1, gpus=1, max_runtime=None) -> list[str]:
    """A PodGroup of ``pods`` pods of ``gpus`` GPUs (a gang of all of them), with a maximum runtime if given."""
    group = m.podgroup(ns, name, queue=ns, min_member=pods)
    if max_runtime is not None:
        group["metadata"]["annotations"] = {"kai.scheduler/max-runtime": max_runtime}
    m.apply(kube, group)
    names = [name] if pods == 1 else [f"{name}-{i}" for i in range(pods)]
    for pod_name in names:
        m.apply(kube, m.pod(ns, pod_name, name, gpus=gpus, node_selector={"e2e": ns}))
    return names


def reservation(kube, ns, name) -> dict | None:
    group = kube.get(f"{m.collection('PodGroup', ns)}/{name}")
    text = (group["metadata"].get("annotations") or {}).get("kai.scheduler/reservation")
    return None if text is None else json.loads(text)


def test_a_reservation_holds_against_small_jobs_and_a_short_job_backfills(kube, scheduler, cluster):
    ns = cluster
    job(kube, ns, "blocker", max_runtime="60s")
    wait_until(lambda: phase(kube, ns, "blocker") == "Running", 40, "the blocker Running")
    gang = job(kube, ns, "gang", pods=2, gpus=2)
    wait_until(lambda: reservation(kube, ns, "gang") is not None, 30, "the gang's reservation")
    assert sorted(reservation(kube, ns, "gang")["nodes"]) == [f"{ns}-n0", f"{ns}-n1"]
    assert events(kube, ns, "NodesReserved")
    small = [p for i in range(3) for p in job(kube, ns, f"small-{i}")]
    job(kube, ns, "short", max_runtime="15s")
    wait_until(lambda: phase(kube, ns, "short") == "Running", 15, "the short job backfilled")
    wait_until(lambda: phase(kube, ns, "short") is None, 40, "the short job stopped at its runtime limit")
    assert all(phase(kube, ns, p) == "Pending" for p in small), "a small job took a reserved node"
    wait_until(lambda: all(phase(kube, ns, p) == "Running" for p in gang), 90, "the gang Running")
    assert phase(kube, ns, "blocker") is None  # stopped at its runtime limit
    assert all(phase(kube, ns, p) == "Pending" for p in small)
    wait_until(lambda: reservation(kube, ns, "gang") is None, 30, "the reservation released")
    assert events(kube, ns, "ReservationReleased")


def test_a_job_is_stopped_at_its_runtime_limit_with_an_event_and_a_condition(kube, scheduler, cluster):
    ns = cluster
    job(kube, ns, "limited", max_runtime="5s")
    wait_until(lambda: phase(kube, ns, "limited") == "Running", 40, "the pod Running")
    wait_until(lambda: phase(kube, ns, "limited") is None, 60, "the pod evicted at its runtime limit")
    (event,) = events(kube, ns, "RuntimeLimitExceeded")
    assert event["involvedObject"]["kind"] == "PodGroup" and "maximum runtime (5s)" in event["message"]
    group = kube.get(f"{m.collection('PodGroup', ns)}/limited")
    conditions = (group.get("status") or {}).get("schedulingConditions") or []
    assert any(c.get("type") == "RuntimeLimitExceeded" for c in conditions)


def test_a_workload_made_again_after_its_runtime_limit_runs_its_whole_runtime_afresh(kube, scheduler, cluster):
    ns = cluster
    template = m.pod(ns, "", gpus=1, labels={"app": "again", "kai.scheduler/queue": ns}, node_selector={"e2e": ns})
    m.apply(kube, {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "again", "namespace": ns, "annotations": {"kai.scheduler/max-runtime": "15s"}},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "again"}},
                            "template": {"metadata": {"labels": template["metadata"]["labels"]},
                                         "spec": template["spec"]}}})

    def running() -> str | None:
        return next((n for n, p in pods(kube, ns).items() if p["status"].get("phase") == "Running"), None)

    try:
        first = wait_until(running, 40, "the first pod Running")
        second = wait_until(lambda: (name := running()) != first and name, 60, "a pod made again Running")
        # placed again, its job starts its runtime afresh: not evicted at once by the last start before
        time.sleep(5)
        assert phase(kube, ns, second) == "Running"
        wait_until(lambda: phase(kube, ns, second) is None, 60, "the second pod evicted at its runtime limit")
    finally:  # no more pods made again
        kube.delete(f"{m.collection('ReplicaSet', ns)}/again", {"propagationPolicy": "Background"})


def test_a_bad_max_runtime_is_reported_on_its_podgroup_and_the_job_still_runs(kube, scheduler, cluster):
    ns = cluster
    job(kube, ns, "bad", max_runtime="forever")
    wait_until(lambda: phase(kube, ns, "bad") == "Running", 40, "the pod Running")
    wait_until(lambda: events(kube, ns, "InvalidPodGroup"), 30, "the InvalidPodGroup event")
    assert "kai.scheduler/max-runtime" in events(kube, ns, "InvalidPodGroup")[0]["message"]
