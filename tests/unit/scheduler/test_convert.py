"""Kubernetes objects to views to domain objects: KAI's rules for requests, status, priority, quotas."""

from __future__ import annotations

import pytest

from kai.api import TaskStatus
from kai.kube import views as kube_views
from kai.scheduler import convert, views
from kai.scheduler.writes import bind_request


def pod(name="p", scheduler="kai-scheduler", node="", phase="Pending", annotations=None, containers=None, **spec):
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"pod-group-name": "g", **(annotations or {})},
                     "labels": {"kai.scheduler/task-priority": "3"}},
        "spec": {"schedulerName": scheduler, "nodeName": node,
                 "containers": containers or [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                             "limits": {"nvidia.com/gpu": "2"}}}], **spec},
        "status": {"phase": phase},
    }


def test_pod_request_sums_containers_takes_max_init_and_adds_overhead():
    view = views.pod_view(pod(
        containers=[{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"resources": {"requests": {"cpu": "500m", "example.com/nic": "1"}}}],
        initContainers=[{"resources": {"requests": {"cpu": "4"}}}],
        overhead={"cpu": "100m"},
    ))
    assert view.request.cpu == pytest.approx(4100.0)
    assert view.request.memory == 2**30
    assert view.request.scalars == {"example.com/nic": 1.0}
    assert view.invalid is None
    assert view.task_priority == 3 and view.pod_group == "g" and view.created == 1767225600.0


def test_gpu_limits_and_fraction_annotations():
    assert views.pod_view(pod()).request.gpus == 2
    shared = views.pod_view(pod(annotations={"gpu-fraction": "0.5"},
                                  containers=[{"resources": {"requests": {"cpu": "1"}}}]))
    assert shared.request.gpu_fraction == 0.5 and shared.invalid is None


@pytest.mark.parametrize("annotations, named", [
    ({"gpu-fraction": "abc"}, "gpu-fraction"),
    ({"gpu-fraction": "1.5"}, "gpu-fraction"),
    ({"gpu-memory": "-3"}, "gpu-memory"),
])
def test_bad_gpu_annotation_makes_the_pod_invalid_naming_it(annotations, named):
    view = views.pod_view(pod(annotations=annotations, containers=[{"resources": {}}]))
    assert view is not None and view.invalid and named in view.invalid
    task = convert.to_task(view, "ns/g", TaskStatus.PENDING, None)
    assert task.invalid == view.invalid


def test_bad_quantity_is_reported_not_raised():
    view = views.pod_view(pod(containers=[{"resources": {"requests": {"cpu": "lots"}}}]))
    assert "cpu" in view.invalid and "'lots'" in view.invalid


def test_pods_of_other_schedulers_are_kept_only_while_they_hold_a_node():
    assert views.pod_view(pod(scheduler="default-scheduler")) is None
    assert views.pod_view(pod(scheduler="default-scheduler", node="n1", phase="Succeeded")) is None
    view = views.pod_view(pod(scheduler="default-scheduler", node="n1", phase="Running"))
    assert view.node_name == "n1" and view.scheduler == "default-scheduler"


def bind(phase="", attempts=0, limit=None, owner="uid-p", node="n1"):
    return views.bindrequest_view({
        "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [{"kind": "Pod", "uid": owner}]},
        "spec": {"podName": "p", "selectedNode": node, **({"backoffLimit": limit} if limit is not None else {})},
        "status": {"phase": phase, "failedAttempts": attempts},
    })


def test_bind_request_failed_only_when_out_of_attempts():
    assert bind("Failed").failed
    assert not bind("Failed", attempts=1, limit=3).failed
    assert bind("Failed", attempts=3, limit=3).failed
    assert not bind("Pending").failed


