"""The pod webhooks' v0.16-v0.17 rules: the GPU-sharing switch, MPS, KAI's deviceaccess plugin and the
runtime class of fractional pods -- AdmissionReview in, decision (and patch) out."""

from __future__ import annotations

import base64
import copy
import json

import pytest

from kai.admission.pods import PodPolicy, mutation_review, prepared, review

BLOCKING = PodPolicy(block_visible_devices=True)


def container(name="main", gpus=None, env=None, requests=None):
    c = {"name": name, "image": "busybox"}
    if gpus is not None:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    if requests is not None:
        c["resources"] = {"requests": requests}
    if env is not None:
        c["env"] = env
    return c


def pod(*containers, annotations=None, init=(), runtime_class=None):
    spec = {"schedulerName": "kai-scheduler", "containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": {"name": "p", "namespace": "team-a", "annotations": annotations or {}}, "spec": spec}


def request(obj, operation="CREATE", old=None):
    return {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": operation,
            "namespace": "team-a", "name": "p", "object": obj, "oldObject": old}


def refused(response) -> str:
    assert response["allowed"] is False and response["status"]["code"] == 403
    return response["status"]["message"]


def patched(response, obj) -> dict:
    """``obj`` with the response's JSON patch applied (its operations are all ``add`` of a top-level field)."""
    assert response["allowed"] is True
    out = copy.deepcopy(obj)
    for op in json.loads(base64.b64decode(response["patch"])) if "patch" in response else ():
        assert op["op"] == "add"
        section, field = op["path"].strip("/").split("/")
        out[section][field] = op["value"]
    return out


def visible_devices(obj, kind="containers", index=0):
    return [e for e in obj["spec"][kind][index].get("env") or () if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


# -- GPU sharing switch and MPS -------------------------------------------------------------------------------


@pytest.mark.parametrize("annotations", [{"gpu-fraction": "0.5"}, {"gpu-memory": "2048"}])
def test_with_gpu_sharing_off_a_fractional_pod_is_refused_with_kai_s_message(annotations):
    off = PodPolicy(gpu_sharing=False)
    assert refused(review(request(pod(annotations=annotations)), off)) == (
        "attempting to create a pod team-a/p with gpu sharing request, while GPU sharing is disabled")
    assert review(request(pod(container(gpus="1"))), off)["allowed"] is True
    assert review(request(pod(annotations=annotations)))["allowed"] is True  # on by default


def test_mps_needs_a_fractional_request():
    assert refused(review(request(pod(annotations={"mps": "true"})))) == (
        "MPS is only supported with GPU fraction request")
    assert refused(review(request(pod(container(gpus="1"), annotations={"mps": "true"})))) == (
        "MPS is only supported with GPU fraction request")
    assert review(request(pod(annotations={"mps": "true", "gpu-fraction": "0.5"})))["allowed"] is True
    assert review(request(pod(annotations={"mps": "false"})))["allowed"] is True


def test_the_switch_and_mps_apply_only_to_the_scheduler_s_pods():
    other = pod(annotations={"mps": "true"})
    other["spec"]["schedulerName"] = "default-scheduler"
    assert review(request(other))["allowed"] is True
    assert review(request(pod(annotations={"gpu-fraction": "0.5"})), PodPolicy(scheduler_name="other",
                                                                                gpu_sharing=False))["allowed"]


# -- deviceaccess: validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "1,2", "all", "GPU-0f1e"])
def test_a_container_choosing_its_gpus_is_refused_when_blocking(value):
    bad = pod(container(gpus="1", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]))
    assert refused(review(request(bad), BLOCKING)) == (
        f"container main has an environment variable NVIDIA_VISIBLE_DEVICES defined with a value of {value}. "
        "This is forbidden due to conflicts with Nvidia's device plugin. The only values that are allowed are "
        "'void' or 'none'")
    assert review(request(bad))["allowed"] is True  # KAI's default: not blocking


@pytest.mark.parametrize("env", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                                 {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
                                 {"name": "NVIDIA_VISIBLE_DEVICES", "value": ""},
                                 {"name": "OTHER", "value": "all"}])
def test_void_none_empty_and_other_variables_are_allowed(env):
    assert review(request(pod(container(gpus="1", env=[env]))), BLOCKING)["allowed"] is True


