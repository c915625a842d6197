"""One scheduler per SchedulingShard on a real API server: a shard created after start is served within
seconds over its partition only, the default shard keeps to the unlabelled nodes, and a deleted shard's
scheduler stops.

One ``kai-scheduler run`` process (every shard, the default) for the module; the shards are deleted
afterwards, so that other modules' schedulers see none.
"""

from __future__ import annotations

import time
import uuid

import pytest

from kai.api import names
from kai.kube.client import ApiError, object_path
from support import manifests as m
from support.cleanup import delete_if_present
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

POOL = "pool-a"
SHARDS = {name: object_path(*names.SCHEDULINGSHARDS, name=name) for name in (names.DEFAULT_SHARD, POOL)}


def delete_shards(kube) -> None:
    for path in SHARDS.values():
        delete_if_present(kube, path)


def create_shard(kube, name: str, spec: dict) -> None:
    """Creates the shard; one that exists already (``run`` creates the default one) is left as it is."""
    try:
        kube.post(object_path(*names.SCHEDULINGSHARDS), {"apiVersion": "kai.scheduler/v1",
                                                         "kind": "SchedulingShard", "metadata": {"name": name},
                                                         "spec": spec})
    except ApiError as exc:
        if exc.status != 409:
            raise


@pytest.fixture(scope="module")
def scheduler(kube, kai_chart, kai_run, control_plane):
    delete_shards(kube)
    process = kai_run(["--components", "scheduler,binder"], control_plane.kubeconfig, name="shards")
    wait_until(lambda: process.get("/readyz")[0] == 200, 30, "the scheduler ready")
    yield process
    delete_shards(kube)
    assert process.proc.poll() is None, process.log()[-3000:]
    assert process.terminate() == 0, process.log()[-3000:]


