"""Knative Service and JobSet podgroupers."""

import pytest

from kai.api.podgroup import GroupingError
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
    metadata = group(p, *objects, args={"knative": {"gangSchedule": False}})
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


def jobset(startup=None):
    # The "simple" JobSet example: a leader job and a group of parallel workers.
    spec = {
        "replicatedJobs": [
            {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}},
        ]
    }
    if startup:
        spec["startupPolicy"] = {"startupPolicyOrder": startup}
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", "simple", uid="js1", spec=spec)


def jobset_pod(js, replicated_job):
    job = obj("batch/v1", "Job", f"simple-{replicated_job}-0", uid=f"j-{replicated_job}", owner=js)
    return pod(
        f"simple-{replicated_job}-0-0-x", owner=job, labels={"jobset.sigs.k8s.io/replicatedjob-name": replicated_job}
    ), job


def test_jobset_one_gang_per_replicated_job_in_order():
    js = jobset()
    p, job = jobset_pod(js, "workers")
    metadata = group(p, js, job)
    assert (metadata.name, metadata.min_available) == ("pg-simple-js1-workers", 8)


def test_jobset_any_order_is_one_gang():
    js = jobset("AnyOrder")
    p, job = jobset_pod(js, "leader")
    metadata = group(p, js, job)
    assert (metadata.name, metadata.min_available) == ("pg-simple-js1", 9)


def test_jobset_pod_without_replicated_job_label_is_an_error():
    js = jobset()
    with pytest.raises(GroupingError, match='missing required label "jobset.sigs.k8s.io/replicatedjob-name"'):
        group(pod("p", owner=js), js)
