"""DRA devices for fake GPU nodes, as KAI's e2e clusters get them from the fake GPU operator's DRA plugin.

A DeviceClass ``gpu.nvidia.com`` selects the driver's GPUs with CEL; each fake GPU node publishes its GPUs
in one node-local ResourceSlice of driver ``gpu.nvidia.com`` (a pool named after the node): devices
``gpu-0``, ``gpu-1``, ... with the attributes ``type`` (``gpu``), ``uuid``, ``model`` and ``index`` and the
capacity ``memory``. Nothing runs on kwok to prepare them; the scheduler and the binder only read them.
"""

from __future__ import annotations

import uuid

from kai.api import names

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
#: The selector of the fake GPU operator's DeviceClass: the driver's devices of type ``gpu``.
SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
API_VERSION = "/".join(names.DEVICECLASSES[:2])


def device_class(name: str = DEVICE_CLASS) -> dict:
    """The DeviceClass selecting the fake driver's GPUs (no ``extendedResourceName``: KAI's specs patch it in)."""
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": SELECTOR}}]}}


def resource_slice(node: str, gpus: int, memory_mib: int = 11441, model: str = "Tesla-K80") -> dict:
    """The ResourceSlice publishing ``gpus`` GPUs of ``memory_mib`` MiB each on ``node``."""
    devices = [{"name": f"gpu-{i}",
                "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid(node, i)},
                               "model": {"string": model}, "index": {"int": i}},
                "capacity": {"memory": {"value": f"{memory_mib}Mi"}}}
               for i in range(gpus)]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, "devices": devices}}


def gpu_uuid(node: str, index: int) -> str:
    """A GPU UUID in NVIDIA's form, the same for a node's GPU each time."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{index}.{node}')}"
