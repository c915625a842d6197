"""Kubeflow podgroupers on jobs shaped like the training operator's published examples."""

import pytest

from kai.api.podgroup import GroupingError
from kai.grouping.hub import build_hub
from kai.grouping.objects import MemoryObjects
from kai.testing_podgroupers import group, obj, pod, subgroup_of

TYPE = "training.kubeflow.org/replica-type"
INDEX = "training.kubeflow.org/replica-index"


def replica(n, annotations=None):
    template = {"spec": {"containers": [{"name": "main", "image": "trainer:latest"}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"replicas": n, "restartPolicy": "OnFailure", "template": template}


def pytorchjob(spec, name="pytorch-simple", **kw):
    return obj("kubeflow.org/v1", "PyTorchJob", name, namespace="kubeflow", uid="pt1", spec=spec, **kw)


def worker(job, index, **kw):
    return pod(
        f"{job['metadata']['name']}-worker-{index}",
        namespace="kubeflow",
        owner=job,
        labels={TYPE: "worker", INDEX: str(index)},
        **kw,
    )


def test_pytorch_simple_master_and_worker():
    job = pytorchjob({"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}})
    master = pod("pytorch-simple-master-0", namespace="kubeflow", owner=job, labels={TYPE: "master", INDEX: "0"})
    metadata = group(master, job)
    assert (metadata.name, metadata.min_available) == ("pg-pytorch-simple-pt1", 2)
    assert [(s.name, s.min_available) for s in metadata.subgroups] == [("master", 1), ("worker", 1)]
    assert subgroup_of(metadata, master) == "master"
    assert subgroup_of(group(worker(job, 0), job), worker(job, 0)) == "worker"


def test_pytorch_elastic_policy_min_replicas_is_the_gang():
    job = pytorchjob(
        {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2},
            "pytorchReplicaSpecs": {"Worker": replica(2)},
        },
        name="elastic-example-imagenet",
    )
    metadata = group(worker(job, 1), job)
    assert metadata.min_available == 1
    assert [(s.name, s.min_available) for s in metadata.subgroups] == [("worker", 1)]


def test_pytorch_scheduling_policy_min_available_overrides_elastic():
    job = pytorchjob(
        {
            "elasticPolicy": {"minReplicas": 1},
            "runPolicy": {"schedulingPolicy": {"minAvailable": 3}},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(4)},
        }
    )
    metadata = group(worker(job, 0), job)
    assert metadata.min_available == 3
    assert [(s.name, s.min_available) for s in metadata.subgroups] == [("master", 1), ("worker", 2)]


def test_pytorch_worker_segments_with_topology():
    annotations = {
        "kai.scheduler/segment-size": "2",
        "kai.scheduler/topology": "cluster",
        "kai.scheduler/segment-topology-required-placement": "rack",
    }
    job = pytorchjob({"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(5, annotations)}})
    metadata = group(worker(job, 4), job)
    assert [(s.name, s.min_available, s.min_subgroup, s.parent) for s in metadata.subgroups] == [
        ("master", 1, None, None),
        ("worker", 0, 3, None),
        ("worker-0", 2, None, "worker"),
        ("worker-1", 2, None, "worker"),
        ("worker-2", 1, None, "worker"),
    ]
    assert subgroup_of(metadata, worker(job, 4)) == "worker-2"
    assert metadata.subgroups[2].topology.required_level == "rack"


def test_pytorch_segments_past_the_elastic_minimum_are_not_mandatory():
    # KAI's Segments_ElasticMinReplicas: 1 master + 8 workers, minReplicas 5, segments of 2.
    segments = {"kai.scheduler/segment-size": "2"}
    job = pytorchjob({"elasticPolicy": {"minReplicas": 5},
                      "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(8, segments)}})
    metadata = group(worker(job, 0), job)
    assert metadata.min_available == 5
    assert [(s.name, s.min_available, s.min_subgroup) for s in metadata.subgroups[1:]] == [
        ("worker", 0, 4), ("worker-0", 2, None), ("worker-1", 2, None), ("worker-2", 0, None), ("worker-3", 0, None),
    ]


def test_pytorch_without_workers_keeps_worker_a_leaf():
    job = pytorchjob({"runPolicy": {"schedulingPolicy": {"minAvailable": 1}},
                      "pytorchReplicaSpecs": {"Master": replica(1),
                                              "Worker": replica(0, {"kai.scheduler/segment-size": "2"})}})
    master = pod("pytorch-simple-master-0", namespace="kubeflow", owner=job, labels={TYPE: "master", INDEX: "0"})
    assert [(s.name, s.min_subgroup) for s in group(master, job).subgroups] == [("master", None), ("worker", None)]


def test_pytorch_segment_errors():
    job = pytorchjob({"pytorchReplicaSpecs": {"Worker": replica(4, {"kai.scheduler/segment-size": "0"})}})
    with pytest.raises(GroupingError, match="needs to be a positive integer"):
        group(worker(job, 0), job)
    job = pytorchjob({"pytorchReplicaSpecs": {"Worker": replica(4)}})
    p = worker(job, 0, annotations={"kai.scheduler/segment-size": "two"})
    with pytest.raises(GroupingError, match="invalid segment size two on pod kubeflow/"):
        group(p, job)
    p = pod(
        "w", namespace="kubeflow", owner=job, labels={TYPE: "worker"}, annotations={"kai.scheduler/segment-size": "2"}
    )
    with pytest.raises(GroupingError, match="replica index label not found"):
        group(p, job)
    p = worker(job, -1, annotations={"kai.scheduler/segment-size": "2"})
    with pytest.raises(GroupingError, match="replica index -1 is not valid. It must be bigger than 0"):
        group(p, job)
    job = pytorchjob({"pytorchReplicaSpecs": {"Worker": replica(10001, {"kai.scheduler/segment-size": "1"})}})
    with pytest.raises(GroupingError, match="segmentation 10001 is greater than max allowed segmentation 10000"):
        group(worker(job, 0), job)


def test_tfjob_sums_all_replica_types():
    job = obj(
        "kubeflow.org/v1",
        "TFJob",
        "dist-mnist-for-e2e-test",
        uid="tf1",
        spec={"tfReplicaSpecs": {"PS": replica(2), "Worker": replica(4)}},
    )
    assert group(pod("dist-mnist-worker-0", owner=job), job).min_available == 6


def test_zero_replicas_is_an_error():
    job = obj(
        "kubeflow.org/v1", "TFJob", "tf", uid="tf1", spec={"tfReplicaSpecs": {"PS": replica(0), "Worker": replica(2)}}
    )
    with pytest.raises(GroupingError, match="doesn't allow for 0 PS pods"):
        group(pod("tf-0", owner=job), job)


def test_xgboost_requires_master_and_worker():
    job = obj(
        "kubeflow.org/v1",
        "XGBoostJob",
        "xgboost-dist-iris-test-train",
        uid="x1",
        spec={"xgbReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    )
    assert group(pod("xgb-master-0", owner=job), job).min_available == 3
    del job["spec"]["xgbReplicaSpecs"]["Master"]
    with pytest.raises(GroupingError, match="doesn't have a Master replica spec which is required"):
        group(pod("xgb-worker-0", owner=job), job)


def test_jaxjob_workers():
    job = obj("kubeflow.org/v1", "JAXJob", "jaxjob-simple", uid="jx", spec={"jaxReplicaSpecs": {"Worker": replica(2)}})
    assert group(pod("jaxjob-simple-worker-0", owner=job), job).min_available == 2
    job["spec"] = {}
    with pytest.raises(GroupingError, match="doesn't have a jaxReplicaSpecs field"):
        group(pod("jaxjob-simple-worker-0", owner=job), job)


def mpijob(version, policy=None):
    spec = {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": replica(1), "Worker": replica(2)}}
    if policy:
        spec["launcherCreationPolicy"] = policy
    return obj(f"kubeflow.org/{version}", "MPIJob", "pi", uid="m1", spec=spec)


def test_mpijob_v1_and_v2beta1():
    for version in ("v1", "v2beta1"):
        job = mpijob(version)
        assert group(pod("pi-worker-0", owner=job), job).min_available == 3


def test_mpijob_waits_for_workers_before_counting_the_launcher():
    job = mpijob("v2beta1", "WaitForWorkersReady")
    assert group(pod("pi-worker-0", owner=job), job).min_available == 2
    launcher = pod(
        "pi-launcher",
        owner=job,
        labels={"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "launcher"},
    )
    assert group(pod("pi-worker-0", owner=job), job, launcher).min_available == 3


def test_notebook_defaults_to_build_priority():
    nb = obj("kubeflow.org/v1beta1", "Notebook", "my-notebook", uid="n1")
    metadata = group(pod("my-notebook-0", owner=nb), nb)
    assert (metadata.name, metadata.priority_class) == ("pg-my-notebook-n1", "build")


def test_generic_distributed_grouper_for_a_custom_kind():
    job = obj("example.com/v1", "PaddleJob", "paddle", uid="pd", spec={"paddleReplicaSpecs": {"Worker": replica(3)}})
    arguments = {
        "kubeflow-distributed": {
            "kinds": [["example.com", "v1", "PaddleJob"]],
            "replicaSpecName": "paddleReplicaSpecs",
            "mandatorySpecNames": ["Worker"],
        }
    }
    assert group(pod("paddle-0", owner=job), job, arguments=arguments).min_available == 3


@pytest.mark.parametrize(
    ("kind", "name"),
    [(("kubeflow.org", "v1", "TFJob"), "tfjob"), (("kubeflow.org", "v1", "XGBoostJob"), "xgboostjob"),
     (("kubeflow.org", "v1", "JAXJob"), "jaxjob"), (("kubeflow.org", "v1beta1", "Notebook"), "notebook")],
)
def test_each_kubeflow_kind_has_its_named_podgrouper(kind, name):
    """KAI's grouper names (its TestName tests) are the entry-point names here."""
    assert build_hub(MemoryObjects()).table.get(kind) == name
