"""The cache keeps its domain objects across cycles: a snapshot built from a reused cache equals one a fresh
cache builds from the same stores, after sessions changed the objects and the cluster changed under them."""

from __future__ import annotations

import copy

import attrs
import pytest

from kai import testing as kt
from kai.api import TaskStatus
from kai.scheduler.cache import ClusterCache


def node(name):
    return {"metadata": {"name": name}, "status": {
        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, group="g", node_name="", phase="Pending"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": node_name, "priorityClassName": "high",
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase}}


def podgroup(name="g", queue="q", min_member=1):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"},
            "spec": {"queue": queue, "minMember": min_member, "priorityClassName": "high"}}


def queue(name="q"):
    return {"metadata": {"name": name}, "spec": {"resources": {"gpu": {"quota": 24, "limit": -1}}}}


def bind(pod_name, node_name):
    return {"metadata": {"name": pod_name, "namespace": "ns",
                         "ownerReferences": [{"kind": "Pod", "uid": f"uid-{pod_name}"}]},
            "spec": {"podName": pod_name, "selectedNode": node_name}, "status": {}}

PRIORITY = {"metadata": {"name": "high"}, "value": 1000}


def facts(snap) -> dict:
    """Everything a session starts from, as plain values (tasks and nodes compare by identity)."""
    return {"nodes": [attrs.asdict(n) for n in snap.nodes],
            "queues": {k: attrs.asdict(q) for k, q in snap.queues.items()},
            "jobs": {k: attrs.asdict(j) for k, j in snap.jobs.items()}, "job order": list(snap.jobs),
            "rejected": {k: attrs.asdict(j) for k, j in snap.rejected_jobs.items()},
            "problems": list(snap.problems), "config_maps": snap.config_maps, "topologies": snap.topologies}


class Cluster:
    """The raw objects of each store; ``load`` lists them into a cache (as a relist does)."""

    def __init__(self, **objects) -> None:
        self.objects = {name: list(items) for name, items in objects.items()}
        self.version = 1

    def load(self, cache: ClusterCache) -> ClusterCache:
        self.version += 1
        for name, informer in cache.informers.items():
            informer._replace(copy.deepcopy(self.objects.get(name, [])), str(self.version))
        return cache

    def fresh(self, now: float):
        return self.load(ClusterCache(kube=None)).snapshot(now=now).snapshot


def versioned(obj: dict, version: int) -> dict:
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def test_a_reused_snapshot_equals_a_fresh_one_after_sessions_and_cluster_changes():
    cluster = Cluster(
        nodes=[node("n1"), node("n2"), node("n3")], queues=[queue()],
        podgroups=[podgroup("a"), podgroup("b", min_member=2), podgroup("c"), podgroup("lost", queue="missing")],
        pods=[pod("a0", "a"), pod("b0", "b"), pod("b1", "b"), pod("c0", "c", node_name="n3", phase="Running"),
              pod("l0", "lost", node_name="n2", phase="Running")],
        priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    now = 100.0

    def cycle_matches_fresh():
        nonlocal now
        now += 1.0
        cycle = cluster.load(cache).snapshot(now=now)
        assert facts(cycle.snapshot) == facts(cluster.fresh(now))
        session = kt.run(cycle.snapshot)  # the session changes the snapshot's tasks and jobs
        assert session.decisions
        return cycle

    first = cycle_matches_fresh()
    assert first.snapshot.jobs["ns/a"].tasks["a0"].status is TaskStatus.BINDING  # changed by the session
    # nothing changed: the same cycle again, rewound by the next session
    again = cache.snapshot(now=now + 0.5)
    assert again is first and again.snapshot.now == now + 0.5
    again.snapshot.rewind()
    assert facts(again.snapshot) == facts(cluster.fresh(now + 0.5))

    # a pod is bound by a BindRequest, another deleted, a PodGroup edited, a node gone, a pod added
    task_c0 = first.snapshot.jobs["ns/c"].tasks["c0"]
    job_c = first.snapshot.jobs["ns/c"]
    cluster.objects["bindrequests"] = [bind("a0", "n1")]
    cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] != "b1"]
    cluster.objects["podgroups"][1] = versioned(podgroup("b", min_member=1), 5)
    cluster.objects["pods"].append(pod("a1", "a"))
    second = cycle_matches_fresh()
    assert second.snapshot is not first.snapshot
    assert second.snapshot.jobs["ns/c"].tasks["c0"] is task_c0 and second.snapshot.jobs["ns/c"] is job_c
    assert second.snapshot.jobs["ns/a"].tasks["a0"].status is TaskStatus.BINDING

    cluster.objects["nodes"] = [n for n in cluster.objects["nodes"] if n["metadata"]["name"] != "n3"]
    cluster.objects["podgroups"][0] = versioned(podgroup("a", queue="missing"), 6)
    cluster.objects["pods"].append(pod("c1", "c"))
    cluster.objects["priorityclasses"] = []
    third = cycle_matches_fresh()
    assert {p.reason for p in third.snapshot.problems} >= {"QueueDoesNotExist", "NodeNotFound"}


