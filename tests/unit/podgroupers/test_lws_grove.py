"""LeaderWorkerSet and Grove (with Dynamo) podgroupers."""

import pytest

from kai.api.podgroup import GroupingError
from kai.testing_podgroupers import group, obj, pod, subgroup_of

WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"


def lws(size=4, startup=None, sub_group_policy=None):
    # The leaderworkerset-sample of the LeaderWorkerSet project: 3 groups of one leader and 3 workers.
    template = {"size": size, "leaderTemplate": {"spec": {}}, "workerTemplate": {"spec": {}}}
    if sub_group_policy:
        template["subGroupPolicy"] = sub_group_policy
    spec = {"replicas": 3, "leaderWorkerTemplate": template}
    if startup:
        spec["startupPolicy"] = startup
    return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkerset-sample", uid="l1", spec=spec)


def lws_pod(owner, group_index, worker_index, **kw):
    name = f"leaderworkerset-sample-{group_index}" + (f"-{worker_index}" if worker_index else "")
    sts = obj("apps/v1", "StatefulSet", "leaderworkerset-sample", uid="sts", owner=owner)
    return pod(name, owner=sts, labels={GROUP_INDEX: str(group_index), WORKER_INDEX: str(worker_index)}, **kw), sts


def test_one_gang_per_group_with_leader_and_workers():
    owner = lws()
    leader, sts = lws_pod(owner, 1, 0)
    metadata = group(leader, owner, sts)
    assert (metadata.name, metadata.min_available) == ("pg-leaderworkerset-sample-l1-group-1", 4)
    assert [(s.name, s.min_available) for s in metadata.subgroups] == [("leader", 1), ("workers", 3)]
    assert subgroup_of(metadata, leader) == "leader"


def test_leader_ready_waits_for_the_leader_alone():
    owner = lws(startup="LeaderReady")
    leader, sts = lws_pod(owner, 0, 0)
    assert group(leader, owner, sts).min_available == 1
    scheduled, _ = lws_pod(owner, 0, 0, spec={"nodeName": "node-1"})
    assert group(scheduled, owner, sts).min_available == 4


def test_segments_leader_worker_policy():
    owner = lws(size=5, sub_group_policy={"subGroupSize": 2})
    worker, sts = lws_pod(owner, 0, 4)
    metadata = group(worker, owner, sts)
    assert [(s.name, s.min_available, s.min_subgroup, s.parent) for s in metadata.subgroups] == [
        ("segment-0", 0, 2, None),
        ("segment-1", 2, None, None),
        ("leader", 1, None, "segment-0"),
        ("workers", 2, None, "segment-0"),
    ]
    assert subgroup_of(metadata, worker) == "segment-1"


def test_leader_excluded_needs_divisible_workers():
    owner = lws(size=4, sub_group_policy={"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"})
    worker, sts = lws_pod(owner, 0, 1)
    with pytest.raises(GroupingError, match="LeaderExcluded policy is only supported"):
        group(worker, owner, sts)


def test_lws_errors():
    for owner, message in [
        (lws(size=0), "invalid leaderWorkerTemplate.size 0"),
        (lws(startup="Eventually"), "unknown startupPolicy: Eventually"),
        (lws(sub_group_policy={"subGroupSize": 1}), "segmentSize 1 is not valid"),
    ]:
        leader, sts = lws_pod(owner, 0, 0)
        with pytest.raises(GroupingError, match=message):
            group(leader, owner, sts)
    worker, sts = lws_pod(lws(), 0, -1)
    with pytest.raises(GroupingError, match="workerIndex -1 is not valid. It must be bigger than 0"):
        group(worker, lws(), sts)
    owner = lws(size=20003, sub_group_policy={"subGroupSize": 2})
    leader, sts = lws_pod(owner, 0, 0)
    with pytest.raises(GroupingError, match="subgroups segments 10001 is greater than max allowed segmentation"):
        group(leader, owner, sts)


