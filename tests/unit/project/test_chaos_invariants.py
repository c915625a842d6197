"""The chaos test's invariant checks (tests/support/invariants.py) catch what they are meant to, and only that."""

from __future__ import annotations

from collections import Counter

from support import invariants as inv
from support.chaos import make_plan


def pod(name, node="", phase="Running", cpu="1", gpus=0, uid=None, group=None, labels=None, annotations=None,
        conditions=()):
    resources = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    meta = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "labels": dict(labels or {}),
            "annotations": dict(annotations or {})}
    if group:
        meta["annotations"]["pod-group-name"] = group
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"resources": resources}]},
            "status": {"phase": phase, "conditions": list(conditions)}}


def node(name, cpu="4", gpus=2, pods=10):
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "nvidia.com/gpu": str(gpus), "pods": str(pods)}}}


def podgroup(name, min_member=1, conditions=()):
    return {"metadata": {"name": name}, "spec": {"minMember": min_member},
            "status": {"schedulingConditions": list(conditions)}}


def event(reason, kind, name, message="", uid=None):
    return {"reason": reason, "message": message, "involvedObject": {"kind": kind, "name": name, "uid": uid}}


def test_requests_count_limits_init_containers_and_a_pod_slot():
    p = pod("a", cpu="500m", gpus=2)
    p["spec"]["initContainers"] = [{"resources": {"requests": {"cpu": "3"}}}]
    assert inv.pod_requests(p) == {"cpu": 3, "memory": 2**30, "nvidia.com/gpu": 2, "pods": 1}


def test_a_node_is_overcommitted_by_its_bound_unfinished_pods_only():
    pods = [pod("a", "n1", cpu="3", gpus=1), pod("b", "n1", cpu="1", gpus=1), pod("done", "n1", "Succeeded", cpu="9"),
            pod("pending", "", "Pending", cpu="9")]
    assert inv.overcommitted_nodes([node("n1")], pods) == []
    pods.append(pod("c", "n1", cpu="100m", gpus=1, phase="Pending"))  # bound, not running yet: it counts
    found = inv.overcommitted_nodes([node("n1")], pods)
    assert found == ["node n1: cpu requested 4.100 > allocatable 4 by 3 pods (ns/a=3, ns/b=1, ns/c=0.100)",
                     "node n1: nvidia.com/gpu requested 3 > allocatable 2 by 3 pods (ns/a=1, ns/b=1, ns/c=1)"]


def shared(name, node, fraction, group):
    return pod(name, node, annotations={"gpu-fraction": fraction}, labels={"runai-gpu-group": group} if group else {})


def reservation(node, group):
    return pod(f"res-{group}", node, gpus=1, labels={"app": "kai-resource-reservation", "runai-gpu-group": group})


def test_shared_gpu_groups_stay_within_one_device_and_keep_their_reservation_pod():
    ok = [shared("a", "n1", "0.5", "g1"), shared("b", "n1", "0.5", "g1"), reservation("n1", "g1")]
    assert inv.shared_gpu_violations(ok, {"n1"}) == []
    assert inv.shared_gpu_violations([*ok, shared("c", "n1", "0.25", "g1")], {"n1"}) == [
        "GPU group g1 on node n1: fractions add up to 1.25 > 1"]
    assert inv.shared_gpu_violations(ok[:2], {"n1"}) == ["GPU group g1 on node n1 is in use but has no reservation pod"]
    assert inv.shared_gpu_violations(ok[:2], set()) == []  # a vanished node's reservation pods do not matter
    assert inv.shared_gpu_violations([shared("d", "n1", "0.5", None)], {"n1"}) == [
        "shared-GPU pod d bound to n1 without a GPU group label"]


def test_double_binds_are_seen_on_two_nodes_in_two_succeeded_requests_two_bound_events_or_a_mismatch():
    pods = {"u1": pod("a", "n1", uid="u1")}
    names = {"u1": "a"}
    assert inv.double_binds({"u1": {"n1"}}, {"u1": {"n1"}}, Counter({"u1": 1}), pods, names) == []
    assert inv.double_binds({"u1": {"n1", "n2"}}, {}, Counter(), pods, names) == ["pod a seen on nodes ['n1', 'n2']"]
    assert inv.double_binds({}, {"u1": {"n1", "n2"}}, Counter(), pods, names) == [
        "pod a has Succeeded BindRequests for nodes ['n1', 'n2']",
        "pod a is bound to n1, its Succeeded BindRequest says ['n1', 'n2']"]
    assert inv.double_binds({}, {"u1": {"n3"}}, Counter(), pods, names) == [
        "pod a is bound to n1, its Succeeded BindRequest says ['n3']"]
    assert inv.double_binds({}, {}, Counter({"u1": 2}), pods, names) == ["pod a has 2 Bound events"]


def test_bound_events_are_counted_per_pod_uid_with_their_count():
    events = [event("Bound", "Pod", "a", uid="u1"), {**event("Bound", "Pod", "a", uid="u1"), "count": 2},
              event("Scheduled", "Pod", "a", uid="u1"), event("Bound", "PodGroup", "a", uid="u1")]
    assert inv.bound_event_counts(events) == Counter({"u1": 3})


def test_evicted_pods_are_read_from_kai_evict_messages():
    events = [event("Evict", "PodGroup", "g", "Pod ns/a was preempted by higher priority workload ns/g2"),
              event("Evict", "PodGroup", "g", "Workload doesn't meet the minimum required number of pods (2), "
                                              "evicting remaining pod: ns/b"),
              event("Unschedulable", "PodGroup", "g", "Pod ns/c was not scheduled")]
    assert inv.evicted_pods(events) == {"ns/a", "ns/b"}


