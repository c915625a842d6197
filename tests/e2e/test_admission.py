"""The admission webhooks registered with the real API server: bad pods, Queues, PodGroups and Topologies are
refused with KAI's messages, good ones pass, and new pods are prepared (``NVIDIA_VISIBLE_DEVICES=void``, the
runtime class of fractional pods).

The webhook configurations are the chart's, with url clientConfigs pointing at the admission component
running in this process. So that other tests of the session are not affected, the namespaced webhooks are
limited to the test's namespace and the cluster-scoped ones (Queue, Topology) to objects carrying its label.
"""

from __future__ import annotations

import copy
import time
import uuid
from pathlib import Path

import pytest

from kai.admission.webhook import AdmissionServer
from kai.api.names import PODGROUPS, QUEUES, TOPOLOGIES
from kai.kube.client import ApiError, Kube, object_path
from support.chart import render_chart
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "kai-scheduler"
CONFIGURATIONS = {kind: f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s"
                  for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")}
RUNTIME_CLASSES = "/apis/node.k8s.io/v1/runtimeclasses"
LABEL = "kai-admission-test"
CLUSTER_SCOPED = ("queue-validation.kai.scheduler", "topology-validation.kai.scheduler")


@pytest.fixture(scope="module")
def namespace(kube: Kube, kai_crds):
    name = f"admission-{uuid.uuid4().hex[:8]}"
    kube.post("/api/v1/namespaces", {"metadata": {"name": name, "labels": {LABEL: name}}})
    return name


@pytest.fixture(scope="module")
def runtime_class(kube: Kube, namespace: str):
    """A RuntimeClass for fractional pods (the API server refuses a pod naming one that does not exist)."""
    kube.post(RUNTIME_CLASSES, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                "metadata": {"name": namespace}, "handler": "runc"})
    yield namespace
    kube.delete(f"{RUNTIME_CLASSES}/{namespace}")


@pytest.fixture(scope="module")
def webhook(kube: Kube, namespace: str, runtime_class: str, tmp_path_factory):
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(tmp_path_factory.mktemp("certs")),
                             block_visible_devices=True, runtime_class=runtime_class)
    server.start()
    values = {"components": {"admission": {"enabled": True, "tls": {"caBundle": server.ca_bundle}}}}
    configs = [d for d in render_chart(CHART, values=values) if d["kind"] in CONFIGURATIONS]
    assert len(configs) == 2
    for config in configs:
        config["metadata"]["name"] = f"kai-admission-{namespace}"
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{path}", "caBundle": server.ca_bundle}
            if hook["name"] in CLUSTER_SCOPED:
                hook["objectSelector"] = {"matchLabels": {LABEL: namespace}}
            else:
                hook["namespaceSelector"] = {"matchLabels": {LABEL: namespace}}
        kube.post(CONFIGURATIONS[config["kind"]], config)
    try:
        wait_until_enforced(kube, namespace)
        yield server
    finally:
        for config in configs:
            kube.delete(f"{CONFIGURATIONS[config['kind']]}/{config['metadata']['name']}")
        server.stop()


def wait_until_enforced(kube: Kube, namespace: str, timeout: float = 30.0) -> None:
    """The API server picks up new webhook configurations shortly after they are created."""
    probes = [
        lambda: create(kube, namespace, {"gpu-fraction": "2"}, dry_run=True),
        lambda: create_queue(kube, namespace, None, dry_run=True),
        lambda: create_podgroup(kube, namespace, {"minMember": 1, "minSubGroup": 1}, dry_run=True),
        lambda: create_topology(kube, namespace, [{"nodeLabel": "a", "alias": "a"}], dry_run=True),
    ]
    deadline = time.monotonic() + timeout

    def denied(probe) -> bool:
        try:
            probe()
        except ApiError as exc:
            if exc.status == 403 and "denied the request" in str(exc):
                return True
            raise
        return False

    for probe in probes:
        wait_until(lambda probe=probe: denied(probe), max(0.0, deadline - time.monotonic()), "a webhook to be called")
    wait_until(lambda: create(kube, namespace, {"gpu-fraction": "0.5"}, dry_run=True)["spec"].get("runtimeClassName"),
               max(0.0, deadline - time.monotonic()), "the mutating webhook to be called")


