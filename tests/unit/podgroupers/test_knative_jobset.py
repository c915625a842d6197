"""Knative Service and JobSet podgroupers."""

import pytest

from kai.api.podgroup import GroupingError
from kai.grouping.podgroups import podgroup_object
from kai.testing_podgroupers import group, obj, pod

REVISION = "serving.knative.dev/revision"


def helloworld(min_scale=None):
    # The helloworld-go sample of Knative Serving.
    service = obj("serving.knative.dev/v1", "Service", "helloworld-go", uid="ks1")
    config = obj("serving.knative.dev/v1", "Configuration", "helloworld-go", uid="kc1", owner=service)
    annotations = {"autoscaling.knative.dev/min-scale": min_scale} if min_scale else None
    revision = obj(
        "serving.knative.dev/v1", "Revision", "helloworld-go-00001", uid="kr1", owner=config, annotations=annotations
    )
    deploy = obj("apps/v1", "Deployment", "helloworld-go-00001-deployment", uid="kd1", owner=revision)
    rs = obj("apps/v1", "ReplicaSet", "helloworld-go-00001-deployment-5f8", uid="krs1", owner=deploy)
    return [service, config, revision, deploy, rs]


def knative_pod(objects, name="helloworld-go-00001-deployment-5f8-abc", **kw):
    return pod(name, owner=objects[-1], labels={REVISION: "helloworld-go-00001"}, uid=f"u-{name}", **kw)


def test_one_gang_per_revision_of_min_scale():
    objects = helloworld("3")
    metadata = group(knative_pod(objects), *objects)
    assert (metadata.name, metadata.min_available, metadata.priority_class) == (
        "pg-helloworld-go-00001-kr1",
        3,
        "inference",
    )
    assert metadata.owner.kind == "Revision"


def test_per_pod_when_gang_scheduling_is_off():
    objects = helloworld("3")
    p = knative_pod(objects)
    metadata = group(p, *objects, arguments={"knative": {"gangSchedule": False}})
    assert (metadata.name, metadata.min_available) == (f"pg-{p['metadata']['name']}-{p['metadata']['uid']}", 1)


def test_revision_grouped_per_pod_before_stays_per_pod():
    objects = helloworld()
    old = [knative_pod(objects, name=f"old-{i}", annotations={"pod-group-name": f"pg-old-{i}"}) for i in range(2)]
    metadata = group(knative_pod(objects), *objects, *old)
    assert metadata.owner.kind == "Pod"


def test_pod_without_revision_label_is_an_error():
    objects = helloworld()
    with pytest.raises(GroupingError, match="revisionName not found for knative service pod"):
        group(pod("x", owner=objects[-1]), *objects)


def jobset(startup=None, annotations=None):
    # The "simple" JobSet example: a leader job and a group of parallel workers.
    spec = {
        "replicatedJobs": [
            {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}},
        ]
    }
    if startup:
        spec["startupPolicy"] = {"startupPolicyOrder": startup}
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", "simple", uid="js1", annotations=annotations, spec=spec)


def jobset_pod(js, replicated_job, index="0"):
    job = obj("batch/v1", "Job", f"simple-{replicated_job}-{index}", uid=f"j-{replicated_job}-{index}", owner=js)
    job_labels = {"jobset.sigs.k8s.io/replicatedjob-name": replicated_job, "jobset.sigs.k8s.io/job-index": index}
    return pod(f"simple-{replicated_job}-{index}-0-x", owner=job, labels=job_labels), job


def tree(metadata):
    return [(s.name, s.parent, s.min_subgroup, s.min_available, s.pods) for s in metadata.subgroups]


def test_jobset_is_one_podgroup_with_a_parent_per_replicated_job_and_a_leaf_per_replica():
    js = jobset()
    p, job = jobset_pod(js, "workers", "1")
    metadata = group(p, js, job)
    assert (metadata.name, metadata.min_subgroup) == ("pg-simple-js1", 2)
    assert tree(metadata) == [
        ("leader", None, 1, 0, []),
        ("leader-replica-0", "leader", None, 1, []),
        ("workers", None, 2, 0, []),
        ("workers-replica-0", "workers", None, 4, []),
        ("workers-replica-1", "workers", None, 4, ["simple-workers-1-0-x"]),
    ]
    spec = podgroup_object(metadata)["spec"]
    assert spec["minSubGroup"] == 2 and "minMember" not in spec
    assert spec["subGroups"][2] == {"name": "workers", "minSubGroup": 2}
    assert spec["subGroups"][4] == {"name": "workers-replica-1", "minMember": 4, "parent": "workers"}


@pytest.mark.parametrize(
    ("startup", "annotation", "expected"),
    [("InOrder", None, 1), ("AnyOrder", None, 2), ("InOrder", "2", 2), (None, "1", 1), (None, "9", 2)],
)
def test_jobset_root_min_subgroup(startup, annotation, expected):
    js = jobset(startup, {"kai.scheduler/batch-min-member": annotation} if annotation else None)
    p, job = jobset_pod(js, "leader")
    assert group(p, js, job).min_subgroup == expected


def test_jobset_template_annotation_sets_the_replica_gang():
    js = jobset()
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"annotations": {"kai.scheduler/batch-min-member": "3"}}
    p, job = jobset_pod(js, "workers")
    assert [s.min_available for s in group(p, js, job).subgroups if s.parent == "workers"] == [3, 3]


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("jobset", "x", 'invalid kai.scheduler/batch-min-member annotation on JobSet: strconv.ParseInt: parsing "x"'),
        ("jobset", "0", "invalid kai.scheduler/batch-min-member annotation on JobSet: value 0 must be >= 1"),
        ("template", "-2", "annotation on replicatedJob template: value -2 must be >= 1"),
    ],
)
def test_jobset_invalid_min_member_annotations_are_errors(where, value, message):
    js = jobset(annotations={"kai.scheduler/batch-min-member": value} if where == "jobset" else None)
    if where == "template":
        js["spec"]["replicatedJobs"][0]["template"]["metadata"] = {
            "annotations": {"kai.scheduler/batch-min-member": value}
        }
    p, job = jobset_pod(js, "leader")
    with pytest.raises(GroupingError, match=message):
        group(p, js, job)


def test_jobset_grouped_flat_by_an_older_release_keeps_the_flat_shape():
    js = jobset("InOrder", {"kai.scheduler/batch-min-member": "2"})
    legacy = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-simple-js1-leader", "namespace": "default"},
        "spec": {"minMember": 1},
    }
    p, job = jobset_pod(js, "workers")
    metadata = group(p, js, job, legacy)
    assert (metadata.name, metadata.min_available, metadata.min_subgroup, metadata.subgroups) == (
        "pg-simple-js1-workers", 2, None, [])


def test_jobset_pod_without_replicated_job_label_is_an_error():
    js = jobset()
    with pytest.raises(GroupingError, match='missing required label "jobset.sigs.k8s.io/replicatedjob-name"'):
        group(pod("p", owner=js), js)


def test_jobset_pod_of_an_unknown_replica_is_an_error():
    js = jobset()
    p, job = jobset_pod(js, "workers", "5")
    with pytest.raises(GroupingError, match='leaf subgroup "workers-replica-5" not found for pod default/'):
        group(p, js, job)
