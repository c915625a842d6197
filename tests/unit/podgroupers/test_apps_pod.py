"""Deployment, bare pods, Spark pods, AmlJob and SPOTRequest."""

import pytest

from kai.api.podgroup import GroupingError
from kai.testing_podgroupers import group, obj, pod


def nginx():
    # The nginx example of the Kubernetes Deployment documentation.
    deploy = obj("apps/v1", "Deployment", "nginx-deployment", uid="d1", labels={"app": "nginx"}, spec={"replicas": 3})
    rs = obj("apps/v1", "ReplicaSet", "nginx-deployment-66b6c", uid="rs1", owner=deploy)
    return deploy, rs


def test_deployment_pod_is_its_own_podgroup_with_inference_priority():
    deploy, rs = nginx()
    p = pod("nginx-deployment-66b6c-abc", owner=rs, uid="p1")
    metadata = group(p, deploy, rs)
    assert metadata.name == "pg-nginx-deployment-66b6c-abc-p1"
    assert metadata.owner.to_dict() == {"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"], "uid": "p1"}
    assert metadata.priority_class == "inference"
    assert metadata.labels["app"] == "nginx"


def test_replicaset_without_deployment_uses_default_rules():
    rs = obj("apps/v1", "ReplicaSet", "frontend", uid="rs9", spec={"replicas": 3})
    metadata = group(pod("frontend-x", owner=rs), rs)
    assert (metadata.name, metadata.priority_class) == ("pg-frontend-rs9", "train")


def test_spark_driver_and_executors_share_the_application_podgroup():
    spark_labels = {"spark-app-name": "spark-pi", "spark-app-selector": "spark-4f1c", "spark-role": "driver"}
    driver = pod("spark-pi-driver", labels=spark_labels)
    executor = pod("spark-pi-exec-1", labels={**spark_labels, "spark-role": "executor"}, owner=driver)
    assert group(driver).name == "spark-4f1c"
    assert group(executor, driver).name == "spark-4f1c"


def test_pod_with_only_one_spark_label_is_a_plain_pod():
    p = pod("half", uid="h1", labels={"spark-app-selector": "x"})
    assert group(p).name == "pg-half-h1"


def test_amljob_gang_is_the_node_count():
    job = obj(
        "amlarc.azureml.com/v1alpha1",
        "AmlJob",
        "aml",
        uid="a1",
        spec={"job": {"options": {"envs": {"AZUREML_NODE_COUNT": 4}}}},
    )
    assert group(pod("aml-0", owner=job), job).min_available == 4
    job["spec"]["job"]["options"]["envs"] = {}
    with pytest.raises(GroupingError, match="azureml envs count not found in spec"):
        group(pod("aml-0", owner=job), job)


def test_spotrequest_defaults_to_inference_priority():
    spot = obj("egx.nvidia.io/v1", "SPOTRequest", "spot", uid="s1")
    assert group(pod("spot-0", owner=spot), spot).priority_class == "inference"