POD = {"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]}}


def create(kube: Kube, namespace: str, annotations: dict, gpu_limit: str | None = None,
           scheduler: str = "kai-scheduler", dry_run: bool = False, env: list | None = None,
           sidecar: bool = False) -> dict:
    pod = copy.deepcopy(POD)
    pod["metadata"] = {"name": f"p-{uuid.uuid4().hex[:6]}", "annotations": annotations}
    pod["spec"]["schedulerName"] = scheduler
    main = pod["spec"]["containers"][0]
    if gpu_limit is not None:
        main["resources"] = {"limits": {"nvidia.com/gpu": gpu_limit}}
    if env is not None:
        main["env"] = env
    if sidecar:
        pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    return kube.request("POST", object_path("", "v1", "pods", namespace), _dry(dry_run), body=pod)


def create_queue(kube: Kube, namespace: str, resources: dict | None, dry_run: bool = False) -> dict:
    spec = {} if resources is None else {"resources": resources}
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
             "metadata": {"name": f"{namespace}-{uuid.uuid4().hex[:6]}", "labels": {LABEL: namespace}}, "spec": spec}
    return kube.request("POST", object_path(*QUEUES), _dry(dry_run), body=queue)


def create_podgroup(kube: Kube, namespace: str, spec: dict, dry_run: bool = False) -> dict:
    podgroup = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": f"pg-{uuid.uuid4().hex[:6]}"}, "spec": {"queue": "default-queue", **spec}}
    return kube.request("POST", object_path(*PODGROUPS, namespace), _dry(dry_run), body=podgroup)


def create_topology(kube: Kube, namespace: str, levels: list[dict], dry_run: bool = False) -> dict:
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                "metadata": {"name": f"{namespace}-{uuid.uuid4().hex[:6]}", "labels": {LABEL: namespace}},
                "spec": {"levels": levels}}
    return kube.request("POST", object_path(*TOPOLOGIES), _dry(dry_run), body=topology)


def _dry(dry_run: bool) -> dict | None:
    return {"dryRun": "All"} if dry_run else None


def refused(call, webhook_name: str) -> str:
    """The message with which ``webhook_name`` refused what ``call`` created."""
    with pytest.raises(ApiError) as error:
        call()
    assert error.value.status == 403
    prefix = f'admission webhook "{webhook_name}" denied the request: '
    message = error.value.body["message"]
    assert message.startswith(prefix), message
    return message.removeprefix(prefix)


# -- pods -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "gpu_limit", "field"),
    [
        ({"gpu-fraction": "1.5"}, None, "gpu-fraction"),
        ({"gpu-fraction": "0"}, None, "gpu-fraction"),
        ({"gpu-fraction": "half"}, None, "gpu-fraction"),
        ({"gpu-fraction": "0.5", "gpu-memory": "4096"}, None, "gpu-memory"),
        ({"gpu-fraction": "0.5"}, "1", "nvidia.com/gpu"),
        ({"gpu-fraction-num-devices": "2"}, None, "gpu-fraction-num-devices"),
    ],
    ids=["fraction-above-1", "fraction-zero", "fraction-not-a-number", "fraction-and-memory",
         "fraction-and-gpu-limit", "num-devices-without-fraction"],
)
def test_a_bad_gpu_sharing_request_is_refused_naming_the_field(kube, namespace, webhook, annotations, gpu_limit,
                                                                field):
    message = refused(lambda: create(kube, namespace, annotations, gpu_limit), "pod-validation.kai.scheduler")
    assert field in message
    assert not kube.get(object_path("", "v1", "pods", namespace)).get("items")


