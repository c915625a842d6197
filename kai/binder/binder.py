"""The binder: carries out the scheduler's BindRequests (``scheduling.run.ai/v1alpha2``).

For each BindRequest that is neither Succeeded nor out of attempts, one bind attempt:

1. look up the selected node in the binder's node cache (read from the API server when the cache
   does not have it yet); a missing node fails the attempt;
2. :class:`BindPlugin` ``pre_bind`` hooks (GPU sharing: reservation pods, env injection), then
   ``POST pods/<name>/binding`` with the pod's UID (from the BindRequest's owner reference) as
   precondition and the ``received-resource-type`` annotation, which the API server copies onto the
   pod; then ``post_bind`` hooks. On failure ``rollback`` hooks run in reverse order.

The pod itself is read only when a plugin needs it (shared GPUs), when the BindRequest names no
owner UID, or when the Binding is refused. That keeps a whole-GPU bind at three writes (Binding,
BindRequest status, pod condition) plus its event. The Binding API refuses a second bind of a pod
(409), so a pod is never bound twice. A 404 means the pod is gone and the BindRequest is stale; on
409 the binder reads the pod: another pod of the same name (owner UID differs) or a pod bound to a
different node makes the BindRequest stale, and it is deleted; a pod on the selected node counts as
success (a previous attempt bound it but could not record it).

Outcome on the BindRequest status (as KAI): success -> phase ``Succeeded``; failure -> phase
``Failed`` with ``reason`` and, while below ``spec.backoffLimit``, one more ``failedAttempts``. The
scheduler deletes a Failed BindRequest once ``failedAttempts >= backoffLimit`` (at once without a
limit), so the limit counts attempts: the binder retries, after ``base_delay * 2**failedAttempts``
seconds (capped), only while the count is still below it. A BindRequest out of attempts stays
Failed until the scheduler deletes it; the pod, still pending, is then scheduled again. The pod
gets condition ``PodBound`` and an event ``Bound`` / ``BindingError``.

Succeeded BindRequests stay while their pod exists (the scheduler reads GPU groups from them); a
periodic sweep deletes those whose pod is gone, which the garbage collector would also do through
the owner reference when it runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any, Protocol

from kai.framework.plugins import BINDER_PLUGIN_GROUP, PluginError, build_plugin, discover
from kai.kube.access import Access
from kai.kube.client import STRATEGIC_MERGE_PATCH, ApiError, Kube, object_path
from kai.kube.events import NORMAL, WARNING, record_event
from kai.kube.watch import Informer, object_key
from kai.kube.workqueue import WorkQueue, serve
from kai.logs import fields
from kai.metrics import BinderMetrics

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "scheduling.run.ai", "v1alpha2", "bindrequests"
RECEIVED_RESOURCE_TYPE = "received-resource-type"
POD_BOUND_CONDITION = "PodBound"
COMPONENT = "kai-binder"

#: KAI's binder defaults: ``--max-concurrent-reconciles``, rate limiter base/max delay.
DEFAULT_WORKERS = 10
DEFAULT_BASE_DELAY = 1.0
DEFAULT_MAX_DELAY = 60.0
DEFAULT_SWEEP_PERIOD = 60.0
#: The binder plugins run unless ``--binder-plugins`` says otherwise.
DEFAULT_PLUGINS = ("gpusharing",)

#: Every API call below (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access(GROUP, PLURAL, ("get", "list", "watch", "delete")),
    Access(GROUP, f"{PLURAL}/status", ("patch",)),
    Access("", "pods", ("get", "list", "patch", "create", "delete")),
    Access("", "pods/binding", ("create",)),
    Access("", "pods/status", ("patch",)),
    Access("", "nodes", ("get", "list", "watch")),
    Access("", "configmaps", ("get", "create", "patch", "delete")),
    Access("", "events", ("create",)),
)



class BindError(Exception):
    """One bind attempt failed; the message becomes the BindRequest's ``status.reason``."""


class InvalidBindRequest(BindError):
    """The BindRequest can never be carried out as written (missing fields)."""


class _Stale(Exception):
    """The BindRequest was stale and has been deleted: nothing more to do or to record."""


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
        plugin = build_plugin(name, dict(arguments.get(name) or {}), dict(available), kind="binder plugin")
        plugin.setup(kube)
        plugins.append(plugin)
    return plugins


def backoff_delay(failed_attempts: int, base: float, maximum: float) -> float:
    """Seconds before the next attempt after ``failed_attempts`` failures (KAI: 2**n seconds)."""
    return min(maximum, base * 2.0**failed_attempts)


