"""The ``hamicore`` binder plugin: GPU-memory limits for shared-GPU pods, enforced by HAMi-core (KAI v0.17).

HAMi-core (``libvgpu.so``, preloaded into GPU containers by kai-resource-isolator or an equivalent webhook)
intercepts CUDA's memory allocation calls and caps a container at ``CUDA_DEVICE_MEMORY_LIMIT``. For a pod
that received a fraction of a GPU (``receivedResourceType: Fraction``), this plugin writes that key into
the pod's capabilities ConfigMap, which :mod:`kai.binder.gpusharing` created just before (so it must run
after it: a lower priority) and from which the admission webhook (``--hami-core-enabled``) made the
fraction container read it: the node's GPU memory (label ``nvidia.com/gpu.memory``, MiB) times the
portion the pod received, as ``<MiB>m``. When that cannot be worked out (no such label on the node, or no
portion) the bind fails and is retried rather than letting the pod run uncapped, as KAI after v0.17.

With the argument ``smLimit: "true"`` (off by default; KAI sets only the memory limit) it also writes
HAMi-core's compute share ``CUDA_DEVICE_SM_LIMIT``, the portion as a percentage of the GPU's SMs.

What it protects: a pod of a shared GPU cannot allocate more device memory than its share, so one pod no
longer exhausts the memory of the others, and ``nvidia-smi`` in the container shows its share. What it does
not: without HAMi-core in the container the variables do nothing; code that bypasses the CUDA runtime and
driver API it intercepts (or unsets ``LD_PRELOAD``) is not limited; the SM share is a time-sliced cap, not
isolation (no MIG-like separation of faults, caches or bandwidth); whole-GPU pods are untouched.
"""

from __future__ import annotations

import logging
from typing import Any

from kai.api.names import GPU_MEMORY_LABEL
from kai.binder.gpusharing import configmap_names
from kai.binder.plugins import BindContext, BindError
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.sharedgpu import FRACTION
from kai.logs import fields

log = logging.getLogger(__name__)

NAME = "hamicore"
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
SM_ARGUMENT = "smLimit"
_BOOLS = {"true": True, "false": False, "1": True, "0": False}


def build(arguments: dict[str, Any]) -> HamiCore:
    unknown = sorted(set(arguments) - {SM_ARGUMENT})
    if unknown:
        raise ValueError(f"{NAME}: unknown argument(s) {', '.join(unknown)}; the argument is {SM_ARGUMENT}")
    value = str(arguments.get(SM_ARGUMENT, "false")).lower()
    if value not in _BOOLS:
        raise ValueError(f"{SM_ARGUMENT}: {arguments[SM_ARGUMENT]!r} is not a boolean (true or false)")
    return HamiCore(_BOOLS[value])


def limits(node_memory_mib: int, portion: float, sm_limit: bool = False) -> dict[str, str]:
    """The HAMi-core variables for ``portion`` of a GPU of ``node_memory_mib`` (empty when either is unknown)."""
    memory = int(node_memory_mib * portion)
    if memory <= 0:
        return {}
    out = {MEMORY_LIMIT: f"{memory}m"}
    if sm_limit:
        out[SM_LIMIT] = str(max(1, min(100, round(portion * 100))))
    return out


def _label_mib(value: str | None) -> int:
    """The node label's MiB as written (KAI's plugin reads it unrounded, unlike the scheduler); 0 when bad."""
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0


class HamiCore:
    name = NAME
    kube: Kube

    def __init__(self, sm_limit: bool = False) -> None:
        self.sm_limit = sm_limit

    def setup(self, kube: Kube) -> None:
        self.kube = kube

    def pre_bind(self, ctx: BindContext) -> None:
        request = ctx.request
        if request.received_resource_type != FRACTION:
            return
        labels = (ctx.node.get("metadata") or {}).get("labels") or {}
        memory = _label_mib(labels.get(GPU_MEMORY_LABEL))
        portion_text = str(((request.raw.get("spec") or {}).get("receivedGPU") or {}).get("portion") or "")
        try:
            portion = float(portion_text)
        except ValueError:
            portion = 0.0
        values = limits(memory, portion, self.sm_limit)
        if not values:
            raise BindError(f"cannot work out {MEMORY_LIMIT}: node {request.selected_node} has "
                            f"{GPU_MEMORY_LABEL}={labels.get(GPU_MEMORY_LABEL, '')!r}, the received portion is "
                            f"{portion_text!r}")
        capabilities, _ = configmap_names(ctx.pod)
        try:
            self.kube.patch(object_path("", "v1", "configmaps", request.namespace, capabilities), {"data": values})
        except ApiError as exc:
            raise BindError(f"cannot set {MEMORY_LIMIT} in ConfigMap {request.namespace}/{capabilities}: {exc}") \
                from None
        log.info("GPU memory limit set", **fields(pod=f"{request.namespace}/{request.pod_name}", **values))

    def post_bind(self, ctx: BindContext) -> None:
        return None

    def rollback(self, ctx: BindContext) -> None:
        return None  # the ConfigMap is gpusharing's, deleted by its own rollback
