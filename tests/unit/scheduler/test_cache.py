"""The cache's snapshot from stored objects: BindRequests, assumed writes, other pods' usage, rejected jobs.

The informers' stores are filled through their list path (the transforms run as on a live list);
no API server is involved. tests/e2e/test_scheduler.py runs the same code against a real one.
"""

from __future__ import annotations

import pytest

from kai.api import TaskStatus
from kai.scheduler.cache import ClusterCache


def node(name, gpus=8):
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "conditions": [{"type": "Ready",
                                                                                       "status": "True"}]}}


def pod(name, group="g", gpus=1, node_name="", phase="Pending", scheduler="kai-scheduler", subgroup=None):
    labels = {"kai.scheduler/subgroup-name": subgroup} if subgroup else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels,
                         "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": scheduler, "nodeName": node_name,
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def podgroup(name="g", queue="q", min_member=1):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"},
            "spec": {"queue": queue, "minMember": min_member}}


def queue(name="q"):
    return {"metadata": {"name": name}, "spec": {"resources": {"gpu": {"quota": 0, "limit": -1}}}}


def bind(pod_name, node_name, phase="", owner=None, attempts=0):
    return {"metadata": {"name": pod_name, "namespace": "ns",
                         "ownerReferences": [{"kind": "Pod", "uid": owner or f"uid-{pod_name}"}]},
            "spec": {"podName": pod_name, "selectedNode": node_name},
            "status": {"phase": phase, "failedAttempts": attempts}}


def cache_with(**objects) -> ClusterCache:
    cache = ClusterCache(kube=None)
    for name, informer in cache.informers.items():
        informer._replace(objects.get(name, []), "1")
    return cache


def test_bind_requests_make_pods_binding_and_stale_ones_are_reported():
    cache = cache_with(
        nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()],
        pods=[pod("live"), pod("failed"), pod("replaced"), pod("gone-node"), pod("waiting")],
        bindrequests=[bind("live", "n1"), bind("failed", "n1", phase="Failed"),
                      bind("replaced", "n1", owner="uid-older"), bind("gone-node", "n9"), bind("no-pod", "n1")],
    )
    cycle = cache.snapshot(now=100.0)
    tasks = cycle.snapshot.jobs["ns/g"].tasks
    assert (tasks["live"].status, tasks["live"].node) == (TaskStatus.BINDING, "n1")
    assert all(tasks[n].status is TaskStatus.PENDING for n in ("failed", "replaced", "gone-node", "waiting"))
    assert sorted(b.name for b in cycle.stale_bind_requests) == ["failed", "gone-node", "no-pod", "replaced"]


def test_assumed_binding_holds_until_the_watch_shows_it_or_it_is_forgotten():
    cache = cache_with(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[pod("p")])
    view = cache.informers["pods"].get("ns/p")
    cache.assume_bound(view, "n1", ("grp",))
    task = cache.snapshot().snapshot.jobs["ns/g"].tasks["p"]
    assert (task.status, task.node, task.gpu_groups) == (TaskStatus.BINDING, "n1", ("grp",))
    cache.forget(view)
    assert cache.snapshot().snapshot.jobs["ns/g"].tasks["p"].status is TaskStatus.PENDING
    cache.informers["bindrequests"]._replace([bind("p", "n1")], "2")
    cache.assume_bound(view, "n2")  # the watch has shown the BindRequest: it wins over the assumption
    assert cache.snapshot().snapshot.jobs["ns/g"].tasks["p"].node == "n1"


