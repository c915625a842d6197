"""KAI's ``deviceaccess`` admission plugin (``--block-nvidia-visible-devices``): pods may not choose their
GPUs through ``NVIDIA_VISIBLE_DEVICES``, which would get around NVIDIA's device plugin.

* Mutating (:func:`block_unrequested`): a container that requests no GPU (no ``nvidia.com/gpu`` and no
  ``nvidia.com/mig-*`` above zero) gets ``NVIDIA_VISIBLE_DEVICES=void``, replacing a value it sets itself.
* Validating (:func:`problem`): a container setting ``NVIDIA_VISIBLE_DEVICES`` to anything but ``void`` or
  ``none``, or from a ``valueFrom`` reference, is refused with KAI's message.

The fraction container of a shared-GPU pod (:func:`kai.kube.sharedgpu.fraction_container`) is exempt from
both: the GPU-sharing mutation points its ``NVIDIA_VISIBLE_DEVICES`` at the ConfigMap the binder fills.
Because the mutation runs first, in practice a pod is refused for a value it sets in a container that asks
for a GPU. A container whose variable comes from ``valueFrom`` is left to the refusal (KAI writes ``void``
next to the reference, which the API server then refuses as a variable with both).

GPU requests are read from ``resources.requests`` as KAI does, and from ``limits`` when a request is
missing: the API server copies an extended resource's limit into its request before admission.
"""

from __future__ import annotations

from typing import Any

from kai.api.names import GPU, MIG_PREFIX
from kai.common.quantity import QuantityError, parse
from kai.kube.sharedgpu import VISIBLE_DEVICES, fraction_container, requests_sharing

ALLOWED_VALUES = ("void", "none")
BLOCKED = "void"
_KINDS = ("initContainers", "containers")


def problem(pod: dict[str, Any]) -> str | None:
    """KAI's refusal of a container that sets ``NVIDIA_VISIBLE_DEVICES``, or None."""
    try:
        exempt = _fraction_container(pod)
    except ValueError as exc:
        return f"failed to get fraction container ref: {exc}"
    for kind, index, container in _containers(pod):
        if (kind, index) == exempt:
            continue
        for env in container.get("env") or ():
            if env.get("name") != VISIBLE_DEVICES:
                continue
            name, value = container.get("name", ""), env.get("value") or ""
            if value and value not in ALLOWED_VALUES:
                return (f"container {name} has an environment variable NVIDIA_VISIBLE_DEVICES defined with a value of "
                        f"{value}. This is forbidden due to conflicts with Nvidia's device plugin. The only values "
                        "that are allowed are 'void' or 'none'")
            if not value and env.get("valueFrom") is not None:
                return (f"container {name} has an environment variable NVIDIA_VISIBLE_DEVICES defined with a "
                        "valueFrom reference. This is forbidden due to possible conflicts with Nvidia's device plugin")
    return None


def block_unrequested(pod: dict[str, Any]) -> None:
    """Sets ``NVIDIA_VISIBLE_DEVICES=void`` in ``pod``'s containers that request no GPU (in place).

    ValueError when ``gpu-fraction-container-name`` names a missing container."""
    exempt = _fraction_container(pod)
    for kind, index, container in _containers(pod):
        if (kind, index) == exempt or requests_gpu(container):
            continue
        env = container.setdefault("env", [])
        current = next((e for e in env if e.get("name") == VISIBLE_DEVICES), None)
        if current is None:
            env.append({"name": VISIBLE_DEVICES, "value": BLOCKED})
        elif current.get("valueFrom") is None:
            current["value"] = BLOCKED


def requests_gpu(container: dict[str, Any]) -> bool:
    """Whether the container requests whole GPUs or a MIG device (a quantity above zero)."""
    resources = container.get("resources") or {}
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    for name, quantity in requests.items():
        if name == GPU or name.startswith(MIG_PREFIX):
            try:
                if parse(quantity) != 0:
                    return True
            except QuantityError:
                return True  # the API server refuses the pod for it; do not touch the container meanwhile
    return False


def _fraction_container(pod: dict[str, Any]) -> tuple[str, int] | None:
    """The exempt container of a shared-GPU pod, or None (also for a pod without containers)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not requests_sharing(annotations) or not (pod.get("spec") or {}).get("containers"):
        return None
    return fraction_container(pod)


def _containers(pod: dict[str, Any]):
    spec = pod.get("spec") or {}
    for kind in _KINDS:
        for index, container in enumerate(spec.get(kind) or ()):
            yield kind, index, container