@pytest.mark.parametrize("phase, node, deleting, gated, with_bind, expected", [
    ("Running", "n1", False, False, False, (TaskStatus.RUNNING, "n1")),
    ("Running", "n1", True, False, False, (TaskStatus.RELEASING, "n1")),
    ("Pending", "n1", False, False, True, (TaskStatus.BOUND, "n1")),
    ("Pending", "", False, False, True, (TaskStatus.BINDING, "n1")),
    ("Pending", "", False, True, False, (TaskStatus.GATED, None)),
    ("Pending", "", False, False, False, (TaskStatus.PENDING, None)),
    ("Pending", "", True, False, False, (TaskStatus.DELETED, None)),
    ("Succeeded", "n1", False, False, False, (TaskStatus.SUCCEEDED, "n1")),
])
def test_pod_state_follows_kai(phase, node, deleting, gated, with_bind, expected):
    raw = pod(node=node, phase=phase, **({"schedulingGates": [{"name": "x"}]} if gated else {}))
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    assert convert.pod_state(views.pod_view(raw), bind() if with_bind else None) == expected


def podgroup(**spec):
    return kube_views.podgroup_view({
        "metadata": {"name": "g", "namespace": "ns", "uid": "u",
                     "annotations": {"kai.scheduler/last-start-timestamp": "2026-01-01T00:01:00Z"}},
        "spec": {"queue": "q", "minMember": 2, **spec},
    })


def test_priority_and_preemptibility_as_kai():
    classes = {"train": 50, "build": 100, "inference": 125}
    assert kube_views.job_priority(podgroup(priorityClassName="inference"), classes, 50) == 125
    assert kube_views.job_priority(podgroup(priorityClassName="nope"), classes, 77) == 77
    job = convert.to_job(podgroup(priorityClassName="train"), 50)
    assert job.preemptible and job.pod_sets["default"].min_available == 2 and job.last_start == 1767225660.0
    assert not convert.to_job(podgroup(), 100).preemptible
    assert convert.to_job(podgroup(preemptibility="preemptible"), 125).preemptible
    assert not convert.to_job(podgroup(preemptibility="non-preemptible"), 50).preemptible


def test_subgroups_become_pod_sets_and_inner_groups():
    job = convert.to_job(podgroup(subGroups=[
        {"name": "workers", "minMember": 0},
        {"name": "w1", "minMember": 2, "parent": "workers"},
        {"name": "leader", "minMember": 1},
    ]), 50)
    assert set(job.pod_sets) == {"w1", "leader"} and set(job.subgroups) == {"workers"}
    assert job.pod_sets["w1"].parent == "workers" and job.pod_sets["w1"].min_available == 2


def test_kai_v017_podgroup_with_the_new_fields_converts():
    # KAI v0.17's two-level example (docs/developer/designs/min-subgroups) with its other new fields;
    # minSubGroup, preemptionDelay and stalenessGracePeriod are read but not honoured yet.
    view = kube_views.podgroup_view({
        "metadata": {"name": "training-job", "namespace": "ns", "uid": "u"},
        "spec": {"queue": "q", "minSubGroup": 2, "preemptionDelay": "5m", "stalenessGracePeriod": "30s",
                 "subGroups": [
                     {"name": "decode", "minSubGroup": 2},
                     {"name": "decode-leaders", "parent": "decode", "minMember": 1},
                     {"name": "decode-workers", "parent": "decode", "minMember": 4},
                     {"name": "prefill", "minSubGroup": 2},
                     {"name": "prefill-leaders", "parent": "prefill", "minMember": 1},
                     {"name": "prefill-workers", "parent": "prefill", "minMember": 4}]},
    })
    job = convert.to_job(view, 50)
    assert set(job.subgroups) == {"decode", "prefill"}
    assert {n: (s.parent, s.min_available) for n, s in job.pod_sets.items()} == {
        "decode-leaders": ("decode", 1), "decode-workers": ("decode", 4),
        "prefill-leaders": ("prefill", 1), "prefill-workers": ("prefill", 4)}
    elastic = convert.to_job(kube_views.podgroup_view({"metadata": {"name": "e", "namespace": "ns"},
                                                  "spec": {"queue": "q", "minMember": 0}}), 50)  # allowed since v0.17
    assert set(elastic.pod_sets) == {"default"} and elastic.queue == "q"


