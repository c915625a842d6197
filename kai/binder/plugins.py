"""The binder's plugin API: a BindRequest as the binder reads it, the context of one bind, and the
plugins that act around the Binding call, found through the entry-point group ``kai.binder_plugins``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any, Protocol, cast

from kai.kube.client import Kube
from kai.plugin_loader import BINDER_PLUGIN_GROUP, PluginError, build_plugin, discover


class BindError(Exception):
    """One bind attempt failed; the message becomes the BindRequest's ``status.reason``."""


class InvalidBindRequest(BindError):
    """The BindRequest can never be carried out as written (missing fields)."""


@dataclass(frozen=True)
class BindRequest:
    """The fields of a BindRequest the binder acts on."""

    namespace: str
    name: str
    pod_name: str
    selected_node: str
    received_resource_type: str
    selected_gpu_groups: tuple[str, ...]
    backoff_limit: int | None
    phase: str
    failed_attempts: int
    deleting: bool
    owner_pod_uid: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    #: ``spec.predictedNUMAZones`` as written by the scheduler (JSON), empty when none.
    predicted_numa_zones: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def out_of_attempts(self) -> bool:
        """Failed for good: the scheduler's rule for deleting a failed BindRequest."""
        if self.phase != "Failed":
            return False
        return self.backoff_limit is None or self.failed_attempts >= self.backoff_limit

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> BindRequest:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        owner = next((o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
        limit = spec.get("backoffLimit")
        return cls(
            namespace=meta.get("namespace", ""), name=meta.get("name", ""),
            pod_name=spec.get("podName") or "", selected_node=spec.get("selectedNode") or "",
            received_resource_type=spec.get("receivedResourceType") or "",
            selected_gpu_groups=tuple(spec.get("selectedGPUGroups") or ()),
            backoff_limit=int(limit) if limit is not None else None,
            phase=status.get("phase") or "", failed_attempts=int(status.get("failedAttempts") or 0),
            deleting=bool(meta.get("deletionTimestamp")), owner_pod_uid=owner, raw=obj,
            predicted_numa_zones=tuple(spec.get("predictedNUMAZones") or ()),
        )


@dataclass
class BindContext:
    """What bind plugins see; ``state`` carries data from ``pre_bind`` to ``post_bind``/``rollback``.

    ``pod`` is read from the API server on first use (``read_pod``), so binds whose plugins never
    look at it cost no read.
    """

    request: BindRequest
    node: dict[str, Any]
    kube: Kube
    read_pod: Callable[[], dict[str, Any]] = field(repr=False)
    state: dict[str, Any] = field(default_factory=dict)
    loaded_pod: dict[str, Any] | None = field(default=None, repr=False)
    already_bound: bool = False

    @property
    def pod(self) -> dict[str, Any]:
        if self.loaded_pod is None:
            self.loaded_pod = self.read_pod()
        return self.loaded_pod

    def pod_ref(self) -> dict[str, Any] | None:
        """The pod as events and conditions need it: the one read, else the BindRequest's owner reference."""
        if self.loaded_pod is not None:
            return self.loaded_pod
        if not self.request.owner_pod_uid:
            return None
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": self.request.pod_name, "namespace": self.request.namespace, "uid": self.request.owner_pod_uid}}


class BindPlugin(Protocol):
    """A step around the Binding call (GPU sharing, volumes, DRA claims). Raise BindError to fail.

    Built like every plugin by the builder its entry point (group ``kai.binder_plugins``) names,
    ``build(arguments: dict) -> plugin``; :func:`build_plugins` then hands it the binder's client.
    """

    name: str

    def setup(self, kube: Kube) -> None: ...

    def pre_bind(self, ctx: BindContext) -> None: ...

    def post_bind(self, ctx: BindContext) -> None: ...

    def rollback(self, ctx: BindContext) -> None: ...

    # optional: ``sync(nodes)`` tidies what the plugin keeps on ``nodes`` (None: all) after pods went away;
    # called for the node of each deleted BindRequest and on every sweep


#: The argument of KAI's binder plugins that bounds the API writes of one bind, and its default.
TIMEOUT_ARGUMENT = "bindTimeoutSeconds"
DEFAULT_TIMEOUT = 120.0


def bind_timeout(arguments: Mapping[str, Any]) -> float:
    """The plugin's ``bindTimeoutSeconds`` (default 120); ValueError unless a positive number of seconds."""
    value = arguments.get(TIMEOUT_ARGUMENT, DEFAULT_TIMEOUT)
    try:
        timeout = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{TIMEOUT_ARGUMENT} must be a number of seconds, not {value!r}") from None
    if timeout <= 0:
        raise ValueError(f"{TIMEOUT_ARGUMENT} must be positive, not {value!r}")
    return timeout


def build_plugins(names: Sequence[str], arguments: Mapping[str, Mapping[str, Any]], kube: Kube,
                  available: Mapping[str, EntryPoint] | None = None) -> list[BindPlugin]:
    """The binder plugins ``names``, in that order, each built with ``arguments[name]`` (default ``{}``)
    and then given ``kube`` through ``setup``. An unknown or repeated name is a :class:`PluginError`."""
    available = discover(BINDER_PLUGIN_GROUP) if available is None else available
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise PluginError(f"binder plugin(s) {', '.join(twice)} configured twice")
    plugins = []
    for name in names:
        plugin = cast(BindPlugin, build_plugin(name, dict(arguments.get(name) or {}), dict(available),
                                               kind="binder plugin"))
        plugin.setup(kube)
        plugins.append(plugin)
    return plugins
