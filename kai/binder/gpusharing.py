"""How a shared-GPU pod learns its device: KAI's ConfigMap contract, used by admission and the binder.

A pod's spec cannot change once it exists, so (as in KAI) the admission webhook prepares it when it
is created and the binder fills in the values when it binds it:

* admission (:func:`mutate`): a pod with ``gpu-fraction`` or ``gpu-memory`` gets the annotation
  ``runai/shared-gpu-configmap: <owner or pod name>-<7 random>-shared-gpu`` (the *prefix*); its
  fraction container (annotation ``gpu-fraction-container-name``, else the first container; init
  containers too) gets ``NVIDIA_VISIBLE_DEVICES``, ``RUNAI_NUM_OF_GPUS`` and ``GPU_PORTION`` from
  the keys of ConfigMap ``<prefix>-<index>`` (``<prefix>-i<index>`` for an init container), that
  ConfigMap as volume ``<prefix>-<index>-vol``, and ``envFrom`` ConfigMap ``<prefix>-<index>-evar``.
* binder (:class:`GpuSharing`, the binder plugin ``gpusharing`` built by :func:`build`): before the
  Binding, the devices of the BindRequest's GPU groups (:mod:`kai.binder.reservation`), then both
  ConfigMaps upserted with the pod as owner: ``NVIDIA_VISIBLE_DEVICES`` (comma-separated devices; in
  the ``-evar`` ConfigMap when the container does not read it from the other one), ``GPU_PORTION``
  and ``RUNAI_NUM_OF_GPUS`` (the BindRequest's ``receivedGPU.portion``). A failed bind deletes both
  ConfigMaps and releases the pod's groups.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kai.binder.plugins import BindContext, BindError, InvalidBindRequest
from kai.binder.reservation import Reservations
from kai.common.durations import parse_duration
from kai.common.quantity import parse
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.sharedgpu import CONFIGMAP_ANNOTATION, FRACTION, configmap_data, fraction_container, index_tag
from kai.logs import fields

log = logging.getLogger(__name__)

def configmap_names(pod: dict[str, Any]) -> tuple[str, str]:
    """(capabilities, env-vars) ConfigMap names of a pod admission prepared; BindError otherwise."""
    meta = pod.get("metadata") or {}
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    prefix = (meta.get("annotations") or {}).get(CONFIGMAP_ANNOTATION)
    if not prefix:
        raise BindError(f"pod {name} has no annotation {CONFIGMAP_ANNOTATION}: it was created without the "
                        "admission webhook, which prepares shared-GPU pods")
    try:
        kind, index = fraction_container(pod)
    except ValueError as exc:
        raise BindError(f"pod {name}: {exc}") from exc
    capabilities = f"{prefix}-{index_tag(kind, index)}"
    return capabilities, f"{capabilities}-evar"


#: Arguments of ``gpusharing`` passed on to :class:`Reservations`, with the keyword each one sets.
RESERVATION_ARGUMENTS = {"namespace": "namespace", "appLabel": "app", "image": "image",
                         "serviceAccount": "service_account", "runtimeClass": "runtime_class"}
#: Arguments of ``gpusharing`` that are JSON objects (a mapping, or its JSON text as KAI's binder flags give it),
#: with the keyword of :class:`Reservations` each one sets.
RESERVATION_OBJECTS = {"podResources": "pod_resources", "podSecurityContext": "pod_security_context",
                       "containerSecurityContext": "container_security_context"}
#: Go's strconv.ParseBool spellings, which KAI's string arguments use.
_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
          **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


def build(arguments: dict[str, Any]) -> GpuSharing:
    """The ``gpusharing`` binder plugin (entry point of ``kai.binder_plugins``).

    Arguments, all optional: KAI's ``cdiEnabled``; the reservation pods' ``namespace``, ``appLabel``,
    ``image``, ``serviceAccount`` and ``runtimeClass``, ``fakeGpuNodes``, ``allocationTimeout`` (a Go
    duration or seconds), and the objects ``podResources`` (``requests``, ``limits``), ``podSecurityContext``
    and ``containerSecurityContext``. ``kai-scheduler run`` sets them from its GPU-sharing flags unless the binder
    plugin configuration gives them. Booleans may be given as Go spells them ("true", "false", "1", ...).
    """
    unknown = sorted(set(arguments) - set(RESERVATION_ARGUMENTS) - set(RESERVATION_OBJECTS)
                     - {"allocationTimeout", "cdiEnabled", "fakeGpuNodes"})
    if unknown:
        raise ValueError(f"unknown argument(s) {', '.join(unknown)}")
    options: dict[str, Any] = {key: arguments[arg] for arg, key in RESERVATION_ARGUMENTS.items() if arg in arguments}
    options.update({key: _object(arguments[arg], arg) for arg, key in RESERVATION_OBJECTS.items()
                    if arguments.get(arg) not in (None, "")})
    if "pod_resources" in options:
        _check_resources(options["pod_resources"])
    if "allocationTimeout" in arguments:
        options["timeout"] = parse_duration(arguments["allocationTimeout"], "allocationTimeout")
    if "fakeGpuNodes" in arguments:
        options["fake_gpu_nodes"] = _bool(arguments["fakeGpuNodes"], "fakeGpuNodes")
    return GpuSharing(cdi=_bool(arguments.get("cdiEnabled", False), "cdiEnabled"), **options)


def _object(value: Any, name: str) -> dict[str, Any]:
    """A JSON object argument: a mapping, or its JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expected a JSON object, not {type(value).__name__}")
    return value


