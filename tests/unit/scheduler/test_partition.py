"""A scheduler serves its partition only: the default shard the nodes, queues and PodGroups without the
node-pool label, a pool's shard those labelled for it, whose BindRequests and pods it labels."""

from __future__ import annotations

from kai.api import names
from kai.kube.client import object_path
from kai.scheduler.bindmode import BIND_REQUEST, DIRECT
from kai.scheduler.loop import Scheduler
from kai.scheduler.partition import EVERYTHING, Partition
from support.kube import FakeApi

POOL = {names.NODE_POOL_LABEL: "pool-a"}


def cluster() -> FakeApi:
    """Nodes free-0 (unlabelled) and a-0 (pool-a); queues q and qa (pool-a); a one-GPU pod in each queue."""
    kube = FakeApi()
    for name, labels in (("free-0", {}), ("a-0", POOL)):
        kube.add(object_path(*names.NODES, name=name), {
            "metadata": {"name": name, "labels": dict(labels)},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    for queue, labels in (("q", {}), ("qa", POOL)):
        kube.add(object_path(*names.QUEUES, name=queue), {
            "metadata": {"name": queue, "labels": dict(labels)},
            "spec": {"resources": {"gpu": {"quota": 0, "limit": -1}}}})
        group = f"g-{queue}"
        kube.add(object_path(*names.PODGROUPS, "ns", group), {
            "metadata": {"name": group, "namespace": "ns", "labels": dict(labels)},
            "spec": {"queue": queue, "minMember": 1}})
        kube.add(object_path(*names.PODS, "ns", f"p-{queue}"), {
            "metadata": {"name": f"p-{queue}", "namespace": "ns", "labels": {},
                         "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": names.SCHEDULER_NAME,
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}})
    return kube


def schedule(kube: FakeApi, partition: Partition, bind_mode: str = BIND_REQUEST) -> Scheduler:
    """One cycle of a scheduler of ``partition``; through BindRequests unless ``bind_mode`` says otherwise, so that
    what it binds shows in them."""
    scheduler = Scheduler(kube, partition=partition, bind_mode=bind_mode)
    scheduler.cache.start()
    try:
        assert not scheduler.cache.wait_synced(10)
        scheduler.run_once()
        assert scheduler.committer.flush(10)
    finally:
        scheduler.committer.close()
        scheduler.cache.stop()
    return scheduler


def bindings(kube: FakeApi) -> dict[str, dict]:
    prefix = object_path(*names.BINDREQUESTS, "ns") + "/"
    return {path.removeprefix(prefix): obj for path, obj in kube.objects.items() if path.startswith(prefix)}


def test_partition_selectors_are_kais():
    assert Partition().selector == f"!{names.NODE_POOL_LABEL}"
    assert Partition(value="pool-a").selector == f"{names.NODE_POOL_LABEL}=pool-a"
    assert EVERYTHING.selector == ""
    assert (Partition().labels, Partition(value="pool-a").labels) == ({}, POOL)
    assert (Partition().node_pool, Partition(value="pool-a").node_pool) == ("default", "pool-a")
    assert Partition().matches({}) and not Partition().matches(POOL)
    assert Partition(value="pool-a").matches(POOL) and not Partition(value="pool-a").matches({})
    assert EVERYTHING.matches(POOL) and EVERYTHING.matches({})


def test_the_default_shard_ignores_labelled_nodes_queues_and_podgroups():
    kube = cluster()
    scheduler = schedule(kube, Partition())
    assert {b["spec"]["podName"]: b["spec"]["selectedNode"] for b in bindings(kube).values()} == {"p-q": "free-0"}
    assert set(scheduler.cache.informers["nodes"]._store) == {"free-0"}
    assert set(scheduler.cache.informers["queues"]._store) == {"q"}
    assert set(scheduler.cache.informers["podgroups"]._store) == {"ns/g-q"}
    assert bindings(kube)["p-q"]["metadata"]["labels"] == {"selected-node": "free-0"}
    pod = kube.objects[object_path(*names.PODS, "ns", "p-q")]
    assert names.NODE_POOL_LABEL not in pod["metadata"]["labels"]  # the default shard labels nothing


def test_a_pool_shard_sees_only_its_own_and_labels_what_it_binds():
    kube = cluster()
    scheduler = schedule(kube, Partition(value="pool-a"))
    assert {b["spec"]["podName"]: b["spec"]["selectedNode"] for b in bindings(kube).values()} == {"p-qa": "a-0"}
    assert set(scheduler.cache.informers["nodes"]._store) == {"a-0"}
    assert bindings(kube)["p-qa"]["metadata"]["labels"] == {"selected-node": "a-0", **POOL}
    assert kube.objects[object_path(*names.PODS, "ns", "p-qa")]["metadata"]["labels"] == POOL
    scheduled = [e for e in kube.events if e["reason"] == names.REASON_SCHEDULED]
    assert [e["message"] for e in scheduled] == ["Successfully assigned pod ns/p-qa to node a-0 at node-pool pool-a"]
    assert scheduler.committer.node_pool == "pool-a"


def test_a_pool_shard_binding_directly_labels_the_pod_it_binds():
    kube = cluster()
    schedule(kube, Partition(value="pool-a"), bind_mode=DIRECT)
    assert bindings(kube) == {}
    pod = kube.objects[object_path(*names.PODS, "ns", "p-qa")]
    assert (pod["spec"]["nodeName"], pod["metadata"]["labels"]) == ("a-0", POOL)


def test_one_scheduler_per_partition_never_shares_a_node():
    kube = cluster()
    for partition in (Partition(), Partition(value="pool-a")):
        schedule(kube, partition)
    assert {b["spec"]["podName"]: b["spec"]["selectedNode"] for b in bindings(kube).values()} == {
        "p-q": "free-0", "p-qa": "a-0"}


def test_a_bind_request_of_another_partition_is_left_alone():
    """A pool's BindRequest selects a node the default shard does not see: not deleted as stale by it."""
    kube = cluster()
    schedule(kube, Partition(value="pool-a"))
    schedule(kube, Partition())
    assert set(bindings(kube)) == {"p-qa", "p-q"}
    assert not kube.paths("DELETE")