def test_a_task_turning_stuck_in_releasing_is_not_served_from_the_last_cycle():
    deleting = pod("p", node_name="n1", phase="Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cluster = Cluster(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[deleting])
    cache = cluster.load(ClusterCache(kube=None))
    deleted = 1767225600.0
    first = cache.snapshot(now=deleted + 1)
    assert cache.snapshot(now=deleted + 2) is first
    stuck = cache.snapshot(now=deleted + 121).snapshot
    assert stuck.jobs["ns/g"].tasks["p"].status is TaskStatus.STUCK_IN_RELEASING


def test_an_assumed_binding_rebuilds_the_cycle():
    cluster = Cluster(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[pod("p")])
    cache = cluster.load(ClusterCache(kube=None))
    first = cache.snapshot(now=1.0)
    cache.assume_bound(cache.informers["pods"].get("ns/p"), "n1")
    second = cache.snapshot(now=2.0)
    assert second is not first
    assert second.snapshot.jobs["ns/g"].tasks["p"].status is TaskStatus.BINDING


def test_a_podgroup_s_records_as_the_scheduler_wrote_them_before_the_watch_shows_them():
    from kai.kube.views import podgroup_view

    cluster = Cluster(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup()], pods=[pod("p", node_name="n1")])
    cache = cluster.load(ClusterCache(kube=None))
    first = cache.snapshot(now=1.0)
    assert first.snapshot.jobs["ns/g"].last_start is None
    written = podgroup()
    written["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": "2026-01-01T00:00:00Z"}
    cache.annotated(podgroup_view(written))  # the API server's answer; the watch has not shown it yet
    second = cache.snapshot(now=2.0)
    assert second is not first and second.snapshot.jobs["ns/g"].last_start == 1767225600.0
    assert second.podgroups["ns/g"].last_start == 1767225600.0  # the committer does not write it again
    # the watch shows the write: the assumption is dropped and the store's own view serves
    cache.informers["podgroups"]._apply({"type": "MODIFIED", "object": versioned(written, 9)})
    third = cache.snapshot(now=3.0)
    assert third.snapshot.jobs["ns/g"].last_start == 1767225600.0 and not cache._annotated
    # another write the watch never shows holds only until the assumption ends
    later = copy.deepcopy(written)
    later["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"] = "2026-01-01T01:00:00Z"
    cache.annotated(podgroup_view(later))
    assert cache.snapshot(now=4.0).snapshot.jobs["ns/g"].last_start == 1767229200.0
    cache._annotated["ns/g"] = (cache._annotated["ns/g"][0], 0.0)  # expired (ASSUME_TTL after the write)
    cache.informers["pods"]._apply({"type": "MODIFIED", "object": versioned(pod("p", node_name="n1",
                                                                                 phase="Running"), 10)})
    assert cache.snapshot(now=5.0).snapshot.jobs["ns/g"].last_start == 1767225600.0