def test_every_pod_is_running_pending_with_a_reason_on_a_vanished_node_or_evicted_else_lost():
    created = {f"u-{n}": f"ns/{n}" for n in ("run", "why", "cond", "grp", "ghost", "gone", "silent", "stuck",
                                               "lost", "logged")}
    pods = {
        "u-run": pod("run", "n1", uid="u-run"),
        "u-why": pod("why", phase="Pending", uid="u-why"),
        "u-cond": pod("cond", phase="Pending", uid="u-cond",
                      conditions=[{"type": "PodScheduled", "status": "False"}]),
        "u-grp": pod("grp", phase="Pending", uid="u-grp", group="pg"),
        "u-ghost": pod("ghost", "n9", uid="u-ghost"),
        "u-silent": pod("silent", phase="Pending", uid="u-silent", group="quiet"),
        "u-stuck": pod("stuck", "n1", phase="Pending", uid="u-stuck"),
    }
    podgroups = {"pg": podgroup("pg", conditions=[{"type": "UnschedulableOnNodePool"}]), "quiet": podgroup("quiet")}
    events = [event("Unschedulable", "Pod", "why"), event("Evict", "PodGroup", "x", "Pod ns/gone was preempted")]
    counts, lost = inv.account_pods(created, pods, podgroups, events, {"n1"}, evicted_elsewhere={"ns/logged"})
    assert counts == Counter({"pending": 3, "evicted": 2, "running": 1, "on a vanished node": 1})
    assert lost == ["pod ns/lost is gone and no eviction names it",
                    "pod ns/silent is pending without an event or condition saying why",
                    "pod ns/stuck is bound to n1 but Pending"]
    removed = inv.account_pods(created, pods, podgroups, events, {"n1"}, seen_on={"u-lost": {"n9"}})
    assert "pod ns/lost is gone and no eviction names it" not in removed[1]
    assert removed[0]["removed with a vanished node"] == 1
    events.append(event("NotReady", "PodGroup", "quiet"))
    assert "pod ns/silent" not in " ".join(inv.account_pods(created, pods, podgroups, events, {"n1"})[1])


def test_a_gang_is_bound_whole_or_not_at_all():
    groups = {"whole": podgroup("whole", 2), "none": podgroup("none", 2), "part": podgroup("part", 3)}
    pods = [pod("w0", "n1", group="whole"), pod("w1", "n1", group="whole"), pod("n0", group="none", phase="Pending"),
            pod("p0", "n1", group="part"), pod("p1", group="part", phase="Pending"),
            pod("p2", "n1", group="part", phase="Failed")]
    assert inv.partial_gangs(groups, pods, {"n1"}) == ["PodGroup part: 1 of minMember 3 pods bound"]
    # a gang whose pod the garbage collector removed from a vanished node is not judged either
    assert inv.partial_gangs(groups, pods, {"n1"}, removed={"part"}) == []
    # a pod left on a vanished node stays bound: its gang is not judged
    groups["ghost"] = podgroup("ghost", 2)
    pods.append(pod("g0", "n9", group="ghost"))
    assert inv.partial_gangs(groups, pods, {"n1"}) == ["PodGroup part: 1 of minMember 3 pods bound"]
    assert inv.touching_vanished_nodes(pods, {"n1"}) == {"ghost"}


def test_a_bind_request_is_finished_when_succeeded_or_failed():
    requests = [{"metadata": {"name": n}, "spec": {"selectedNode": "n1"}, "status": s} for n, s in
                (("ok", {"phase": "Succeeded"}), ("no", {"phase": "Failed"}), ("new", {}))]
    assert inv.unfinished_bind_requests(requests) == ["BindRequest new for node n1 is without a phase"]


def test_the_plan_is_decided_by_the_seed_alone():
    queues = ["a", "b", "c"]
    plan = make_plan(7, queues, nodes=8)
    assert plan == make_plan(7, queues, nodes=8) != make_plan(8, queues, nodes=8)
    assert 200 <= plan.pods < 205
    assert Counter(f.kind for f in plan.faults) == {"kill scheduler": 3, "kill binder": 2, "kill podgrouper": 1,
                                                   "restart kube-apiserver": 1, "delete node": 2}
    times = [f.at for f in plan.faults]
    assert times == sorted(times) and times[0] >= 3 and times[-1] < 35
    assert {j.min_member > 0 for j in plan.jobs} == {True, False} and any(j.fraction for j in plan.jobs)


def test_a_plan_puts_some_bare_gpu_pods_under_service_budgets_and_overruns_are_caught():
    plan = make_plan(7, ["a", "b", "c"], 8)
    assert plan.budgets and all(j.min_member == 0 and j.gpus and j.pin is None for j in plan.jobs if j.service)
    assert [(j.name, j.at) for j in plan.jobs] == [(j.name, j.at) for j in make_plan(7, ["a", "b", "c"], 8).jobs]
    service = next(iter(plan.budgets))
    members = [f"ns/{j.name}" for j in plan.jobs if j.service == service]
    allowed = len(members) - plan.budgets[service]
    assert inv.budget_overruns(plan, "ns", set(members[:allowed])) == []
    assert inv.budget_overruns(plan, "ns", set(members)) == [
        f"service {service}: {len(members)} pods evicted, its budget allows {allowed} at most"]