def test_a_good_fractional_pod_is_admitted_with_the_runtime_class(kube, namespace, webhook, runtime_class):
    pod = create(kube, namespace, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert pod["spec"]["runtimeClassName"] == runtime_class
    kube.delete(object_path("", "v1", "pods", namespace, pod["metadata"]["name"]))


def test_pods_of_other_schedulers_are_not_judged(kube, namespace, webhook):
    pod = create(kube, namespace, {"gpu-fraction": "1.5"}, scheduler="default-scheduler")
    kube.delete(object_path("", "v1", "pods", namespace, pod["metadata"]["name"]))


@pytest.mark.parametrize("value", ["all", "0,1"])
def test_a_pod_choosing_its_gpus_with_nvidia_visible_devices_is_refused(kube, namespace, webhook, value):
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
    message = refused(lambda: create(kube, namespace, {}, gpu_limit="1", env=env), "pod-validation.kai.scheduler")
    assert message == (f"container main has an environment variable NVIDIA_VISIBLE_DEVICES defined with a value of "
                       f"{value}. This is forbidden due to conflicts with Nvidia's device plugin. The only values "
                       "that are allowed are 'void' or 'none'")


def test_void_is_admitted_and_containers_without_a_gpu_are_given_void(kube, namespace, webhook):
    pod = create(kube, namespace, {}, gpu_limit="1", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
                 sidecar=True, dry_run=True)
    main, sidecar = pod["spec"]["containers"]
    assert main["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert sidecar["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    pod = create(kube, namespace, {}, gpu_limit="1", sidecar=True, dry_run=True)
    main, sidecar = pod["spec"]["containers"]
    assert "env" not in main and sidecar["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]


# -- Queues, PodGroups, Topologies ------------------------------------------------------------------------------


def test_a_queue_without_resources_is_refused_and_one_with_resources_is_admitted(kube, namespace, webhook):
    assert refused(lambda: create_queue(kube, namespace, None),
                   "queue-validation.kai.scheduler") == "resources must be specified"
    queue = create_queue(kube, namespace, {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}})
    kube.delete(object_path(*QUEUES, name=queue["metadata"]["name"]))


def test_a_bad_podgroup_is_refused_and_a_good_tree_is_admitted(kube, namespace, webhook):
    message = refused(lambda: create_podgroup(kube, namespace, {"minMember": 2, "minSubGroup": 1}),
                      "podgroup-validation.kai.scheduler")
    assert message == ("minMember and minSubGroup are mutually exclusive: set minMember (2) to schedule a fixed "
                       "number of pods, or set minSubGroup to require a minimum number of child SubGroups, but not "
                       "both")
    leaf_without_min = {"subGroups": [{"name": "workers", "minSubGroup": 1}, {"name": "w0", "parent": "workers"}]}
    assert refused(lambda: create_podgroup(kube, namespace, leaf_without_min),
                   "podgroup-validation.kai.scheduler") == "subgroup w0: minMember is required"
    tree = {"minSubGroup": 1, "subGroups": [{"name": "workers", "minSubGroup": 2},
                                            {"name": "w0", "parent": "workers", "minMember": 1},
                                            {"name": "w1", "parent": "workers", "minMember": 1}]}
    podgroup = create_podgroup(kube, namespace, tree)
    assert podgroup["spec"]["minSubGroup"] == 1
    kube.delete(object_path(*PODGROUPS, namespace, podgroup["metadata"]["name"]))


def test_a_topology_with_a_duplicated_alias_is_refused(kube, namespace, webhook):
    levels = [{"nodeLabel": "cloud/zone", "alias": "near"}, {"nodeLabel": "cloud/rack", "alias": "near"}]
    assert refused(lambda: create_topology(kube, namespace, levels), "topology-validation.kai.scheduler") == (
        "invalid topology aliases: aliases must be unique within the topology; duplicated: [near]")
    topology = create_topology(kube, namespace, [{"nodeLabel": "cloud/zone", "alias": "zone"},
                                                 {"nodeLabel": "cloud/rack", "alias": "rack"}])
    kube.delete(object_path(*TOPOLOGIES, name=topology["metadata"]["name"]))