def test_queue_units_and_min_runtimes():
    q = kube_views.queue_view({
        "metadata": {"name": "team"},
        "spec": {"parentQueue": "root", "priority": 7, "preemptMinRuntime": "1h30m", "reclaimMinRuntime": "bogus",
                 "resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 2},
                               "cpu": {"quota": 8000, "limit": 16000},
                               "memory": {"quota": 1024, "limit": -1}}},
    })
    assert (q.parent, q.priority) == ("root", 7)
    assert (q.gpu.deserved, q.gpu.limit, q.gpu.over_quota_weight) == (4.0, -1.0, 2.0)
    assert (q.cpu.deserved, q.cpu.limit) == (8000.0, 16000.0)
    assert q.memory.deserved == 1024e6 and q.memory.limit == -1.0
    assert q.preempt_min_runtime == 5400.0 and q.reclaim_min_runtime is None


def test_queue_resource_types():
    q = kube_views.queue_view({"metadata": {"name": "team"}, "spec": {"resources": {}, "resourceTypes": [
        {"name": "a100", "nodeSelector": {"nvidia.com/gpu.product": "A100"},
         "gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 3}},
        {"name": "h100", "nodeSelector": {"nvidia.com/gpu.product": "H100"}},
    ]}})
    a100, h100 = q.resource_types
    assert (a100.name, a100.node_selector) == ("a100", {"nvidia.com/gpu.product": "A100"})
    assert (a100.gpu.deserved, a100.gpu.limit, a100.gpu.over_quota_weight) == (2.0, 4.0, 3.0)
    assert (h100.gpu.deserved, h100.gpu.limit, h100.gpu.over_quota_weight) == (0.0, -1.0, 1.0)
    assert a100.matches({"nvidia.com/gpu.product": "A100", "zone": "a"}) and not h100.matches({})
    assert kube_views.queue_view({"metadata": {"name": "plain"}, "spec": {}}).resource_types == ()


def test_node_view_and_foreign_usage():
    view = views.node_view({
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "40960"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4", "pods": "20"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert view.ready and view.max_pods == 20 and view.gpu_memory_mib == 40900
    foreign = views.pod_view(pod(scheduler="other", node="n1", phase="Running")).request.node_resources()
    node = convert.to_node(view, foreign, 1)
    assert node.allocatable.gpu == 2 and node.allocatable.cpu == 7500 and node.max_pods == 19
    assert view.allocatable.gpu == 4  # the view is not changed
    bad = views.node_view({"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "x"}}})
    assert bad.invalid and "cpu" in bad.invalid


def test_bind_request_has_kais_shape():
    view = views.pod_view(pod())
    task = convert.to_task(view, "ns/g", TaskStatus.PENDING, None)
    body = bind_request(view, task, "n1", (), 0)
    assert body["metadata"]["name"] == "p" and body["metadata"]["labels"] == {"selected-node": "n1"}
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p"}]
    assert body["spec"] == {"podName": "p", "selectedNode": "n1", "receivedResourceType": "Regular",
                            "receivedGPU": {"count": 2, "portion": "1.00"}}
    shared = views.pod_view(pod(annotations={"gpu-memory": "10000"}, containers=[{"resources": {}}]))
    spec = bind_request(shared, convert.to_task(shared, "ns/g", TaskStatus.PENDING, None), "n1", ("g1",),
                        40000)["spec"]
    assert spec["receivedResourceType"] == "Fraction" and spec["receivedGPU"] == {"count": 1, "portion": "0.25"}
    assert spec["selectedGPUGroups"] == ["g1"]


def test_gpu_groups_from_pod_labels_or_the_bind_request():
    raw = pod()
    raw["metadata"]["labels"].update({"runai-gpu-group": "a", "runai-gpu-group/b": "b"})
    assert views.pod_view(raw).gpu_groups == ("a", "b")
    br = bind()
    assert br.gpu_groups == ()
    plain = views.pod_view(pod())
    assert convert.to_task(plain, "ns/g", TaskStatus.BINDING, "n1", ("x",)).gpu_groups == ("x",)


def test_go_duration():
    assert kube_views.go_duration("90s") == 90.0
    assert kube_views.go_duration("1h2m3.5s") == 3723.5
    assert kube_views.go_duration("5x") is None and kube_views.go_duration("") is None


def test_topology_levels_widest_first():
    topo = views.topology_view({"metadata": {"name": "dc"},
                                  "spec": {"levels": [{"nodeLabel": "zone"}, {"nodeLabel": "rack"}]}})
    assert (topo.name, topo.levels) == ("dc", ("zone", "rack"))


def test_preemption_delay_grace_period_and_last_eviction_come_from_the_podgroup():
    pg = kube_views.podgroup_view({
        "metadata": {"name": "g", "namespace": "ns", "uid": "u",
                     "annotations": {"kai.scheduler/last-eviction-timestamp": "2026-01-01T00:02:00Z"}},
        "spec": {"queue": "q", "preemptionDelay": "5m", "stalenessGracePeriod": "-1s"},
    })
    job = convert.to_job(pg, 50)
    assert (job.preemption_delay, job.staleness_grace_period, job.last_eviction) == (300.0, -1.0, 1767225720.0)
    assert pg.invalid == ""


def test_a_malformed_duration_is_ignored_and_named():
    pg = podgroup(preemptionDelay="soon")
    assert convert.to_job(pg, 50).preemption_delay is None
    assert "spec.preemptionDelay" in pg.invalid and "'soon'" in pg.invalid


def test_a_running_pod_deleting_longer_than_the_threshold_is_stuck_in_releasing():
    raw = pod(node="n1", phase="Running")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleted = views.pod_view(raw).deletion
    view = views.pod_view(raw)
    assert convert.pod_state(view, None, now=deleted + 120.0) == (TaskStatus.RELEASING, "n1")
    assert convert.pod_state(view, None, now=deleted + 121.0) == (TaskStatus.STUCK_IN_RELEASING, "n1")
    assert convert.pod_state(view, None, now=deleted + 31.0, stuck_after=30.0) == (TaskStatus.STUCK_IN_RELEASING, "n1")


def test_min_subgroup_of_the_root_and_of_subgroups():
    job = convert.to_job(podgroup(minSubGroup=1, subGroups=[
        {"name": "replicas", "minSubGroup": 2},
        {"name": "r1", "minMember": 2, "parent": "replicas"},
        {"name": "r2", "minMember": 2, "parent": "replicas"},
        {"name": "r3", "minMember": 2, "parent": "replicas"},
        {"name": "router", "minMember": 1},
    ]), 50)
    assert job.min_subgroup == 1 and job.subgroups["replicas"].min_subgroup == 2
    assert job.required_members(None) == 1 and job.required_members("replicas") == 2
    assert convert.to_job(podgroup(), 50).min_subgroup is None


def test_topology_levels_keep_their_aliases():
    topology = views.topology_view({"metadata": {"name": "dc"}, "spec": {"levels": [
        {"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"}, {"nodeLabel": "example.com/rack"}]}})
    assert topology.levels == ("topology.kubernetes.io/zone", "example.com/rack")
    assert topology.level("zone") == "topology.kubernetes.io/zone" and topology.level("example.com/rack") == (
        "example.com/rack")


@pytest.mark.parametrize("where", ["spec", "label"])
def test_a_semi_preemptible_podgroup_is_preemptible_above_its_minimum(where):
    raw = {"metadata": {"name": "g", "namespace": "ns", "uid": "u"}, "spec": {"queue": "q", "minMember": 2}}
    if where == "spec":
        raw["spec"]["preemptibility"] = "semi-preemptible"
    else:
        raw["metadata"]["labels"] = {"kai.scheduler/preemptibility": "semi-preemptible"}
    job = convert.to_job(kube_views.podgroup_view(raw), 150)
    assert (job.preemptible, job.semi_preemptible) == (True, True)
    assert not convert.to_job(kube_views.podgroup_view({**raw, "metadata": {"name": "g"}, "spec": {"queue": "q"}}),
                              150).semi_preemptible
