"""KubeRay podgroupers on objects shaped like KubeRay's sample RayCluster, RayJob and RayService."""

import pytest

from kai.api.podgroup import GroupingError
from kai.testing_podgroupers import group, obj, pod, subgroup_of


def cluster_spec(workers=None):
    head = {
        "rayStartParams": {"dashboard-host": "0.0.0.0"},
        "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.9.0"}]}},
    }
    if workers is None:
        workers = [
            {
                "groupName": "small-group",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 10,
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0"}]}},
            }
        ]
    return {"rayVersion": "2.9.0", "headGroupSpec": head, "workerGroupSpecs": workers}


def ray_pod(name, owner, group_name):
    return pod(name, owner=owner, labels={"ray.io/group": group_name})


def test_raycluster_head_and_worker_group():
    cluster = obj("ray.io/v1", "RayCluster", "raycluster-complete", uid="rc1", spec=cluster_spec())
    head = ray_pod("raycluster-complete-head-x", cluster, "headgroup")
    metadata = group(head, cluster)
    assert (metadata.name, metadata.min_available) == ("pg-raycluster-complete-rc1", 2)
    assert [(s.name, s.min_available) for s in metadata.subgroups] == [("headgroup", 1), ("small-group", 1)]
    assert subgroup_of(metadata, head) == "headgroup"


def test_multi_host_groups_and_suspended_groups():
    workers = [
        {"groupName": "tpu", "replicas": 2, "numOfHosts": 4},
        {"replicas": 3, "minReplicas": 0, "suspended": True},
        {"replicas": 0, "minReplicas": 0},
        {"replicas": 3},
    ]
    cluster = obj("ray.io/v1alpha1", "RayCluster", "rc", uid="rc2", spec=cluster_spec(workers))
    metadata = group(ray_pod("rc-w", cluster, "worker-group-3"), cluster)
    assert metadata.min_available == 1 + 8 + 3
    assert [s.name for s in metadata.subgroups] == ["headgroup", "tpu", "worker-group-3"]


def test_min_replicas_above_replicas_is_an_error():
    cluster = obj("ray.io/v1", "RayCluster", "rc", uid="rc3", spec=cluster_spec([{"replicas": 1, "minReplicas": 2}]))
    with pytest.raises(GroupingError, match="can't be less than minReplicas"):
        group(ray_pod("rc-w", cluster, "worker-group-0"), cluster)


def test_group_topology_needs_a_topology_name():
    workers = [
        {
            "groupName": "g",
            "replicas": 2,
            "template": {"metadata": {"annotations": {"kai.scheduler/topology-required-placement": "rack"}}},
        }
    ]
    cluster = obj("ray.io/v1", "RayCluster", "rc", uid="rc4", spec=cluster_spec(workers))
    with pytest.raises(GroupingError, match="topology annotation .* is required for workerGroupSpecs.g"):
        group(ray_pod("rc-w", cluster, "g"), cluster)
    workers[0]["template"]["metadata"]["annotations"]["kai.scheduler/topology"] = "dc"
    assert group(ray_pod("rc-w", cluster, "g"), cluster).subgroups[1].topology.required_level == "rack"


def test_rayjob_groups_by_its_cluster_and_names_after_itself():
    rayjob = obj(
        "ray.io/v1",
        "RayJob",
        "rayjob-sample",
        uid="rj1",
        labels={"ray.io/priority-class-name": "inference"},
        spec={"entrypoint": "python /home/ray/samples/sample_code.py"},
        status={"rayClusterName": "rayjob-sample-raycluster-abc"},
    )
    cluster = obj(
        "ray.io/v1", "RayCluster", "rayjob-sample-raycluster-abc", uid="rc5", owner=rayjob, spec=cluster_spec()
    )
    metadata = group(ray_pod("rayjob-sample-raycluster-abc-head", cluster, "headgroup"), rayjob, cluster)
    assert (metadata.name, metadata.min_available, metadata.priority_class) == ("pg-rayjob-sample-rj1", 2, "inference")
    assert metadata.owner.kind == "RayJob"


def test_rayjob_without_cluster_yet_is_an_error():
    rayjob = obj("ray.io/v1", "RayJob", "rayjob-sample", uid="rj1", spec={})
    with pytest.raises(GroupingError, match="Please make sure that the ray-operator is up"):
        group(pod("submitter", owner=rayjob), rayjob)


def test_rayservice_prefers_the_active_cluster():
    service = obj(
        "ray.io/v1",
        "RayService",
        "rayservice-sample",
        uid="rs1",
        status={
            "activeServiceStatus": {"rayClusterName": "active"},
            "pendingServiceStatus": {"rayClusterName": "pending"},
        },
    )
    active = obj("ray.io/v1", "RayCluster", "active", uid="a", owner=service, spec=cluster_spec([]))
    pending = obj("ray.io/v1", "RayCluster", "pending", uid="p", owner=service, spec=cluster_spec())
    assert group(ray_pod("active-head", active, "headgroup"), service, active, pending).min_available == 1
    del service["status"]["activeServiceStatus"]
    assert group(ray_pod("pending-head", pending, "headgroup"), service, active, pending).min_available == 2


def test_existing_podgroup_without_subgroups_keeps_none():
    cluster = obj("ray.io/v1", "RayCluster", "old", uid="o1", spec=cluster_spec())
    existing = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-old-o1", "namespace": "default"},
        "spec": {"minMember": 2},
    }
    metadata = group(ray_pod("old-head", cluster, "headgroup"), cluster, existing)
    assert metadata.subgroups == []