@pytest.fixture
def ns(kube):
    """A namespace with two unlabelled 8-GPU nodes and two of node pool ``pool-a`` (all labelled ``e2e=<ns>``),
    and a queue of the pool; removed afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    for i in range(2):
        m.apply(kube, m.gpu_node(f"{name}-n{i}", gpus=8, labels={"e2e": name}))
        m.apply(kube, m.gpu_node(f"{name}-a{i}", gpus=8, labels={"e2e": name, names.NODE_POOL_LABEL: POOL}))
    queue = m.queue(f"{name}-qa")
    queue["metadata"]["labels"] = {names.NODE_POOL_LABEL: POOL}
    m.apply(kube, queue)
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    wait_until(lambda: not kube.get(m.collection("Pod", name))["items"], 30, "the pods gone")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})
    delete_if_present(kube, object_path(*names.QUEUES, name=f"{name}-qa"))


def submit(kube, ns: str, name: str, pool: bool, scheduler_name: str = names.SCHEDULER_NAME) -> None:
    group = m.podgroup(ns, name, queue=f"{ns}-qa" if pool else "default-queue")
    if pool:
        group["metadata"]["labels"] = {names.NODE_POOL_LABEL: POOL}
    m.apply(kube, group)
    m.apply(kube, m.pod(ns, name, name, gpus=1, node_selector={"e2e": ns}, scheduler_name=scheduler_name))


def node_of(kube, ns: str, pod: str) -> str | None:
    return kube.get(f"{m.collection('Pod', ns)}/{pod}")["spec"].get("nodeName")


def deployed(kube, name: str) -> bool:
    found = (kube.get(SHARDS[name]).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Deployed" and c["status"] == "True" for c in found)


def test_a_new_shard_schedules_its_pool_within_seconds_and_stops_when_deleted(kube, scheduler, ns):
    # the default shard only (``run`` creates it where it is missing): the unlabelled nodes
    submit(kube, ns, "before", pool=False)
    assert wait_until(lambda: node_of(kube, ns, "before"), 30, "the default pod bound") in {f"{ns}-n0", f"{ns}-n1"}
    submit(kube, ns, "pool-early", pool=True)
    time.sleep(2)
    assert node_of(kube, ns, "pool-early") is None  # the default shard leaves the pool's PodGroup alone

    create_shard(kube, names.DEFAULT_SHARD, {})  # as the chart and ``run`` create it
    created = time.monotonic()
    create_shard(kube, POOL, {"partitionLabelValue": POOL})
    wait_until(lambda: deployed(kube, POOL), 15, "the new shard Deployed")
    wait_until(lambda: node_of(kube, ns, "pool-early"), 15, "the pool's pod bound by the new shard")
    served = time.monotonic() - created
    assert node_of(kube, ns, "pool-early") in {f"{ns}-a0", f"{ns}-a1"}
    assert kube.get(f"{m.collection('Pod', ns)}/pool-early")["metadata"]["labels"][names.NODE_POOL_LABEL] == POOL

    for i in range(4):
        submit(kube, ns, f"pool-{i}", pool=True)
        submit(kube, ns, f"default-{i}", pool=False)
    for i in range(4):
        assert wait_until(lambda i=i: node_of(kube, ns, f"pool-{i}"), 15, "pool pods bound") in {
            f"{ns}-a0", f"{ns}-a1"}
        assert wait_until(lambda i=i: node_of(kube, ns, f"default-{i}"), 15, "default pods bound") in {
            f"{ns}-n0", f"{ns}-n1"}
    wait_until(lambda: deployed(kube, names.DEFAULT_SHARD), 15, "the default shard Deployed")
    metrics = scheduler.get("/metrics")[1]
    assert f'shard="{POOL}"' in metrics and f'shard="{names.DEFAULT_SHARD}"' in metrics

    kube.delete(SHARDS[POOL])
    wait_until(lambda: "stopped serving scheduling shard" in scheduler.log(), 15, "the pool's scheduler stopped")
    submit(kube, ns, "pool-late", pool=True)
    submit(kube, ns, "default-late", pool=False)
    wait_until(lambda: node_of(kube, ns, "default-late"), 15, "the default shard still scheduling")
    time.sleep(3)
    assert node_of(kube, ns, "pool-late") is None  # nobody serves the pool now
    assert scheduler.get("/readyz")[0] == 200
    print(f"new shard served within {served:.2f}s")


def lease_holder(kube, lease: str) -> str:
    try:
        return kube.get(object_path("coordination.k8s.io", "v1", "leases", "kai-scheduler", lease))["spec"].get(
            "holderIdentity") or ""
    except ApiError as exc:
        if exc.status == 404:
            return ""
        raise


def test_one_process_per_shard_each_with_its_lease(kube, scheduler, ns, kai_run, control_plane):
    """Separate replicas, as the chart's per-shard Deployments run them: ``--scheduling-shard pool-a`` in one
    process, ``default`` in another, each leading its shard's Lease (a scheduler name of their own)."""
    scheduler_name = f"shards-{ns}"
    create_shard(kube, POOL, {"partitionLabelValue": POOL})
    flags = ["--components", "scheduler", f"--scheduler-name={scheduler_name}", "--leader-elect"]
    pool = kai_run([*flags, "--scheduling-shard", POOL], control_plane.kubeconfig, name="pool-a",
                   env={"POD_NAME": "pool-a"})
    default = kai_run([*flags, "--scheduling-shard", names.DEFAULT_SHARD], control_plane.kubeconfig, name="default",
                      env={"POD_NAME": "default"})
    try:
        wait_until(lambda: lease_holder(kube, f"{scheduler_name}-{POOL}").startswith("pool-a_"), 30, "pool-a leads")
        wait_until(lambda: lease_holder(kube, scheduler_name).startswith("default_"), 30, "default leads")
        for i in range(2):
            submit(kube, ns, f"own-pool-{i}", pool=True, scheduler_name=scheduler_name)
            submit(kube, ns, f"own-default-{i}", pool=False, scheduler_name=scheduler_name)
        for i in range(2):
            assert wait_until(lambda i=i: node_of(kube, ns, f"own-pool-{i}"), 30, "pool pods bound") in {
                f"{ns}-a0", f"{ns}-a1"}
            assert wait_until(lambda i=i: node_of(kube, ns, f"own-default-{i}"), 30, "default pods bound") in {
                f"{ns}-n0", f"{ns}-n1"}
        assert "own-pool" not in default.log() and "own-default" not in pool.log()
    finally:
        assert pool.terminate() == 0, pool.log()[-3000:]
        assert default.terminate() == 0, default.log()[-3000:]
        delete_if_present(kube, SHARDS[POOL])