class Binder:
    """The binder control loop; ``run(stop)`` blocks until ``stop`` is set."""

    name = "binder"

    def __init__(self, kube: Kube, *, plugins: Sequence[BindPlugin] = (), workers: int = DEFAULT_WORKERS,
                 base_delay: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY,
                 sweep_period: float = DEFAULT_SWEEP_PERIOD, metrics: BinderMetrics | None = None,
                 store: Any = None, clock=time.monotonic) -> None:
        if workers < 1:
            raise ValueError(f"binder workers must be at least 1, got {workers}")
        self.kube = kube
        self.plugins = list(plugins)
        self.workers = workers
        self.base_delay, self.max_delay = base_delay, max_delay
        self.sweep_period = sweep_period
        self.metrics = metrics
        self.queue = WorkQueue(clock=clock)
        self._clock = clock
        self._lock = threading.Lock()
        self._informer: Informer | None = None
        #: BindRequests by ``namespace/name``: the informer, or a dict when driven by hand (tests)
        self._store: Any = store if store is not None else {}
        #: Nodes by name (an informer while running); a node it does not hold yet is read from the API
        self._nodes: Any = {}
        self._not_before: dict[str, float] = {}
        self._dirty_nodes: set[str] = set()

    # -- informer side -------------------------------------------------------------------------
    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Informer callback: queue the BindRequest's key (a deleted one is forgotten)."""
        key = object_key(obj)
        if kind == "DELETED":
            node = (obj.get("spec") or {}).get("selectedNode")
            with self._lock:
                self._not_before.pop(key, None)
                if node:
                    self._dirty_nodes.add(node)
        else:
            self.queue.add(key)

    @property
    def synced(self) -> bool:
        return self._informer is not None and self._informer.synced.is_set()

    def ready(self) -> tuple[bool, str]:
        """Readiness: the BindRequests have been listed once."""
        return (True, "synced") if self.synced else (False, "waiting for the first list of bindrequests")

    def run(self, stop: threading.Event) -> None:
        """Watch BindRequests and bind with ``workers`` threads until ``stop`` is set."""
        self._informer = self._store = Informer(self.kube, object_path(GROUP, VERSION, PLURAL),
                                                on_event=self.on_event, name="bindrequests")
        self._informer.start()
        self._nodes = Informer(self.kube, "/api/v1/nodes", transform=slim_node, name="nodes").start()
        workers = [threading.Thread(target=self._work, name=f"binder-{i}", daemon=True) for i in range(self.workers)]
        for thread in workers:
            thread.start()
        log.info("binder started", **fields(workers=self.workers))
        next_sweep = self._clock() + self.sweep_period
        try:
            while not stop.wait(0.5):
                if self.synced and self._clock() >= next_sweep:
                    self.sweep()
                    self.sync_plugins(None)
                    next_sweep = self._clock() + self.sweep_period
                with self._lock:
                    nodes, self._dirty_nodes = self._dirty_nodes, set()
                if nodes:
                    self.sync_plugins(nodes)
        finally:
            self.queue.shut_down()
            self._informer.stop()
            self._nodes.stop()
            for thread in workers:
                thread.join(10)
            log.info("binder stopped")

    def _work(self) -> None:
        serve(self.queue, self.reconcile, self.max_delay, log, "binder failed on a BindRequest", "bind_request")

    def sweep(self) -> int:
        """Delete BindRequests whose pod is gone, replaced or bound to another node; returns how many."""
        requests = [BindRequest.from_object(o) for o in self._store_objects()]  # before the pods: see below
        pods: dict[str, tuple[str, str]] = {}
        query: dict[str, Any] = {"limit": 500}
        try:
            while True:
                page = self.kube.get("/api/v1/pods", query)
                for pod in page.get("items") or ():
                    meta = pod.get("metadata") or {}
                    pods[f"{meta.get('namespace')}/{meta.get('name')}"] = (
                        meta.get("uid", ""), (pod.get("spec") or {}).get("nodeName") or "")
                query["continue"] = (page.get("metadata") or {}).get("continue")
                if not query["continue"]:
                    break
        except ApiError as exc:
            log.warning("stale BindRequest sweep skipped: cannot list pods", **fields(error=str(exc)))
            return 0
        # A pod exists before its BindRequest, so every request listed above has its pod in this later list
        # unless the pod was deleted.
        deleted = 0
        for request in requests:
            uid, node = pods.get(f"{request.namespace}/{request.pod_name}", (None, ""))
            why = None
            if uid is None:
                why = "its pod no longer exists"
            elif request.owner_pod_uid and uid != request.owner_pod_uid:
                why = f"its pod was replaced (uid {request.owner_pod_uid} -> {uid})"
            elif node and node != request.selected_node:
                why = f"its pod is bound to node {node}, not {request.selected_node}"
            if why is not None and not request.deleting:
                self.delete_stale(request, why)
                deleted += 1
        return deleted

    def sync_plugins(self, nodes: set[str] | None) -> None:
        """Let the plugins tidy up after pods on ``nodes`` (None: everywhere) went away."""
        for plugin in self.plugins:
            sync = getattr(plugin, "sync", None)
            if sync is None:
                continue
            try:
                sync(nodes)
            except Exception as exc:  # retried on the next sweep
                log.warning("bind plugin sync failed", **fields(plugin=plugin.name, error=str(exc),
                                                                nodes=",".join(sorted(nodes or ())) or "all"))

    def _store_objects(self) -> list[dict[str, Any]]:
        store = self._store
        return store.list() if hasattr(store, "list") else list(store.values())

    def get(self, key: str) -> dict[str, Any] | None:
        return self._store.get(key)

    # -- one key -------------------------------------------------------------------------------
    def reconcile(self, key: str) -> float | None:
        """Act on one BindRequest; returns the delay before it must be looked at again, if any."""
        obj = self.get(key)
        if obj is None:
            return None
        request = BindRequest.from_object(obj)
        if request.deleting or request.phase == "Succeeded" or request.out_of_attempts:
            return None
        with self._lock:
            not_before = self._not_before.get(key, 0.0)
        if self._clock() < not_before:
            return not_before - self._clock()  # a retry is already scheduled; an event woke us early
        return self.attempt(request)

    def attempt(self, request: BindRequest) -> float | None:
        """One bind attempt and its status; returns the retry delay after a retryable failure."""
        ids = _ids(request)
        ctx = BindContext(request, {}, self.kube, read_pod=lambda: self._read_pod(request))
        try:
            with self._timed():
                if not request.pod_name or not request.selected_node:
                    raise InvalidBindRequest("spec.podName and spec.selectedNode are required")
                ctx.node = self._read_node(request.selected_node)
                self._bind(ctx)
        except _Stale:
            return None
        except BindError as exc:
            self._count("failed")
            return self._failed(request, ctx, str(exc), ids)
        except ApiError as exc:
            self._count("failed")
            return self._failed(request, ctx, f"API error: {exc}", ids)
        if ctx.already_bound:
            self._count("already_bound")
            self._succeeded(request, ctx, event=False)
            return None
        self._count("succeeded")
        log.info("bound pod", **fields(**ids))
        self._succeeded(request, ctx)
        return None

    def _bind(self, ctx: BindContext) -> None:
        done: list[BindPlugin] = []
        try:
            for plugin in self.plugins:
                plugin.pre_bind(ctx)
                done.append(plugin)
            self._post_binding(ctx)
            for plugin in self.plugins:
                plugin.post_bind(ctx)
        except (BindError, ApiError, _Stale):
            for plugin in reversed(done):
                try:
                    plugin.rollback(ctx)
                except Exception as exc:  # the bind error is what the BindRequest must report
                    log.error("bind plugin rollback failed", **fields(plugin=plugin.name, error=str(exc),
                                                                       pod=f"{ctx.request.namespace}/{ctx.request.pod_name}"))
            raise

    def _post_binding(self, ctx: BindContext) -> None:
        request = ctx.request
        uid = request.owner_pod_uid or (ctx.pod.get("metadata") or {}).get("uid")
        metadata: dict[str, Any] = {"name": request.pod_name, "namespace": request.namespace, "uid": uid}
        if request.received_resource_type:
            metadata["annotations"] = {RECEIVED_RESOURCE_TYPE: request.received_resource_type}
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                   "target": {"apiVersion": "v1", "kind": "Node", "name": request.selected_node}}
        try:
            self.kube.post(object_path("", "v1", "pods", request.namespace, request.pod_name, "binding"), binding)
            return
        except ApiError as exc:
            if exc.status == 404:
                self.delete_stale(request, "its pod no longer exists")
                raise _Stale from exc
            if exc.status != 409:
                raise BindError(f"failed to bind pod {request.namespace}/{request.pod_name} to node "
                                f"{request.selected_node}: {exc}") from exc
            refused = exc
        # 409: another pod of that name (stale), or bound meanwhile: by an earlier attempt whose reply
        # was lost (success), or elsewhere (stale)
        ctx.loaded_pod = self._read_pod(request)
        node = (ctx.loaded_pod.get("spec") or {}).get("nodeName")
        if node == request.selected_node:
            ctx.already_bound = True
        elif node:
            self.delete_stale(request, f"its pod is bound to node {node}, not {request.selected_node}")
            raise _Stale
        else:
            raise BindError(f"failed to bind pod {request.namespace}/{request.pod_name} to node "
                            f"{request.selected_node}: {refused}")

    def _read_pod(self, request: BindRequest) -> dict[str, Any]:
        """The pod; raises _Stale after deleting the BindRequest of a pod that is gone or replaced."""
        try:
            pod = self.kube.get(object_path("", "v1", "pods", request.namespace, request.pod_name))
        except ApiError as exc:
            if exc.status == 404:
                self.delete_stale(request, "its pod no longer exists")
                raise _Stale from exc
            raise
        uid = (pod.get("metadata") or {}).get("uid")
        if request.owner_pod_uid and uid != request.owner_pod_uid:
            self.delete_stale(request, f"its pod was replaced (uid {request.owner_pod_uid} -> {uid})")
            raise _Stale
        return pod

    def _read_node(self, name: str) -> dict[str, Any]:
        node = self._nodes.get(name)
        if node is not None:
            return node
        try:
            return slim_node(self.kube.get(object_path("", "v1", "nodes", name=name)))
        except ApiError as exc:
            if exc.status == 404:
                raise BindError(f"node {name} not found") from exc
            raise

    # -- outcomes ------------------------------------------------------------------------------
    def _succeeded(self, request: BindRequest, ctx: BindContext, event: bool = True) -> None:
        self._set_status(request, {"phase": "Succeeded", "reason": None})
        with self._lock:
            self._not_before.pop(request.key, None)
        pod = ctx.pod_ref()
        if pod is not None and event:
            message = f"Pod bound successfully to node {request.selected_node}"
            self._pod_condition(request, "True", "Bound", message)
            record_event(self.kube, pod, NORMAL, "Bound", message, COMPONENT)

    def _failed(self, request: BindRequest, ctx: BindContext, reason: str, ids: dict) -> float | None:
        status: dict[str, Any] = {"phase": "Failed", "reason": reason}
        retry = None
        if request.backoff_limit is not None and request.backoff_limit > request.failed_attempts:
            status["failedAttempts"] = request.failed_attempts + 1
            if request.backoff_limit > status["failedAttempts"]:
                retry = backoff_delay(request.failed_attempts, self.base_delay, self.max_delay)
                with self._lock:
                    self._not_before[request.key] = self._clock() + retry
        suffix = f"; retrying in {retry:g}s" if retry is not None else ""
        log.warning(f"bind failed{suffix}", **fields(**ids, reason=reason, attempt=request.failed_attempts + 1))
        self._set_status(request, status)
        pod = ctx.pod_ref()
        if pod is not None:
            message = (f"Failed to bind pod {request.namespace}/{request.pod_name} to node "
                       f"{request.selected_node}: {reason}")
            self._pod_condition(request, "False", "BindingError", message)
            record_event(self.kube, pod, WARNING, "BindingError", message, COMPONENT)
        return retry

    def delete_stale(self, request: BindRequest, why: str) -> None:
        log.info(f"deleting stale BindRequest: {why}", **fields(**_ids(request)))
        uid = (request.raw.get("metadata") or {}).get("uid")
        try:  # the UID precondition spares a new BindRequest of the same name made meanwhile
            self.kube.delete(object_path(GROUP, VERSION, PLURAL, request.namespace, request.name),
                             {"preconditions": {"uid": uid}} if uid else None)
        except ApiError as exc:
            if exc.status == 409:
                return
            if not exc.status == 404:
                log.error("could not delete stale BindRequest", **fields(
                    bind_request=f"{request.namespace}/{request.name}", error=str(exc)))
                return
        if self.metrics is not None:
            self.metrics.stale_deleted()

    def _set_status(self, request: BindRequest, status: dict[str, Any]) -> None:
        try:
            self.kube.patch(object_path(GROUP, VERSION, PLURAL, request.namespace, request.name), {"status": status},
                            subresource="status")
        except ApiError as exc:
            log.error("could not record BindRequest status", **fields(
                bind_request=f"{request.namespace}/{request.name}", status=status.get("phase"), error=str(exc)))

    def _pod_condition(self, request: BindRequest, status: str, reason: str, message: str) -> None:
        condition = {"type": POD_BOUND_CONDITION, "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            self.kube.request("PATCH", object_path("", "v1", "pods", request.namespace, request.pod_name, "status"),
                              body={"status": {"conditions": [condition]}}, content_type=STRATEGIC_MERGE_PATCH)
        except ApiError as exc:
            log.warning("could not set pod condition", **fields(pod=f"{request.namespace}/{request.pod_name}",
                                                                 condition=POD_BOUND_CONDITION, error=str(exc)))

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.result(result)

    def _timed(self):
        return self.metrics.attempt() if self.metrics is not None else contextlib.nullcontext()


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """A node without what no bind step reads (managed fields, image lists: the bulk of a real node)."""
    meta = {k: v for k, v in (node.get("metadata") or {}).items() if k != "managedFields"}
    status = {k: v for k, v in (node.get("status") or {}).items() if k != "images"}
    return {**node, "metadata": meta, "status": status}


def _ids(request: BindRequest) -> dict[str, str]:
    """The log fields naming a BindRequest, its pod and its node."""
    return {"bind_request": f"{request.namespace}/{request.name}", "pod": f"{request.namespace}/{request.pod_name}",
            "node": request.selected_node}