def _check_resources(resources: dict[str, Any]) -> None:
    """``podResources``: ``requests`` and ``limits``, each resource name -> a quantity."""
    for key, amounts in resources.items():
        if key not in ("requests", "limits"):
            raise ValueError(f"podResources: field {key!r} is not known; known fields: requests, limits")
        if not isinstance(amounts, dict):
            raise ValueError(f"podResources.{key}: expected a mapping of resource names to quantities")
        for resource, amount in amounts.items():
            try:
                parse(str(amount))
            except ValueError:
                raise ValueError(f"podResources.{key}.{resource}: {amount!r} is not a quantity") from None


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _BOOLS:
        return _BOOLS[value]
    raise ValueError(f"{name}: {value!r} is not a boolean (true or false)")


class GpuSharing:
    """The binder plugin: reserve the devices of a ``Fraction`` BindRequest's groups and fill the pod's ConfigMaps.

    ``reservation_options`` are keyword arguments of :class:`Reservations`; :meth:`setup` gives the client.
    """

    name = "gpusharing"
    kube: Kube
    reservations: Reservations

    def __init__(self, cdi: bool = False, **reservation_options: Any) -> None:
        self.cdi = cdi
        self.reservation_options = reservation_options

    def setup(self, kube: Kube) -> None:
        self.kube = kube
        self.reservations = Reservations(kube, **self.reservation_options)

    def pre_bind(self, ctx: BindContext) -> None:
        request = ctx.request
        if request.received_resource_type != FRACTION:
            return
        pod = ctx.pod
        if not request.selected_gpu_groups:
            raise InvalidBindRequest("a Fraction BindRequest needs spec.selectedGPUGroups")
        capabilities_name, evar_name = configmap_names(pod)
        self.reservations.sync_node(request.selected_node)
        try:
            devices = [self.reservations.reserve(pod, ctx.node, group, multi=len(request.selected_gpu_groups) > 1)
                       for group in request.selected_gpu_groups]
            if self.cdi:
                devices = [f"k8s.device-plugin.nvidia.com/gpu={d}" for d in devices]
            portion = str(((request.raw.get("spec") or {}).get("receivedGPU") or {}).get("portion") or "")
            existing = self._upsert(pod, capabilities_name, {})
            capabilities, evar = configmap_data(pod, devices, portion, existing)
            self._upsert(pod, evar_name, evar)
            self._upsert(pod, capabilities_name, capabilities)
        except (BindError, ApiError):
            self.rollback(ctx)  # the binder rolls back only the plugins whose pre_bind completed
            raise
        log.info("shared GPU devices set", **fields(pod=_key(pod), node=request.selected_node,
                                                    groups=",".join(request.selected_gpu_groups),
                                                    devices=",".join(devices), portion=portion))

    def post_bind(self, ctx: BindContext) -> None:
        pass

    def rollback(self, ctx: BindContext) -> None:
        if ctx.request.received_resource_type != FRACTION:
            return
        try:
            names: tuple[str, ...] = configmap_names(ctx.pod)
        except BindError:
            names = ()
        for name in names:
            try:
                self.kube.delete(object_path("", "v1", "configmaps", ctx.request.namespace, name))
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.reservations.release(ctx.pod, ctx.request.selected_node)

    def sync(self, nodes: set[str] | None = None) -> None:
        """Delete reservation pods whose group has no more workload pods (on ``nodes``, or everywhere)."""
        self.reservations.sync(nodes)

    def _upsert(self, pod: dict[str, Any], name: str, data: dict[str, str]) -> dict[str, str]:
        """Creates ConfigMap ``name`` owned by ``pod``, or adds ``data`` to it; returns its data."""
        meta = pod["metadata"]
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta.get("uid")}]
        path = object_path("", "v1", "configmaps", meta["namespace"], name)
        try:
            current = self.kube.get(path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                    "metadata": {"name": name, "namespace": meta["namespace"], "ownerReferences": owner}}
            return self.kube.post(object_path("", "v1", "configmaps", meta["namespace"]), body).get("data") or {}
        patch: dict[str, Any] = {"data": data} if data else {}
        if (current.get("metadata") or {}).get("ownerReferences") != owner:
            patch["metadata"] = {"ownerReferences": owner}
        return (self.kube.patch(path, patch) if patch else current).get("data") or {}


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