def accounting(session) -> dict:
    """Each node's Node, amounts and placed tasks as a session opened them (change counts only grow, from
    whatever the accounting taken over had)."""
    a = session.arrays
    return {n.name: ([getattr(a, f)[n.index] for f in ("alloc_cpu", "alloc_mem", "alloc_gpu", "idle_cpu", "idle_mem",
                                                         "idle_gpu", "idle_pods", "rel_cpu", "rel_mem", "rel_gpu",
                                                         "rel_pods")],
                     a.idle_scalars[n.index], a.rel_scalars[n.index], n.node.allocatable, n.node.max_pods,
                     [(t.uid, t.status) for t in n.tasks.values()], sorted(n.gpu_groups))
            for n in session.nodes}


def test_what_is_worked_out_from_the_nodes_is_taken_over_while_they_are_the_very_same(monkeypatch):
    from kai.framework import Session, nodeselect, usage

    cluster = Cluster(nodes=[node("n1"), node("n2")], queues=[queue()], podgroups=[podgroup("a"), podgroup("b")],
                      pods=[pod("a0", "a")], priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    worked_out = []

    def counted(name, work):
        return lambda *args: (worked_out.append(name), work(*args))[1]

    monkeypatch.setattr(usage, "_capacity", counted("_capacity", usage._capacity))
    monkeypatch.setattr(nodeselect, "node_layout", counted("node_layout", nodeselect.node_layout))
    plugins = kt.plugin_manager()

    def cycle(now):
        session = Session(cluster.load(cache).snapshot(now=now).snapshot, plugins).open()
        session.run_actions()
        session.close()
        return session

    assert cycle(1.0).decisions
    assert sorted(worked_out) == ["_capacity", "node_layout"]
    cluster.objects["pods"].append(pod("b0", "b"))  # a pod arrives: the nodes stay the same objects
    second = cycle(2.0)
    assert second.decisions and sorted(worked_out) == ["_capacity", "node_layout"]
    bigger = node("n2")
    bigger["status"]["allocatable"]["nvidia.com/gpu"] = "16"
    cluster.objects["nodes"][1] = versioned(bigger, 9)
    cluster.objects["pods"].append(pod("b1", "b"))
    third = cycle(3.0)
    assert sorted(worked_out) == ["_capacity", "_capacity", "node_layout", "node_layout"]
    assert usage.cluster_capacity(third)[2] == usage._capacity(third)[2] > usage._capacity(second)[2]


def test_a_snapshot_takes_the_node_accounting_over_only_for_nodes_alike_in_the_one_before(monkeypatch):
    from kai.framework import Session
    from kai.framework.nodes import NodeInfo

    cluster = Cluster(
        nodes=[node("n1"), node("n2"), node("n3"), node("n4")], queues=[queue()],
        podgroups=[podgroup(g) for g in ("a", "b", "c", "d", "e")],
        pods=[pod("a0", "a", "n1", "Running"), pod("b0", "b", "n2", "Running"), pod("b1", "b", "n2", "Running"),
              pod("c0", "c", "n3"), pod("d0", "d", "n4", "Running"), pod("e0", "e")],
        bindrequests=[bind("c0", "n3")], priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    added = []
    monkeypatch.setattr(NodeInfo, "add_task", lambda self, task, add=NodeInfo.add_task: (
        added.append(self.name), add(self, task))[1])
    now = 100.0
    plugins = kt.plugin_manager(actions=("allocate", "stalegangeviction"))

    def opened():
        nonlocal now
        now += 1.0
        cycle = cluster.load(cache).snapshot(now=now)
        added.clear()
        session = Session(cycle.snapshot, plugins)
        carried_added = list(added)
        fresh = Session(cluster.fresh(now), plugins)
        assert accounting(session) == accounting(fresh)
        session.open().run_actions()  # the session changes tasks and its own copy of the accounting
        session.close()
        assert session.decisions
        return carried_added

    assert sorted(opened()) == ["n1", "n2", "n2", "n3", "n4"]  # every placed task accounted at first
    # c0 is now bound and runs, b1 is gone, n4's allocatable changed, a pod arrives on no node
    cluster.objects["pods"][3] = versioned(pod("c0", "c", "n3", "Running"), 7)
    cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] != "b1"]
    bigger = node("n4")
    bigger["status"]["allocatable"]["cpu"] = "64"
    cluster.objects["nodes"][3] = versioned(bigger, 8)
    cluster.objects["pods"].append(pod("f0", "e"))
    assert sorted(opened()) == ["n2", "n3", "n4"]  # n1 is alike and taken over
    cache.snapshot(now=now + 0.5)  # nothing changed: the same snapshot, whose sessions copy what it kept
    added.clear()
    Session(cache.snapshot(now=now + 0.5).snapshot, plugins)
    assert added == []


