"""KAI's shared-GPU ConfigMap contract: how a shared-GPU pod learns its devices.

A pod's spec cannot change once it exists, so (as in KAI) the admission webhook prepares it when it
is created (:func:`mutate`) and the binder fills in the values when it binds it
(:func:`configmap_data`); :mod:`kai.binder.gpusharing` describes both sides.
"""

from __future__ import annotations

import copy
import random
import string
from typing import Any

from kai.api.names import GPU_FRACTION, GPU_FRACTION_CONTAINER, GPU_MEMORY, SHARED_GPU_CONFIGMAP

CONFIGMAP_ANNOTATION = SHARED_GPU_CONFIGMAP
FRACTION_CONTAINER_ANNOTATION = GPU_FRACTION_CONTAINER
SHARING_ANNOTATIONS = (GPU_FRACTION, GPU_MEMORY)
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
LEGACY_VISIBLE_DEVICES = "RUNAI-VISIBLE-DEVICES"
NUM_OF_GPUS = "RUNAI_NUM_OF_GPUS"
GPU_PORTION = "GPU_PORTION"
FRACTION = "Fraction"
_SUFFIX = "shared-gpu"
_RANDOM_CHARS = 7
_MAX_VOLUME_NAME = 63


def requests_sharing(annotations: dict[str, str]) -> bool:
    return any(key in annotations for key in SHARING_ANNOTATIONS)


def fraction_container(pod: dict[str, Any]) -> tuple[str, int]:
    """(``containers`` or ``initContainers``, index) of the container that gets the shared GPU."""
    spec = pod.get("spec") or {}
    name = ((pod.get("metadata") or {}).get("annotations") or {}).get(FRACTION_CONTAINER_ANNOTATION)
    if name is None:
        return "containers", 0
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or ()):
            if container.get("name") == name:
                return kind, index
    raise ValueError(f"annotation {FRACTION_CONTAINER_ANNOTATION} names container {name!r}, which the pod lacks")


def index_tag(kind: str, index: int) -> str:
    return f"i{index}" if kind == "initContainers" else str(index)


def configmap_prefix(pod: dict[str, Any], tag: str, rand: random.Random | None = None) -> str:
    """A new prefix: the owner's (else the pod's) name, cut so that the longest derived name fits a volume name."""
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or ()
    base = owners[0].get("name", "") if owners else meta.get("name") or meta.get("generateName", "").rstrip("-")
    # <base>-<random>-shared-gpu-<tag>-evar-vol must stay within 63 characters
    room = _MAX_VOLUME_NAME - len(_SUFFIX) - _RANDOM_CHARS - 2 - (len(tag) + 1) - len("-evar") - len("-vol")
    token = "".join((rand or random.SystemRandom()).choice(string.ascii_lowercase + string.digits)
                    for _ in range(_RANDOM_CHARS))
    return f"{base[:room]}-{token}-{_SUFFIX}"


def _set_env(container: dict[str, Any], name: str, configmap: str, optional: bool = False) -> None:
    env = [e for e in container.get("env") or () if e.get("name") != name]
    ref = {"name": configmap, "key": name, **({"optional": True} if optional else {})}
    env.append({"name": name, "valueFrom": {"configMapKeyRef": ref}})
    container["env"] = env


#: HAMi-core's limits the ``hamicore`` binder plugin writes into the capabilities ConfigMap.
HAMI_CORE_VARIABLES = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")


def mutate(pod: dict[str, Any], rand: random.Random | None = None, hami_core: bool = False) -> dict[str, Any] | None:
    """The pod as admission leaves it (a new dict), or None when it asks for no shared GPU. With ``hami_core``
    the fraction container also reads HAMi-core's limits from the capabilities ConfigMap (optional keys).

    ValueError when ``gpu-fraction-container-name`` names a missing container."""
    meta = pod.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    if not (pod.get("spec") or {}).get("containers") or not requests_sharing(annotations):
        return None
    kind, index = fraction_container(pod)
    tag = index_tag(kind, index)
    out = copy.deepcopy(pod)
    prefix = annotations.get(CONFIGMAP_ANNOTATION) or configmap_prefix(pod, tag, rand)
    annotations[CONFIGMAP_ANNOTATION] = prefix
    out.setdefault("metadata", {})["annotations"] = annotations
    capabilities, evar = f"{prefix}-{tag}", f"{prefix}-{tag}-evar"
    container = out["spec"][kind][index]
    for name in (VISIBLE_DEVICES, NUM_OF_GPUS, GPU_PORTION):
        _set_env(container, name, capabilities)
    for name in HAMI_CORE_VARIABLES if hami_core else ():
        _set_env(container, name, capabilities, optional=True)
    env_from = container.setdefault("envFrom", [])
    if not any((e.get("configMapRef") or {}).get("name") == evar for e in env_from):
        env_from.append({"configMapRef": {"name": evar, "optional": False}})
    volume = f"{capabilities}-vol"
    volumes = [v for v in out["spec"].get("volumes") or () if v.get("name") != volume]
    out["spec"]["volumes"] = [*volumes, {"name": volume, "configMap": {"name": capabilities}}]
    return out


def mutation_patch(pod: dict[str, Any], rand: random.Random | None = None) -> list[dict[str, Any]]:
    """:func:`mutate` as RFC 6902 operations for an AdmissionReview response ([] when nothing changes)."""
    out = mutate(pod, rand)
    return [] if out is None else json_patch(pod, out)


#: The parts of a pod that admission may change, in the order of the patch operations.
PATCHED_FIELDS = (("metadata", "annotations"), ("spec", "initContainers"), ("spec", "containers"),
                  ("spec", "volumes"), ("spec", "runtimeClassName"))


def json_patch(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 ``add`` operations (which also replace) turning ``before`` into ``after``, for the
    :data:`PATCHED_FIELDS` that differ."""
    ops = []
    for section, field in PATCHED_FIELDS:
        value = (after.get(section) or {}).get(field)
        if value != (before.get(section) or {}).get(field):
            ops.append({"op": "add", "path": f"/{section}/{field}", "value": value})
    return ops


def configmap_data(pod: dict[str, Any], devices: list[str], portion: str,
                   capabilities_data: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The entries the binder writes into the (capabilities, env-vars) ConfigMaps of ``pod``."""
    kind, index = fraction_container(pod)
    container = ((pod.get("spec") or {}).get(kind) or [{}])[index]
    visible = ",".join(devices)
    reads_capabilities = any(e.get("name") == VISIBLE_DEVICES and (e.get("valueFrom") or {}).get("configMapKeyRef")
                             for e in container.get("env") or ())
    capabilities = {GPU_PORTION: portion, NUM_OF_GPUS: portion}
    evar: dict[str, str] = {}
    (capabilities if reads_capabilities else evar)[VISIBLE_DEVICES] = visible
    if LEGACY_VISIBLE_DEVICES in capabilities_data:
        capabilities[LEGACY_VISIBLE_DEVICES] = visible
    return capabilities, evar
