"""Default grouping rules: name, queue, priority class, preemptibility, labels, annotations, topology."""

import json

from kai.grouping.hub import GroupingConfig
from kai.grouping.podgroups import podgroup_object
from kai.testing_podgroupers import group, obj, pod


def priority_class(name, value=100):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def statefulset(**kw):
    return obj("apps/v1", "StatefulSet", "db", uid="s1", **kw)


def test_statefulset_gets_one_podgroup_of_one():
    sts = statefulset(spec={"replicas": 3})
    metadata = group(pod("db-0", owner=sts), sts)
    assert (metadata.name, metadata.min_available, metadata.queue) == ("pg-db-s1", 1, "default-queue")
    assert metadata.owner.to_dict() == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s1"}
    assert metadata.annotations["kai.scheduler/top-owner-metadata"] == (
        "name: db\nuid: s1\ngroup: apps\nversion: v1\nkind: StatefulSet\n"
    )


def test_queue_from_project_and_node_pool():
    sts = statefulset(labels={"project": "vision"})
    p = pod("db-0", owner=sts, labels={"kai.scheduler/node-pool": "h100"})
    assert group(p, sts).queue == "vision-h100"


def test_queue_label_of_owner_wins_over_pod():
    sts = statefulset(labels={"kai.scheduler/queue": "owner-q"})
    p = pod("db-0", owner=sts, labels={"kai.scheduler/queue": "pod-q"})
    assert group(p, sts).queue == "owner-q"


def test_priority_class_must_exist():
    sts = statefulset(labels={"priorityClassName": "high"})
    p = pod("db-0", owner=sts)
    assert group(p, sts).priority_class == "train"
    assert group(p, sts, priority_class("high")).priority_class == "high"


def test_priority_class_of_nearer_owner_counts_first():
    sts = statefulset(labels={"priorityClassName": "low"})
    p = pod("db-0", owner=sts, spec={"priorityClassName": "inference"})
    assert group(p, sts, priority_class("low"), priority_class("inference")).priority_class == "low"


def test_defaults_configmap_gives_priority_and_preemptibility_per_kind():
    sts = statefulset()
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "defaults", "namespace": "kai"},
        "data": {
            "types": json.dumps(
                [
                    {
                        "typeName": "StatefulSet",
                        "group": "apps",
                        "priorityName": "build",
                        "preemptibility": "Non-Preemptible",
                    }
                ]
            )
        },
    }
    config = GroupingConfig(defaults_configmap=("kai", "defaults"))
    metadata = group(pod("db-0", owner=sts), sts, configmap, priority_class("build"), config=config)
    assert (metadata.priority_class, metadata.preemptibility) == ("build", "non-preemptible")


def test_invalid_preemptibility_label_is_skipped():
    sts = statefulset(labels={"kai.scheduler/preemptibility": "sometimes"})
    p = pod("db-0", owner=sts, labels={"kai.scheduler/preemptibility": "preemptible"})
    assert group(p, sts).preemptibility == "preemptible"


def test_user_and_topology_annotations():
    sts = statefulset(annotations={"kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": "zone"})
    p = pod("db-0", owner=sts, labels={"user": "ana"}, annotations={"user": "ana"})
    metadata = group(p, sts)
    assert metadata.labels["user"] == "ana" and metadata.annotations["user"] == "ana"
    assert (metadata.topology.topology, metadata.topology.required_level) == ("dc", "zone")


def test_kinds_kai_maps_to_the_default_rules():
    for api_version, kind in [
        ("apps/v1", "ReplicaSet"),
        ("machinelearning.seldon.io/v1", "SeldonDeployment"),
        ("kubevirt.io/v1", "VirtualMachineInstance"),
        ("tekton.dev/v1", "PipelineRun"),
        ("tekton.dev/v1", "TaskRun"),
        ("workspace.devfile.io/v1alpha2", "DevWorkspace"),
        ("kubeflow.org/v1alpha1", "ScheduledWorkflow"),
    ]:
        owner = obj(api_version, kind, "w", uid="w1")
        metadata = group(pod("w-0", owner=owner), owner)
        assert (metadata.name, metadata.min_available, metadata.priority_class) == ("pg-w-w1", 1, "train"), kind


def test_preemption_delay_and_staleness_grace_period_come_from_owners_then_the_pod():
    # KAI v0.17: annotations kai.scheduler/preemption-delay and kai.scheduler/staleness-grace-period.
    deploy = obj("apps/v1", "StatefulSet", "db", uid="s1",
                 annotations={"kai.scheduler/preemption-delay": "bad", "kai.scheduler/staleness-grace-period": "-10s"})
    p = pod("db-0", owner=deploy, annotations={"kai.scheduler/preemption-delay": "1m30s",
                                                "kai.scheduler/staleness-grace-period": "5m"})
    metadata = group(p, deploy)
    assert (metadata.preemption_delay, metadata.staleness_grace_period) == (90.0, -10.0)
    spec = podgroup_object(metadata)["spec"]
    assert (spec["preemptionDelay"], spec["stalenessGracePeriod"]) == ("1m30s", "-10s")
    negative = pod("db-1", owner=obj("apps/v1", "StatefulSet", "db", uid="s1"),
                   annotations={"kai.scheduler/preemption-delay": "-1s"})
    metadata = group(negative, obj("apps/v1", "StatefulSet", "db", uid="s1"))
    assert metadata.preemption_delay is None and "preemptionDelay" not in podgroup_object(metadata)["spec"]