def test_the_stale_gang_check_of_a_following_snapshot_looks_at_every_job_that_can_be_stale():
    from kai.framework import run_session

    def gang(name, min_member=2, stale=None):
        pg = podgroup(name, min_member=min_member)
        if stale:
            pg["metadata"]["annotations"] = {"kai.scheduler/stale-podgroup-timestamp": stale}
        return pg

    cluster = Cluster(
        nodes=[node("n1"), node("n2")], queues=[queue()],
        podgroups=[gang("s"), gang("t", 1), gang("u"), gang("v", 1, stale="2026-01-01T00:00:00Z"),
                   gang("w", stale="2020-01-01T00:00:00Z")],
        pods=[pod("s0", "s", "n1", "Running"), pod("t0", "t", "n1", "Running"), pod("u0", "u", "n2", "Running"),
              pod("u1", "u", "n2", "Running"), pod("v0", "v", "n2", "Running"), pod("w0", "w", "n1", "Running")],
        priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    plugins = kt.plugin_manager(actions=("stalegangeviction",))
    now = 1_800_000_000.0

    def outcome(snapshot):
        session = run_session(snapshot, plugins)
        return ({k: j.stale_since for k, j in snapshot.jobs.items()},
                sorted((d.kind, d.task.uid) for d in session.decisions))

    def cycle_matches_fresh():
        nonlocal now
        now += 1.0
        followed = outcome(cluster.load(cache).snapshot(now=now).snapshot)
        assert followed == outcome(cluster.fresh(now))
        return followed

    stamps, decisions = cycle_matches_fresh()
    assert stamps["ns/s"] == now and stamps["ns/v"] is None and decisions == [("evict", "ns/w0")]
    cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] != "u1"]
    stamps, _ = cycle_matches_fresh()  # s is taken over and still stale, u lost a pod and is stale now
    assert stamps["ns/s"] == now and stamps["ns/u"] == now and stamps["ns/v"] is None


def test_a_full_cycle_on_a_following_snapshot_decides_what_one_on_a_fresh_snapshot_decides():
    from kai.framework import DEFAULT_CONFIG, run_session

    def gpu_pod(name, group, gpus, node_name="", phase="Pending"):
        p = pod(name, group, node_name, phase)
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        return p

    low = {"metadata": {"name": "low"}, "value": 10}
    cluster = Cluster(
        nodes=[node("n1"), node("n2")], queues=[queue()], priorityclasses=[PRIORITY, low],
        podgroups=[podgroup("r0"), podgroup("r1"), podgroup("s", min_member=2), podgroup("big", min_member=2)],
        pods=[gpu_pod("r0", "r0", 3, "n1", "Running"), gpu_pod("r1", "r1", 3, "n2", "Running"),
              gpu_pod("s0", "s", 2, "n1", "Running"), gpu_pod("b0", "big", 6), gpu_pod("b1", "big", 6)])
    for pg in cluster.objects["podgroups"][:2]:
        pg["spec"]["priorityClassName"] = "low"
    cache = cluster.load(ClusterCache(kube=None))
    plugins = kt.plugin_manager(actions=DEFAULT_CONFIG.actions)
    now = 1_800_000_000.0

    def outcome(snapshot):
        session = run_session(snapshot, plugins)
        return (sorted((d.kind, d.task.uid, d.node) for d in session.decisions),
                {k: (j.stale_since, j.last_start) for k, j in snapshot.jobs.items()})

    decided = []
    for change in range(3):
        now += 1.0
        followed = outcome(cluster.load(cache).snapshot(now=now).snapshot)
        assert followed == outcome(cluster.fresh(now))
        decided += followed[0]
        if change == 0:  # the low-priority pods are gone, another arrives; big stays as it was
            cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] not in ("r0",)]
            cluster.objects["pods"].append(gpu_pod("r2", "r0", 4, "n1", "Running"))
        elif change == 1:
            cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] != "s0"]
    assert decided


