"""The DRA devices of fake GPU nodes: read back as the scheduler reads them, the class selects every GPU."""

from __future__ import annotations

from kai.api.dra import DynamicResources, is_gpu_name
from kai.dev import dradevices
from kai.kube.dra import device_class_view, resource_slice_view
from kai.plugins.dynamicresources.cel import Selectors


def test_the_slice_publishes_the_nodes_gpus_with_kais_fake_driver_and_memory():
    body = dradevices.resource_slice("node-a", gpus=8)
    view = resource_slice_view(body)

    assert body["metadata"]["name"] == "node-a-gpu.nvidia.com"
    assert view.driver == "gpu.nvidia.com" and view.node == "node-a" and is_gpu_name(view.driver)
    assert [d.name for d in view.devices] == [f"gpu-{i}" for i in range(8)]
    first = view.devices[0]
    assert first.attributes["model"] == "Tesla-K80" and first.attributes["type"] == "gpu"
    assert first.attributes["index"] == 0 and first.attributes["uuid"].startswith("GPU-")
    assert first.capacity["memory"] == 11441 * 2**20
    assert len({d.attributes["uuid"] for d in view.devices}) == 8
    assert dradevices.resource_slice("node-a", 1)["spec"]["devices"][0] == body["spec"]["devices"][0]


def test_the_device_class_selects_every_device_of_the_driver_and_no_other():
    cls = device_class_view(dradevices.device_class())
    assert cls.name == "gpu.nvidia.com" and is_gpu_name(cls.name) and not cls.extended_resource_name
    (expression,) = cls.selectors
    ours = resource_slice_view(dradevices.resource_slice("node-a", gpus=2))
    other = resource_slice_view({**dradevices.resource_slice("node-b", gpus=1),
                                 "spec": {**dradevices.resource_slice("node-b", gpus=1)["spec"],
                                          "driver": "nic.example.com"}})

    selectors = Selectors()
    assert [selectors.matches(expression, ("gpu.nvidia.com", "node-a", d.name), d) for d in ours.devices] == [True] * 2
    assert not selectors.matches(expression, ("nic.example.com", "node-b", "gpu-0"), other.devices[0])
    assert not selectors.errors


def test_the_cluster_counts_the_published_devices_as_gpus_of_their_node():
    dra = DynamicResources.of([device_class_view(dradevices.device_class())],
                              [resource_slice_view(dradevices.resource_slice(n, gpus=8)) for n in ("a", "b")])
    assert dra.node_gpu_devices("a") == 8
    assert dra.gpu_devices(["a", "b", "c"]) == 16