def grove_objects(top_labels=None):
    pcs = obj("grove.io/v1alpha1", "PodCliqueSet", "disagg", uid="pcs1", labels=top_labels)
    clique = obj("grove.io/v1alpha1", "PodClique", "disagg-0-prefill", uid="pc1", owner=pcs)
    podgang = obj(
        "scheduler.grove.io/v1alpha1",
        "PodGang",
        "disagg-0",
        uid="pg1",
        annotations={"grove.io/topology-name": "cluster"},
        spec={
            "priorityClassName": "inference",
            "topologyConstraint": {"packConstraint": {"required": "zone"}},
            "topologyConstraintGroupConfigs": [
                {
                    "name": "serving",
                    "podGroupNames": ["prefill", "decode"],
                    "topologyConstraint": {"packConstraint": {"preferred": "rack"}},
                }
            ],
            "podgroups": [
                {
                    "name": "prefill",
                    "minReplicas": 2,
                    "podReferences": [
                        {"namespace": "default", "name": "disagg-0-prefill-0"},
                        {"namespace": "default", "name": "disagg-0-prefill-1"},
                    ],
                },
                {
                    "name": "decode",
                    "minReplicas": 1,
                    "podReferences": [{"namespace": "default", "name": "disagg-0-decode-0"}],
                },
            ],
        },
    )
    p = pod("disagg-0-prefill-0", owner=clique, labels={"grove.io/podgang": "disagg-0"})
    return pcs, clique, podgang, p


def test_grove_podgang_becomes_the_podgroup():
    pcs, clique, podgang, p = grove_objects()
    metadata = group(p, pcs, clique, podgang)
    assert (metadata.name, metadata.min_available, metadata.priority_class) == ("pg-disagg-0-pg1", 3, "inference")
    assert (metadata.topology.topology, metadata.topology.required_level) == ("cluster", "zone")
    assert [(s.name, s.min_available, s.min_subgroup, s.parent) for s in metadata.subgroups] == [
        ("serving", 0, 2, None),
        ("prefill", 2, None, "serving"),
        ("decode", 1, None, "serving"),
    ]
    assert subgroup_of(metadata, p) == "prefill"


def test_grove_top_owner_preemption_delay_wins():
    pcs, clique, podgang, p = grove_objects()
    pcs["metadata"]["annotations"] = {"kai.scheduler/preemption-delay": "2m"}
    podgang["metadata"]["annotations"]["kai.scheduler/preemption-delay"] = "10s"
    assert group(p, pcs, clique, podgang).preemption_delay == 10.0  # the PodGang's own annotation comes first
    del podgang["metadata"]["annotations"]["kai.scheduler/preemption-delay"]
    assert group(p, pcs, clique, podgang).preemption_delay == 120.0


def test_grove_pod_without_podgang_label_is_an_error():
    pcs, clique, podgang, _ = grove_objects()
    with pytest.raises(GroupingError, match="label for podgang name"):
        group(pod("x", owner=clique), pcs, clique, podgang)


def test_dynamo_deployment_is_skipped_and_its_labels_reach_the_podgroup():
    dgd = obj(
        "nvidia.com/v1alpha1",
        "DynamoGraphDeployment",
        "llm",
        uid="d1",
        labels={"kai.scheduler/queue": "inference-q", "kai.scheduler/preemptibility": "non-preemptible"},
    )
    pcs, clique, podgang, p = grove_objects()
    pcs["metadata"]["ownerReferences"] = [
        {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "name": "llm", "uid": "d1"}
    ]
    metadata = group(p, dgd, pcs, clique, podgang)
    assert metadata.name == "pg-disagg-0-pg1"
    assert metadata.labels["kai.scheduler/queue"] == "inference-q"
    assert metadata.preemptibility == "non-preemptible"


@pytest.mark.parametrize("wrapper", [("run.ai/v1alpha1", "WorkloadRunner"), ("argoproj.io/v1alpha1", "Workflow")])
def test_a_wrapped_dynamo_deployment_is_skipped_in_turn(wrapper):
    # KAI after v0.17 (#2067): WorkloadRunner is a wrapper to skip, and the owner below a skipped one is
    # grouped by the podgrouper the hub finds for its kind (DynamoGraphDeployment is claimed for any version).
    outer = obj(*wrapper, "llm-runner", uid="w1", labels={"kai.scheduler/queue": "inference-q"})
    dgd = obj("nvidia.com/v1alpha1", "DynamoGraphDeployment", "llm", uid="d1", owner=outer)
    pcs, clique, podgang, p = grove_objects()
    pcs["metadata"]["ownerReferences"] = [
        {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "name": "llm", "uid": "d1"}
    ]
    metadata = group(p, outer, dgd, pcs, clique, podgang)
    assert metadata.name == "pg-disagg-0-pg1"
    assert metadata.labels["kai.scheduler/queue"] == "inference-q"