def test_a_job_found_whole_is_checked_again_when_the_nodes_change():
    cluster = Cluster(nodes=[node("n1"), node("n2")], queues=[queue()], podgroups=[podgroup("a"), podgroup("b")],
                      pods=[pod("a0", "a", "n2", "Running"), pod("b0", "b", "n1", "Running")],
                      priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    first = cache.snapshot(now=1.0).snapshot
    assert set(first.whole) == {"ns/a", "ns/b"} and not first.problems
    cluster.objects["podgroups"].append(podgroup("c"))  # a new snapshot, the nodes the same: a and b not checked
    second = cluster.load(cache).snapshot(now=2.0).snapshot
    assert second.jobs["ns/a"] is first.jobs["ns/a"] and facts(second) == facts(cluster.fresh(2.0))
    cluster.objects["nodes"] = [node("n1")]  # a's pod now runs on a node that does not exist
    third = cluster.load(cache).snapshot(now=3.0).snapshot
    assert third.jobs["ns/a"] is first.jobs["ns/a"] and facts(third) == facts(cluster.fresh(3.0))
    assert [(p.name, p.reason) for p in third.problems] == [("ns/a0", "NodeNotFound")]
    assert set(third.whole) == {"ns/b", "ns/c"}


def shares_of(session) -> dict:
    return {name: (qs.allocated, qs.allocated_np, qs.request, qs.fair_share)
            for name, qs in session.plugins.plugin("proportion").shares.items()}


def test_proportion_counts_only_the_jobs_that_changed_since_the_snapshot_before():
    from kai.framework import Session
    from kai.plugins.proportion.shares import MEMO

    def gpu_pod(name, group, gpus, node_name="", phase="Pending", fraction=None):
        p = pod(name, group, node_name, phase)
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        if fraction:
            del p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            p["metadata"]["annotations"]["gpu-fraction"] = fraction
        return p

    parent = queue("dept")
    queues = [parent] + [queue(f"q{i}") for i in range(2)]
    for q in queues[1:]:
        q["spec"]["parentQueue"] = "dept"
    cluster = Cluster(
        nodes=[node("n1"), node("n2")], queues=queues, priorityclasses=[PRIORITY],
        podgroups=[podgroup("a", "q0"), podgroup("b", "q1", min_member=2), podgroup("c", "q1")],
        pods=[gpu_pod("a0", "a", 2, "n1", "Running"), gpu_pod("b0", "b", 1, "n2", "Running"),
              gpu_pod("b1", "b", 1), gpu_pod("c0", "c", 3)])
    cache = cluster.load(ClusterCache(kube=None))
    plugins = kt.plugin_manager()
    counted = []
    now = 100.0

    def opened():
        nonlocal now
        now += 1.0
        snapshot = cluster.load(cache).snapshot(now=now).snapshot
        session = Session(snapshot, plugins).open()
        assert shares_of(session) == shares_of(Session(cluster.fresh(now), plugins).open())
        counted.append(snapshot.memo.get(MEMO))
        session.run_actions()
        session.close()

    opened()
    cluster.objects["pods"][2] = versioned(gpu_pod("b1", "b", 1, "n2", "Running"), 5)  # b's second pod runs
    cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] != "c0"]  # c waits no more
    cluster.objects["podgroups"].append(podgroup("d", "q0"))
    cluster.objects["pods"].append(gpu_pod("d0", "d", 1))
    opened()
    assert counted[1].jobs["ns/a"] is counted[0].jobs["ns/a"]  # a is taken over, not counted again
    cluster.objects["pods"].append(gpu_pod("d1", "d", 0, fraction="0.3"))  # not a whole amount: all counted again
    opened()
    assert counted[2].sums is None
    cluster.objects["pods"] = [p for p in cluster.objects["pods"] if p["metadata"]["name"] != "d1"]
    opened()


