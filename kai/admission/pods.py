"""The pod webhooks: what is refused (``POST /validate--v1-pod``) and how a new pod is prepared
(``POST /mutate--v1-pod``), as KAI's admission plugins do, in KAI's order.

Validation, for pods of the scheduler (``spec.schedulerName``), first refusal wins:

1. with GPU sharing off (``--gpu-sharing-enabled=false``), a pod with ``gpu-fraction`` or ``gpu-memory``
   (KAI's message);
2. annotation ``mps: "true"`` without ``gpu-fraction`` or ``gpu-memory`` (KAI's message);
3. a malformed GPU-sharing request, by the scheduler's own reading,
   :func:`kai.api.resources.parse_gpu_sharing`, given the ``nvidia.com/gpu`` limit of the first container
   (then init container) that sets one, as KAI's validator reads it;
4. with ``--block-nvidia-visible-devices``, a container choosing its GPUs (:mod:`kai.admission.deviceaccess`).

Mutation, on CREATE: the shared-GPU ConfigMap references (:func:`kai.kube.sharedgpu.mutate`, with
``--hami-core-enabled`` also HAMi-core's ``CUDA_DEVICE_MEMORY_LIMIT`` and ``CUDA_DEVICE_SM_LIMIT``); with
``--block-nvidia-visible-devices``, ``NVIDIA_VISIBLE_DEVICES=void`` in containers without a GPU; and the runtime
class ``--gpu-fraction-runtime-class-name`` for a pod with ``gpu-fraction`` or ``gpu-memory`` that names none.
"""

from __future__ import annotations

import base64
import copy
import json

import attrs

from kai.admission import deviceaccess
from kai.admission.responses import allow, deny, kind, object_name, refusal
from kai.api.names import GPU, SCHEDULER_NAME
from kai.api.resources import parse_gpu_sharing
from kai.common.quantity import parse
from kai.kube.sharedgpu import json_patch, mutate, requests_sharing

#: KAI's annotation asking for an MPS server next to a shared GPU.
MPS_ANNOTATION = "mps"
#: KAI's default ``--gpu-fraction-runtime-class-name``.
DEFAULT_RUNTIME_CLASS = "nvidia"


@attrs.frozen
class PodPolicy:
    """The pod webhooks' options. The defaults keep what this scheduler always did: sharing on, no other
    check, no runtime class (``kai-scheduler run`` sets KAI's runtime class by default)."""

    scheduler_name: str = SCHEDULER_NAME
    gpu_sharing: bool = True
    block_visible_devices: bool = False
    runtime_class: str = ""
    #: ``--hami-core-enabled``: the fraction container reads HAMi-core's limits (kai.binder.hamicore).
    hami_core: bool = False


def gpu_limit(spec: dict) -> float:
    """The ``nvidia.com/gpu`` limit of the first container (then init container) that sets one; 0 without."""
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        limits = (container.get("resources") or {}).get("limits") or {}
        if GPU in limits:
            return float(parse(limits[GPU]))
    return 0.0


def pod_problem(pod: object, policy: PodPolicy = PodPolicy(), name: str = "") -> str | None:
    """Why the pod ``namespace/name`` is refused, or None (also for other schedulers' pods)."""
    if not isinstance(pod, dict):
        return None
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != policy.scheduler_name:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    sharing = requests_sharing(annotations)
    if sharing and not policy.gpu_sharing:
        return f"attempting to create a pod {name} with gpu sharing request, while GPU sharing is disabled"
    if not sharing and annotations.get(MPS_ANNOTATION) == "true":
        return "MPS is only supported with GPU fraction request"
    try:
        parse_gpu_sharing(annotations, gpu_limit(spec))
    except ValueError as exc:  # GpuRequestError names the annotation; QuantityError the limit
        return f"invalid GPU request of pod {name}: {exc}"
    return deviceaccess.problem(pod) if policy.block_visible_devices else None


def review(request: dict, policy: PodPolicy = PodPolicy()) -> dict:
    """The ``response`` of a validating AdmissionReview of a pod."""
    if kind(request) not in ("Pod", "") or request.get("operation") not in ("CREATE", "UPDATE"):
        return allow(request)
    name = object_name(request)
    problem = refusal(request, lambda pod: pod_problem(pod, policy, name))
    return allow(request) if problem is None else deny(request, problem)


def prepared(pod: dict, policy: PodPolicy = PodPolicy()) -> dict:
    """The pod as the mutating webhook leaves it (a new dict). ValueError naming the fault when
    ``gpu-fraction-container-name`` names a missing container."""
    out = mutate(pod, hami_core=policy.hami_core) or copy.deepcopy(pod)
    if policy.block_visible_devices:
        deviceaccess.block_unrequested(out)
    spec = out.get("spec") or {}
    if (policy.runtime_class and not spec.get("runtimeClassName")
            and requests_sharing((out.get("metadata") or {}).get("annotations") or {})):
        spec["runtimeClassName"] = policy.runtime_class
    return out


def mutation_review(request: dict, policy: PodPolicy = PodPolicy()) -> dict:
    """The ``response`` of a mutating AdmissionReview: a JSON patch preparing a new pod of the scheduler,
    or a refusal of a pod whose fraction container does not exist."""
    pod = request.get("object")
    if (kind(request) not in ("Pod", "") or request.get("operation") != "CREATE" or not isinstance(pod, dict)
            or (pod.get("spec") or {}).get("schedulerName") != policy.scheduler_name):
        return allow(request)
    try:
        patch = json_patch(pod, prepared(pod, policy))
    except ValueError as exc:
        return deny(request, f"invalid GPU request of pod {object_name(request)}: {exc}")
    response = allow(request)
    if patch:
        response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
    return response
