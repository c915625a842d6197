"""The admission section of Config kai-config over the flags, and the webhook answering with the policy in force."""

from __future__ import annotations

import pytest

from kai.admission.pods import PodPolicy
from kai.admission.settings import pod_policy, policy_builder
from kai.admission.webhook import MUTATE_PATH, VALIDATE_PATH, AdmissionServer
from kai.kube.kaiconfig import KaiObjects

FLAGS = PodPolicy(gpu_sharing=True, block_visible_devices=False, runtime_class="nvidia")


def config(**admission) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
            "spec": {"admission": admission}}


def test_without_a_config_or_its_fields_the_flags_stay():
    assert pod_policy(FLAGS, None) == FLAGS
    assert pod_policy(FLAGS, config()) == FLAGS
    assert pod_policy(FLAGS, {"spec": {"binder": {"cdiEnabled": True}}}) == FLAGS


def test_each_field_set_replaces_its_flag():
    assert pod_policy(FLAGS, config(gpuSharing=False, blockNvidiaVisibleDevices=True)) == PodPolicy(
        gpu_sharing=False, block_visible_devices=True, runtime_class="nvidia")
    assert pod_policy(FLAGS, config(gpuPodRuntimeClassName="old")).runtime_class == "old"
    # the new spelling wins over the deprecated one; '' sets no runtime class
    assert pod_policy(FLAGS, config(gpuFractionRuntimeClassName="new", gpuPodRuntimeClassName="old")).runtime_class \
        == "new"
    assert pod_policy(FLAGS, config(gpuFractionRuntimeClassName="")).runtime_class == ""


@pytest.mark.parametrize(("admission", "message"), [
    ({"gpuSharing": "no"}, "spec.admission.gpuSharing: expected true or false, not 'no'"),
    ({"blockNvidiaVisibleDevices": 1}, "spec.admission.blockNvidiaVisibleDevices: expected true or false"),
    ({"gpuFractionRuntimeClassName": "Not_A_Name"}, "spec.admission.gpuFractionRuntimeClassName: 'Not_A_Name'"),
    ({"gpuPodRuntimeClassName": ["nvidia"]}, "spec.admission.gpuPodRuntimeClassName: expected a string"),
])
def test_a_malformed_field_is_an_error_naming_it(admission, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        pod_policy(FLAGS, config(**admission))
    with pytest.raises(ValueError, match=r"^spec.admission: expected a mapping, not 'on'"):
        pod_policy(FLAGS, {"spec": {"admission": "on"}})


def fractional_pod_review(operation: str = "CREATE") -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "annotations": {"gpu-fraction": "0.5"}},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "i"}]}}
    return {"uid": "u1", "kind": {"kind": "Pod"}, "operation": operation, "namespace": "ns", "name": "p",
            "object": pod}


def test_the_webhook_answers_with_the_policy_in_force_at_each_review(tmp_path):
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(tmp_path), runtime_class="nvidia")
    server.settings = KaiObjects(None, policy_builder(server.base_policy), server.base_policy,  # type: ignore[arg-type]
                                 component="admission", shard=None)
    assert server.routes[VALIDATE_PATH](fractional_pod_review())["allowed"]

    def take_up(kai_config):  # what the Config's watch does on a change
        server.settings.value = server.settings.build(None, kai_config)
        server.settings.version += 1

    take_up(config(gpuSharing=False))
    answer = server.routes[VALIDATE_PATH](fractional_pod_review())
    assert not answer["allowed"]
    assert answer["status"]["message"] == \
        "attempting to create a pod ns/p with gpu sharing request, while GPU sharing is disabled"
    take_up(config(gpuSharing=True, gpuFractionRuntimeClassName="mine"))
    assert server.routes[VALIDATE_PATH](fractional_pod_review())["allowed"]
    assert server.policy().runtime_class == "mine"
    assert server.routes[MUTATE_PATH](fractional_pod_review())["patchType"] == "JSONPatch"