def test_a_value_from_reference_is_refused_in_init_containers_too():
    ref = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}
    bad = pod(init=[container("prep", env=[ref])])
    assert refused(review(request(bad), BLOCKING)) == (
        "container prep has an environment variable NVIDIA_VISIBLE_DEVICES defined with a valueFrom reference. "
        "This is forbidden due to possible conflicts with Nvidia's device plugin")


def test_the_fraction_container_is_exempt_and_the_others_are_not():
    ref = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "p-shared-gpu-0", "key": "k"}}}
    prepared_pod = pod(container(env=[ref]), annotations={"gpu-fraction": "0.5"})
    assert review(request(prepared_pod), BLOCKING)["allowed"] is True
    named = pod(container(), container("worker", env=[ref]),
                annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "worker"})
    assert review(request(named), BLOCKING)["allowed"] is True
    named["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert "container main" in refused(review(request(named), BLOCKING))
    named["metadata"]["annotations"]["gpu-fraction-container-name"] = "gone"
    assert refused(review(request(named), BLOCKING)).startswith("failed to get fraction container ref:")


# -- deviceaccess: mutation -----------------------------------------------------------------------------------


def test_containers_without_a_gpu_get_void_and_gpu_containers_are_left_alone():
    obj = pod(container(gpus="1"), container("sidecar"), container("mig", requests={"nvidia.com/mig-1g.5gb": "1"}),
              container("zero", requests={"nvidia.com/gpu": "0"}), init=[container("prep")])
    out = patched(mutation_review(request(obj), BLOCKING), obj)
    assert visible_devices(out) == [] and visible_devices(out, index=2) == []
    for kind, index in (("containers", 1), ("containers", 3), ("initContainers", 0)):
        assert visible_devices(out, kind, index) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert "patch" not in mutation_review(request(obj))  # not blocking: nothing to change


def test_a_container_s_own_value_is_replaced_by_void_and_a_reference_is_left_to_the_refusal():
    ref = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    obj = pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "X", "value": "1"}]),
              container("ref", env=[ref]))
    out = patched(mutation_review(request(obj), BLOCKING), obj)
    assert out["spec"]["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                                                   {"name": "X", "value": "1"}]
    assert out["spec"]["containers"][1]["env"] == [ref]
    assert "valueFrom" in refused(review(request(out), BLOCKING))


def test_the_fraction_container_keeps_its_configmap_reference():
    obj = pod(container(), container("sidecar"), annotations={"gpu-fraction": "0.5"})
    out = patched(mutation_review(request(obj), BLOCKING), obj)
    (ref,) = visible_devices(out)
    assert ref["valueFrom"]["configMapKeyRef"]["key"] == "NVIDIA_VISIBLE_DEVICES"
    assert visible_devices(out, index=1) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert review(request(out), BLOCKING)["allowed"] is True  # what the mutation leaves, the validation admits


# -- runtime class ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("annotations", [{"gpu-fraction": "0.5"}, {"gpu-memory": "1024"}])
def test_a_fractional_pod_without_runtime_class_gets_the_configured_one(annotations):
    policy = PodPolicy(runtime_class="nvidia")
    obj = pod(annotations=annotations)
    assert patched(mutation_review(request(obj), policy), obj)["spec"]["runtimeClassName"] == "nvidia"
    obj["spec"]["runtimeClassName"] = ""
    assert prepared(obj, policy)["spec"]["runtimeClassName"] == "nvidia"


def test_whole_gpu_pods_pods_with_a_runtime_class_and_an_empty_setting_are_left_alone():
    policy = PodPolicy(runtime_class="nvidia")
    assert "runtimeClassName" not in prepared(pod(container(gpus="2")), policy)["spec"]
    own = pod(annotations={"gpu-fraction": "0.5"}, runtime_class="kata")
    assert prepared(own, policy)["spec"]["runtimeClassName"] == "kata"
    assert "runtimeClassName" not in prepared(pod(annotations={"gpu-fraction": "0.5"}))["spec"]
    ops = json.loads(base64.b64decode(mutation_review(request(own), policy)["patch"]))
    assert "/spec/runtimeClassName" not in [op["path"] for op in ops]


def test_an_update_is_never_mutated():
    obj = pod(container("sidecar"), annotations={"gpu-fraction": "0.5"})
    assert mutation_review(request(obj, "UPDATE", old=obj), PodPolicy(block_visible_devices=True,
                                                                     runtime_class="nvidia")) == {
        "uid": "u-1", "allowed": True}