def test_a_pod_taken_again_as_it_was_still_needs_its_sub_group_in_the_podgroup():
    def grouped(subgroup, version):
        pg = versioned(podgroup("g"), version)
        pg["spec"]["subGroups"] = [{"name": subgroup, "minMember": 1}]
        return pg

    running = pod("p", "g", "n1", "Running")
    running["metadata"]["labels"] = {"kai.scheduler/subgroup-name": "w"}
    cluster = Cluster(nodes=[node("n1")], queues=[queue()], podgroups=[grouped("w", 1)], pods=[running],
                      priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    first = cache.snapshot(now=1.0).snapshot
    assert list(first.jobs["ns/g"].tasks) == ["p"]
    cluster.objects["podgroups"] = [grouped("x", 2)]  # the pod's view is the same, its sub-group is gone
    second = cluster.load(cache).snapshot(now=2.0).snapshot
    assert facts(second) == facts(cluster.fresh(2.0))
    assert [p.reason for p in second.problems] == ["UnknownSubGroup"]


@pytest.mark.parametrize("seed", [2, 3, 7, 12])
def test_a_cache_following_random_changes_builds_what_a_fresh_cache_builds(seed):
    """Pods, BindRequests, PodGroups, nodes and assumed writes change at random between cycles; each cycle of a
    cache that goes only over what changed equals a fresh cache's cycle of the same stores and assumptions."""
    import random
    from collections import Counter

    from kai.framework import DEFAULT_CONFIG, Session
    from kai.framework.asbuilt import pending_jobs, task_statuses
    from kai.framework.nodes import place_tasks
    from kai.framework.reasons import pending_tasks
    from kai.scheduler.visibility import build_view

    rng = random.Random(seed)
    groups = [f"g{i}" for i in range(6)]
    cluster = Cluster(nodes=[node(f"n{i}") for i in range(4)], queues=[queue()], priorityclasses=[PRIORITY],
                      podgroups=[podgroup(g, min_member=1 + i % 2) for i, g in enumerate(groups)], pods=[],
                      bindrequests=[])
    cache = cluster.load(ClusterCache(kube=None))
    version, now, serial = 10, 1_800_000_000.0, 0
    assumed: dict[str, str] = {}

    def edit(kind, name, change):
        nonlocal version
        for i, obj in enumerate(cluster.objects[kind]):
            if obj["metadata"]["name"] == name:
                version += 1
                cluster.objects[kind][i] = versioned(change(copy.deepcopy(obj)), version)

    def drop(kind, name):
        cluster.objects[kind] = [o for o in cluster.objects[kind] if o["metadata"]["name"] != name]

    def names_of(kind):
        return [o["metadata"]["name"] for o in cluster.objects[kind]]

    def moves():
        nonlocal serial, version
        pods, nodes = names_of("pods"), names_of("nodes") + ["gone"]
        move = rng.randrange(10)
        if move <= 2 or not pods:
            serial += 1
            new = pod(f"p{serial}", rng.choice(groups + ["nogroup"]))
            if rng.random() < 0.2:  # a host port: the ports predicate follows the session's placements
                new["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
            if rng.random() < 0.2:  # a preferred anti-affinity to the other pods: podaffinity scores nodes
                new["spec"]["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                       "labelSelector": {}}}]}}
            cluster.objects["pods"].append(new)
        elif move == 3:
            name, version = rng.choice(pods), version + 1
            cluster.objects["bindrequests"] = [b for b in cluster.objects["bindrequests"]
                                               if b["spec"]["podName"] != name]
            cluster.objects["bindrequests"].append(versioned(bind(name, rng.choice(nodes)), version))
        elif move == 4:
            edit("pods", rng.choice(pods), lambda p: {**p, "spec": {**p["spec"], "nodeName": rng.choice(nodes)},
                                                      "status": {"phase": rng.choice(["Pending", "Running"])}})
        elif move == 5:
            name = rng.choice(pods)
            drop("pods", name)
            if rng.random() < 0.5:  # the same name again, a new pod
                serial, version = serial + 1, version + 1
                again = versioned(pod(name, rng.choice(groups)), version)
                again["metadata"]["uid"] = f"uid-{name}-{serial}"
                cluster.objects["pods"].append(again)
        elif move == 6 and cluster.objects["bindrequests"]:
            drop("bindrequests", rng.choice(names_of("bindrequests")))
        elif move == 7:
            name = rng.choice(groups)
            if name in names_of("podgroups"):
                if rng.random() < 0.5:
                    drop("podgroups", name)
                else:
                    edit("podgroups", name, lambda g: {**g, "spec": {**g["spec"], "minMember": rng.randint(1, 3)}})
            else:
                cluster.objects["podgroups"].append(versioned(podgroup(name), version))
        elif move == 8:
            name = rng.choice(names_of("nodes") + ["n9"])
            if name in names_of("nodes") and len(names_of("nodes")) > 1:
                drop("nodes", name)
            elif name not in names_of("nodes"):
                cluster.objects["nodes"].append(node(name))
        else:
            edit("pods", rng.choice(pods), lambda p: {**p, "metadata": {
                **p["metadata"], "annotations": {"pod-group-name": rng.choice(groups)}}})

    def assume(target: ClusterCache, held: dict[str, str]):
        for key, node_name in held.items():
            view = target.informers["pods"].get(key)
            if view is not None:
                target.assume_bound(view, node_name)

    plugins = kt.plugin_manager(actions=DEFAULT_CONFIG.actions)

    def decided(snapshot):
        session = Session(snapshot, plugins)
        # the tasks on each node in the order a session that takes nothing over puts them (the fresh cache's
        # store may list pods and PodGroups in another order)
        assert [list(n.tasks) for n in session.nodes] == [list(n.tasks) for n in place_tasks(snapshot.nodes,
                                                                                                snapshot.jobs)[1]]
        placed = {name: (*rest, sorted(tasks), groups) for name, (*rest, tasks, groups) in accounting(session).items()}
        session.open().run_actions()
        # the visibility API's pending jobs, looked for among those changed or pending as built: every pending job
        assert [job.uid for job in build_view(session).pending] == [
            job.uid for job in session.jobs.values() if pending_tasks(job)]
        session.close()
        tasks = [t for job in session.jobs.values() for t in job.tasks.values()]  # counted as the metrics count
        assert task_statuses(session) == Counter(t.status for t in tasks)
        assert pending_jobs(session) == sum(job.has_pending() for job in session.jobs.values())
        return (placed, sorted((d.kind, d.task.uid, d.node) for d in session.decisions),
                {k: (j.stale_since, j.last_start) for k, j in snapshot.jobs.items()})

    for step in range(60):
        for _ in range(rng.randint(0, 4)):
            moves()
        now += 1.0
        if rng.random() < 0.3:  # the committer's writes: some pending pods assumed bound, some forgotten
            for key in list(assumed):
                if rng.random() < 0.5:
                    view = cache.informers["pods"].get(key)
                    del assumed[key]
                    if view is not None:
                        cache.forget(view)
            pending = [p.key for p in cache.informers["pods"].list() if not p.node_name]
            for key in rng.sample(pending, min(2, len(pending))):
                assumed[key] = rng.choice(names_of("nodes"))
            assume(cache, assumed)
        cycle = cluster.load(cache).snapshot(now=now)
        cycle.snapshot.rewind()  # as the next session does, when the last cycle is served again
        fresh = cluster.load(ClusterCache(kube=None))
        assume(fresh, {key: a.node for key, a in cache._bound.items()})  # those the watch has not shown yet
        fresh_snapshot = fresh.snapshot(now=now).snapshot
        built, expected = facts(cycle.snapshot), facts(fresh_snapshot)
        for f in (built, expected):  # the fresh cache's store lists a pod that came back under its old name last
            f["problems"] = sorted(f["problems"], key=repr)
        assert built == expected, step
        ranks = cycle.snapshot.ranks  # the jobs' ranks, brought up to date from cycle to cycle, follow their order
        assert ranks is not None and sorted(cycle.snapshot.jobs, key=ranks.__getitem__) == list(cycle.snapshot.jobs)
        assert cycle.pods.keys() == {k for job in cycle.snapshot.jobs.values() for k in
                                     (f"ns/{t}" for t in job.tasks)} | {
            f"ns/{t}" for job in cycle.snapshot.rejected_jobs.values() for t in job.tasks}
        # sessions account the nodes alike, change the snapshot's objects (the next rewinds them) and decide alike
        assert decided(cycle.snapshot) == decided(fresh_snapshot), step


@pytest.mark.parametrize("breaks", ["kai.scheduler.build.Build._dynamic_resources",
                                    "kai.scheduler.convert.to_task", "kai.scheduler.build.build_snapshot"])
def test_a_build_that_fails_loses_nothing_the_informers_reported(monkeypatch, breaks):
    """The keys the informers reported are taken by a build that fails before, while or after it goes over the
    pods; the next cycle still sees every change."""
    cluster = Cluster(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup("a"), podgroup("b")],
                      pods=[pod("a0", "a"), pod("b0", "b")], priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    cache.snapshot(now=1.0)
    cluster.objects["pods"][0] = versioned(pod("a0", "a", "n1", "Running"), 5)  # a0 runs now
    cluster.load(cache)
    with monkeypatch.context() as patch:
        patch.setattr(breaks, lambda *a, **k: (_ for _ in ()).throw(RuntimeError("broken")))
        with pytest.raises(RuntimeError):
            cache.snapshot(now=2.0)
    again = cache.snapshot(now=3.0).snapshot
    assert again.jobs["ns/a"].tasks["a0"].status is TaskStatus.RUNNING
    assert facts(again) == facts(cluster.fresh(3.0))


def test_the_jobs_keep_the_store_s_order_when_podgroups_come_and_come_back():
    """A PodGroup added since the last cycle is looked for at the end of the store; one deleted and made again
    between two cycles moves there, and the jobs follow."""
    cluster = Cluster(nodes=[node("n1")], queues=[queue()], podgroups=[podgroup(g) for g in "abc"],
                      pods=[pod(f"{g}0", g) for g in "abc"], priorityclasses=[PRIORITY])
    cache = cluster.load(ClusterCache(kube=None))
    cache.snapshot(now=1.0)
    first, *others = cluster.objects["podgroups"]
    cluster.objects["podgroups"] = others
    cluster.load(cache)  # a is gone ...
    cluster.objects["podgroups"] += [first, podgroup("d")]
    cluster.objects["pods"].append(pod("d0", "d"))
    cycle = cluster.load(cache).snapshot(now=2.0)  # ... and back after the others, with d
    assert list(cycle.snapshot.jobs) == ["ns/b", "ns/c", "ns/a", "ns/d"] == list(cluster.fresh(2.0).jobs)
    cluster.objects["podgroups"].append(podgroup("e"))
    cluster.objects["pods"].append(pod("e0", "e"))
    cycle = cluster.load(cache).snapshot(now=3.0)
    assert list(cycle.snapshot.jobs) == ["ns/b", "ns/c", "ns/a", "ns/d", "ns/e"] == list(cluster.fresh(3.0).jobs)
    assert facts(cycle.snapshot) == facts(cluster.fresh(3.0))
