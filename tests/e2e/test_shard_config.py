"""The scheduler takes KAI's ``SchedulingShard default`` up live, as KAI's e2e suites reconfigure it.

One ``kai-scheduler run`` process for the module; the tests create and patch the shard (deleted
afterwards, so that other modules' schedulers see none) and watch where pods land, without a restart.
"""

from __future__ import annotations

import uuid

import pytest

from kai.api import names
from kai.kube.client import ApiError, object_path
from support import manifests as m
from support.cleanup import delete_if_present
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

SHARD = object_path(*names.SCHEDULINGSHARDS, name=names.DEFAULT_SHARD)
APPLIED = "scheduler configuration applied"


def delete_shard(kube) -> None:
    delete_if_present(kube, SHARD)


@pytest.fixture(scope="module")
def scheduler(kube, kai_chart, kai_run, control_plane, tmp_path_factory):
    delete_shard(kube)
    config = tmp_path_factory.mktemp("shard") / "config.yaml"
    config.write_text("actions: allocate, consolidation, reclaim, preempt, stalegangeviction\n")
    process = kai_run(["--config", str(config), "--components", "scheduler,binder,podgrouper"],
                      control_plane.kubeconfig, name="shard-scheduler")
    wait_until(lambda: process.get("/readyz")[0] == 200, 30, "the scheduler ready")
    yield process
    delete_shard(kube)
    assert process.proc.poll() is None, process.log()[-3000:]  # never restarted, never stopped
    assert process.terminate() == 0, process.log()[-3000:]


@pytest.fixture
def ns(kube):
    """A namespace and two 8-GPU nodes of its own (label ``e2e=<ns>``), removed afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    for i in range(2):
        m.apply(kube, m.gpu_node(f"{name}-n{i}", gpus=8, labels={"e2e": name}))
    for i in range(2):
        wait_until(lambda i=i: any(c["type"] == "Ready" and c["status"] == "True" for c in
                                   kube.get(f"/api/v1/nodes/{name}-n{i}").get("status", {}).get("conditions", [])),
                   30, "the nodes Ready")
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    wait_until(lambda: not kube.get(m.collection("Pod", name))["items"], 30, "the pods gone")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})


def applied(process, *needles: str) -> int:
    """How many times the scheduler took up a configuration whose log line holds every needle."""
    return sum(APPLIED in line and all(n in line for n in needles) for line in process.log().splitlines())


def set_shard(kube, spec: dict) -> None:
    try:
        kube.post(object_path(*names.SCHEDULINGSHARDS), {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
                                                         "metadata": {"name": names.DEFAULT_SHARD}, "spec": spec})
    except ApiError as exc:
        if exc.status != 409:
            raise
        kube.patch(SHARD, {"spec": spec})


def conditions_of_current_generation(kube) -> dict[str, str] | None:
    """The shard's status conditions by type, once all of them observed its current generation."""
    shard = kube.get(SHARD)
    found = (shard.get("status") or {}).get("conditions") or []
    if not found or any(c["observedGeneration"] != shard["metadata"]["generation"] for c in found):
        return None
    return {c["type"]: c["status"] for c in found}


def place_two(kube, ns: str, prefix: str) -> set[str]:
    """Two one-GPU pods on this test's nodes; the nodes they were bound to."""
    pods = [f"{prefix}-{i}" for i in range(2)]
    for pod in pods:
        m.apply(kube, m.podgroup(ns, pod))
        m.apply(kube, m.pod(ns, pod, pod, gpus=1, node_selector={"e2e": ns}))

    def nodes():
        found = {p: kube.get(f"{m.collection('Pod', ns)}/{p}")["spec"].get("nodeName") for p in pods}
        return set(found.values()) if all(found.values()) else None

    return wait_until(nodes, 30, f"{prefix} pods bound")


def test_placement_strategy_changes_take_effect_without_a_restart(kube, scheduler, ns):
    before = applied(scheduler)
    set_shard(kube, {"placementStrategy": {"gpu": "spread", "cpu": "spread"}})
    wait_until(lambda: applied(scheduler, "gpuspread") > 0 and applied(scheduler) > before, 15, "spread taken up")
    assert "consolidation" not in [line for line in scheduler.log().splitlines() if APPLIED in line][-1]
    assert place_two(kube, ns, "spread") == {f"{ns}-n0", f"{ns}-n1"}
    assert wait_until(lambda: conditions_of_current_generation(kube), 15, "the shard's conditions") == {
        "Deployed": "True", "Available": "True", "DependenciesFulfilled": "True", "Ready": "True",
        "Reconciling": "False"}

    before = applied(scheduler)
    set_shard(kube, {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}})
    wait_until(lambda: applied(scheduler) > before, 15, "binpack taken up")
    assert "gpupack" in [line for line in scheduler.log().splitlines() if APPLIED in line][-1]
    assert len(place_two(kube, ns, "binpack")) == 1  # both on the node the first one went to


def test_a_malformed_shard_leaves_the_previous_configuration_and_names_the_field(kube, scheduler, ns):
    before = applied(scheduler)
    set_shard(kube, {"placementStrategy": {"gpu": "spread", "cpu": "spread"}})
    wait_until(lambda: applied(scheduler) > before, 15, "spread taken up")
    set_shard(kube, {"minRuntime": {"preemptMinRuntime": "five minutes"}})

    def invalid_events():
        return [e for e in kube.get("/api/v1/namespaces/default/events")["items"]
                if e["reason"] == names.REASON_INVALID_CONFIGURATION
                and e["involvedObject"]["kind"] == "SchedulingShard" and "five minutes" in e["message"]]

    (event,) = wait_until(invalid_events, 15, "an InvalidConfiguration event on the shard")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == names.DEFAULT_SHARD
    assert "spec.minRuntime: field 'preemptMinRuntime' must be a duration" in event["message"]
    assert "spec.minRuntime: field 'preemptMinRuntime'" in scheduler.log()
    assert scheduler.proc.poll() is None and scheduler.get("/healthz")[0] == 200
    assert place_two(kube, ns, "still-spread") == {f"{ns}-n0", f"{ns}-n1"}  # spread stays in force
    conditions = wait_until(lambda: conditions_of_current_generation(kube), 15, "the shard's conditions")
    assert conditions["Deployed"] == "False" and conditions["Available"] == "True"
    (deployed,) = [c for c in kube.get(SHARD)["status"]["conditions"] if c["type"] == "Deployed"]
    assert "preemptMinRuntime" in deployed["message"]