def test_assumed_eviction_releases_the_pod_until_it_is_deleting():
    cache = cache_with(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()],
                       pods=[pod("p", node_name="n1", phase="Running")])
    cache.assume_evicted(cache.informers["pods"].get("ns/p"))
    assert cache.snapshot().snapshot.jobs["ns/g"].tasks["p"].status is TaskStatus.RELEASING
    deleting = pod("p", node_name="n1", phase="Running")
    deleting["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="2")
    cache.informers["pods"]._replace([deleting], "2")
    deleted = 1767225600.0
    assert cache.snapshot(now=deleted + 1).snapshot.jobs["ns/g"].tasks["p"].status is TaskStatus.RELEASING
    assert not cache._evicted  # the watch confirmed it
    stuck = cache.snapshot(now=deleted + 121).snapshot
    assert stuck.jobs["ns/g"].tasks["p"].status is TaskStatus.STUCK_IN_RELEASING


def test_same_named_podgroups_of_two_namespaces_are_two_jobs():
    # KAI after v0.17 (#2095) keys PodGroups by namespace and name; so does the cache.
    def moved(obj, ns):
        obj["metadata"]["namespace"] = ns
        return obj

    cache = cache_with(
        nodes=[node("n1")], queues=[queue()],
        podgroups=[podgroup("shared", min_member=2), moved(podgroup("shared"), "shadow")],
        pods=[pod("live-0", group="shared"), pod("live-1", group="shared"),
              moved(pod("shadow-0", group="shared", node_name="n1", phase="Running"), "shadow")],
    )
    jobs = cache.snapshot().snapshot.jobs
    assert {uid: sorted(t.name for t in j.tasks.values()) for uid, j in jobs.items()} == {
        "ns/shared": ["live-0", "live-1"], "shadow/shared": ["shadow-0"]}
    assert [[ps.min_available for ps in jobs[uid].pod_sets.values()] for uid in ("ns/shared", "shadow/shared")] == [
        [2], [1]]


def test_only_nvidia_com_gpu_counts_as_gpus_other_names_ending_in_gpu_are_extended_resources():
    # KAI after v0.17 (#2195): HAMi's nvidia.com/vgpu (80 slices on 8 GPUs) no longer counts as 80 GPUs.
    hami = node("n1")
    hami["status"]["allocatable"]["nvidia.com/vgpu"] = "80"
    cache = cache_with(nodes=[hami], queues=[queue()])
    (n,) = cache.snapshot().snapshot.nodes
    assert (n.allocatable.gpu, n.allocatable.scalars) == (8.0, {"nvidia.com/vgpu": 80.0})


def test_pods_outside_the_schedulers_jobs_take_their_node_resources():
    cache = cache_with(
        nodes=[node("n1"), node("n2")], queues=[queue()],
        podgroups=[podgroup(), podgroup("lost", queue="missing")],
        pods=[pod("other", gpus=3, node_name="n1", phase="Running", scheduler="default-scheduler"),
              pod("ungrouped", group="", gpus=1, node_name="n1", phase="Running"),
              pod("orphan", group="lost", gpus=2, node_name="n2", phase="Running")],
    )
    snap = cache.snapshot().snapshot
    gpus = {n.name: n.allocatable.gpu for n in snap.nodes}
    assert gpus == {"n1": 4.0, "n2": 6.0}  # other scheduler 3 + no PodGroup 1; unknown queue's job 2
    assert {p.reason for p in snap.problems} == {"QueueDoesNotExist"}
    assert "ns/lost" in snap.rejected_jobs


def test_pod_of_an_undefined_subgroup_is_a_problem_and_still_holds_its_node():
    group = podgroup()
    group["spec"]["subGroups"] = [{"name": "workers", "minMember": 1}]
    cache = cache_with(nodes=[node("n1")], queues=[queue()], podgroups=[group],
                       pods=[pod("stray", subgroup="nope", node_name="n1", phase="Running", gpus=2)])
    snap = cache.snapshot().snapshot
    assert [(p.kind, p.name, p.reason) for p in snap.problems] == [("task", "ns/stray", "UnknownSubGroup")]
    assert snap.jobs["ns/g"].tasks == {} and snap.nodes[0].allocatable.gpu == 6.0


def woke(cache: ClusterCache, informer: str, kind: str, raw: dict) -> bool:
    """Whether a watch event of ``informer`` (through its store, as on a live watch) woke the loop."""
    cache.changed.clear()
    cache.informers[informer]._apply({"type": kind, "object": raw})
    return cache.changed.is_set()


def test_only_changes_that_can_unblock_scheduling_wake_the_loop():
    cases = {  # what: (informer, the object before, after, whether the change wakes the loop)
        "pending pod": ("pods", pod("a", gpus=1), pod("a", gpus=2), True),
        "bound pod running": ("pods", pod("b", node_name="n1"), pod("b", node_name="n1", phase="Running"), False),
        "bound pod finished": ("pods", pod("c", node_name="n1", phase="Running"),
                               pod("c", node_name="n1", phase="Succeeded"), True),
        "bind succeeded": ("bindrequests", bind("a", "n1"), bind("a", "n1", phase="Succeeded"), False),
        "bind failed for good": ("bindrequests", bind("a", "n1"), bind("a", "n1", phase="Failed"), True),
        "podgroup": ("podgroups", podgroup(), podgroup(min_member=2), True),
        "node": ("nodes", node("n1"), node("n1", gpus=4), True),
    }
    for what, (informer, before, after, wakes) in cases.items():
        cache = cache_with(**{informer: [before]})
        assert woke(cache, informer, "MODIFIED", after) is wakes, what
        assert woke(cache, informer, "DELETED", after), what  # a deletion always may free something
        # a new object may be new work or room; a new BindRequest only takes room
        assert woke(cache, informer, "ADDED", after) is (what != "bind succeeded"), what


def test_the_schedulers_own_records_wake_no_cycle_other_changes_of_the_same_objects_do():
    started = podgroup()
    started["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": "2026-01-01T00:00:00Z",
                                          "kai.scheduler/stale-podgroup-timestamp": "2026-01-01T00:00:01Z"}
    explained = podgroup()
    explained["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                                     "reason": "Unschedulable", "message": "no room"}]}
    moved = podgroup(queue="other")
    unschedulable = pod("a")
    unschedulable["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                              "message": "0/2 nodes are available"}]
    cases = {  # what: (informer, the object before, after, whether the change wakes the loop)
        "last start and stale times written": ("podgroups", podgroup(), started, False),
        "scheduling condition written": ("podgroups", podgroup(), explained, False),
        "queue changed": ("podgroups", started, moved, True),
        "pending pod marked unschedulable": ("pods", pod("a"), unschedulable, False),
        "pending pod's request changed": ("pods", unschedulable, pod("a", gpus=2), True),
    }
    for what, (informer, before, after, wakes) in cases.items():
        cache = cache_with(**{informer: [before]})
        assert woke(cache, informer, "MODIFIED", after) is wakes, what


def test_a_pods_nominated_node_reaches_its_task():
    nominated = pod("a")
    nominated["status"]["nominatedNodeName"] = "n2"
    cache = cache_with(nodes=[node("n1"), node("n2")], pods=[nominated], podgroups=[podgroup()], queues=[queue()])
    (task,) = cache.snapshot().snapshot.jobs["ns/g"].tasks.values()
    assert task.nominated_node == "n2"


@pytest.mark.parametrize("app", ["kai-resource-reservation", "my-reservations"])
def test_a_reservation_pod_s_gpu_is_its_group_s_and_held_while_no_pod_uses_the_group(app):
    def reservation(name, node_name, group):
        obj = pod(name, group="", gpus=1, node_name=node_name, phase="Running", scheduler="default-scheduler")
        obj["metadata"].update(namespace="kai-resource-reservation", labels={"app": app, "runai-gpu-group": group})
        return obj

    shared = pod("half", node_name="n1", phase="Running", gpus=0)
    shared["metadata"]["labels"]["runai-gpu-group"] = "g1"
    shared["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    cache = cache_with(nodes=[node("n1"), node("n2")], queues=[queue()], podgroups=[podgroup()],
                       pods=[shared, reservation("r1", "n1", "g1"), reservation("r2", "n2", "g2")])
    cache.reservation_app = app
    gpus = {n.name: n.allocatable.gpu for n in cache.snapshot().snapshot.nodes}
    # g1 is used by a shared pod: its device is counted by the group; g2 is used by nobody (its pods are
    # gone, the binder has not deleted the reservation yet): the reservation still holds a whole GPU
    assert gpus == {"n1": 8.0, "n2": 7.0}
    cache.reservation_app = "someone-else"  # not known as reservations: each pod is one more whole GPU
    assert {n.name: n.allocatable.gpu for n in cache.snapshot().snapshot.nodes} == {"n1": 7.0, "n2": 7.0}


def test_config_maps_are_known_by_name_and_other_pods_hold_their_host_ports():
    other = pod("other", node_name="n1", phase="Running", scheduler="default-scheduler")
    other["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    mine = pod("mine")
    mine["spec"]["volumes"] = [{"name": "v", "configMap": {"name": "settings"}}]
    mine["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/etc/app"}]
    cache = cache_with(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[other, mine],
                       configmaps=[{"metadata": {"namespace": "ns", "name": "settings"}, "data": {"big": "x" * 1000}}])
    snap = cache.snapshot().snapshot
    assert snap.config_maps == {"ns/settings"}
    assert cache.informers["configmaps"].list() == ["ns/settings"]  # names only are kept
    (n1,) = snap.nodes
    assert [p.port for p in n1.host_ports] == [8080] and n1.capacity.gpu == 8.0
    assert snap.jobs["ns/g"].tasks["mine"].config_maps == ("settings",)


def test_restricted_node_scheduling_leaves_out_nodes_without_a_worker_role():
    gpu, cpu, plain = node("gpu"), node("cpu"), node("plain")
    gpu["metadata"]["labels"] = {"node-role.kubernetes.io/gpu-worker": "true"}
    cpu["metadata"]["labels"] = {"node-role.kubernetes.io/cpu-worker": "true"}
    cache = cache_with(nodes=[gpu, cpu, plain], queues=[queue()])
    assert {n.name for n in cache.snapshot().snapshot.nodes} == {"gpu", "cpu", "plain"}
    cache.restrict_node_scheduling = True
    assert {n.name for n in cache.snapshot().snapshot.nodes} == {"gpu", "cpu"}


def test_without_full_hierarchy_fairness_the_projects_share_one_unlimited_parent():
    """KAI's --full-hierarchy-fairness=false: a department's limit no longer bounds its projects."""
    department = {"metadata": {"name": "dept"}, "spec": {"resources": {"gpu": {"quota": 0, "limit": 0}}}}
    project = queue("team")
    project["spec"]["parentQueue"] = "dept"
    cache = cache_with(nodes=[node("n1")], queues=[department, project])
    full = cache.snapshot(now=100.0).snapshot.queues
    assert full["team"].parent == "dept" and full["dept"].gpu.limit == 0
    cache.full_hierarchy_fairness = False
    flat = cache.snapshot(now=100.0).snapshot.queues
    assert set(flat) == {"default", "team"} and flat["team"].parent == "default"
    assert (flat["default"].gpu.deserved, flat["default"].gpu.limit, flat["default"].cpu.limit) == (-1, -1, -1)


def test_storage_objects_reach_the_snapshot_only_when_a_pod_to_schedule_has_claims():
    pvc = {"metadata": {"namespace": "ns", "name": "data", "uid": "c1",
                        "annotations": {"volume.kubernetes.io/selected-node": "n1"}},
           "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Pending"}}
    pv = {"metadata": {"name": "pv1"},
          "spec": {"storageClassName": "local", "capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}},
          "status": {"phase": "Available"}}
    sc = {"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
          "volumeBindingMode": "WaitForFirstConsumer"}
    capacity = {"metadata": {"namespace": "ns", "name": "cap"}, "storageClassName": "local", "capacity": "10Gi",
                "nodeTopology": {"matchLabels": {"zone": "a"}}}
    driver = {"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": True}}
    storage = {"persistentvolumeclaims": [pvc], "persistentvolumes": [pv], "storageclasses": [sc],
               "csistoragecapacities": [capacity], "csidrivers": [driver]}
    plain = cache_with(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[pod("mine")], **storage)
    assert plain.snapshot().snapshot.storage.claims == {}
    mine = pod("mine")
    mine["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}},
                               {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]
    snap = cache_with(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[mine],
                      **storage).snapshot().snapshot
    task = snap.jobs["ns/g"].tasks["mine"]
    assert [(c.name, c.ephemeral, c.pod_uid) for c in task.claims] == [("data", False, ""),
                                                                      ("mine-scratch", True, "uid-mine")]
    claim = snap.storage.claims["ns/data"]
    assert (claim.storage_class, claim.request, claim.selected_node, claim.bound) == ("local", 2.0**30, "n1", False)
    (volume,) = snap.storage.volumes["local"]
    assert volume.capacity == 2 * 2.0**30 and volume.node_affinity[0].matches("n1", {"kubernetes.io/hostname": "n1"})
    assert snap.storage.classes["local"].binding_mode == "WaitForFirstConsumer"
    assert snap.storage.capacities[0].fits(2.0**30, {"zone": "a"}) and snap.storage.capacity_drivers == {
        "csi.example.com"}
