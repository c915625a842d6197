"""The binder: carries out the scheduler's BindRequests (``scheduling.run.ai/v1alpha2``).

For each BindRequest that is neither Succeeded nor out of attempts, one bind attempt:

1. look up the selected node in the binder's node cache (read from the API server when the cache
   does not have it yet); a missing node fails the attempt;
2. :class:`BindPlugin` ``pre_bind`` hooks (GPU sharing: reservation pods, env injection), then
   ``POST pods/<name>/binding`` with the pod's UID (from the BindRequest's owner reference) as
   precondition and the ``received-resource-type`` annotation (and
   ``kai.scheduler/numa-placement-predicted`` from the BindRequest's ``spec.predictedNUMAZones``),
   which the API server copies onto the pod; then ``post_bind`` hooks. On failure ``rollback`` hooks
   run in reverse order.

The pod itself is read only when a plugin needs it (shared GPUs), when the BindRequest names no
owner UID, or when the Binding is refused. That keeps a whole-GPU bind at two writes on the worker's
path (Binding, BindRequest status); the pod condition and the event that report it follow on lanes of
their own (:mod:`kai.kube.lanes`), so the worker goes on to the next BindRequest meanwhile. The
Binding API refuses a second bind of a pod (409), so a pod is never bound twice. A 404 means the pod
is gone and the BindRequest is stale; on 409 the binder reads the pod: another pod of the same name
(owner UID differs) or a pod bound to a different node makes the BindRequest stale, and it is
deleted; a pod on the selected node counts as success (a previous attempt bound it but could not
record it).

Outcome on the BindRequest status (as KAI): success -> phase ``Succeeded``; failure -> phase
``Failed`` with ``reason`` and, while below ``spec.backoffLimit``, one more ``failedAttempts``. The
scheduler deletes a Failed BindRequest once ``failedAttempts >= backoffLimit`` (at once without a
limit), so the limit counts attempts: the binder retries, after ``base_delay * 2**failedAttempts``
seconds (capped), only while the count is still below it. A BindRequest out of attempts stays
Failed until the scheduler deletes it; the pod, still pending, is then scheduled again. A failure whose
status cannot be written (the API server away) is attempted again after the same delay: nobody else learns
of it. The pod gets condition ``PodBound`` and an event ``Bound`` / ``BindingError``, in the order of the outcomes
(one lane per pod); a stopping binder gives the queued ones its stop timeout. The status and the
condition name the object's UID (a JSON patch testing the BindRequest's, the pod's in the patch), so
an outcome never lands on a new object of the same name -- the scheduler replaces a BindRequest
whose node vanished, maybe while this one was being carried out.

With ``settings`` (a :class:`kai.kube.kaiconfig.KaiObjects` of
:class:`kai.binder.settings.BinderPlugins`, following ``Config kai-config``) the plugin list is replaced
between binds when the Config changes it: a bind in progress finishes with the plugins it started with, the
next one runs the new list; the watches of new plugins are started and those of dropped ones stopped.

Succeeded BindRequests stay while their pod exists (the scheduler reads GPU groups from them); a
periodic sweep deletes those whose pod is gone, which the garbage collector would also do through
the owner reference when it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from kai.api import names
from kai.api.names import NUMA_PLACEMENT_PREDICTED_ANNOTATION, POD_BOUND_CONDITION, RECEIVED_RESOURCE_TYPE
from kai.binder import outcomes
from kai.binder.plugins import BindContext, BindError, BindPlugin, BindRequest, InvalidBindRequest
from kai.common.times import rfc3339
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.controller import Controller
from kai.kube.events import NORMAL, WARNING, record_event
from kai.kube.kaiconfig import CONFIG_STATUS_ACCESS, KaiObjects
from kai.kube.lanes import Lanes
from kai.kube.watch import Informer, object_key
from kai.logs import fields
from kai.metrics import BinderMetrics

log = logging.getLogger(__name__)

GROUP, _, PLURAL = names.BINDREQUESTS

#: KAI's binder defaults: ``--max-concurrent-reconciles``, rate limiter base/max delay.
DEFAULT_WORKERS = 10
DEFAULT_BASE_DELAY = 1.0
DEFAULT_MAX_DELAY = 60.0
DEFAULT_SWEEP_PERIOD = 60.0
#: Threads writing the pod conditions and events that report outcomes, off the bind workers' path.
FOLLOWUP_LANES = 4

#: Every API call of the binder and its plugins (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access(GROUP, PLURAL, ("get", "list", "watch", "delete")),
    Access(GROUP, f"{PLURAL}/status", ("patch",)),
    Access("", "pods", ("get", "list", "patch", "create", "delete")),
    Access("", "pods/binding", ("create",)),
    Access("", "pods/status", ("patch",)),
    Access("", "nodes", ("get", "list", "watch")),
    Access("", "configmaps", ("get", "create", "patch", "delete")),
    Access("", "events", ("create",)),
    # the volumebinding plugin
    Access("", "persistentvolumeclaims", ("get", "list", "watch", "patch")),
    Access("", "persistentvolumes", ("get", "list", "patch")),
    Access(names.STORAGECLASSES[0], names.STORAGECLASSES[2], ("get",)),
    # the dynamicresources plugin
    Access(names.RESOURCECLAIMS[0], names.RESOURCECLAIMS[2], ("get", "list", "create", "update", "delete")),
    Access(names.RESOURCECLAIMS[0], f"{names.RESOURCECLAIMS[2]}/status", ("update",)),
    # the settings of Config kai-config, and its status
    Access(names.CONFIGS[0], names.CONFIGS[2], ("get", "list", "watch")),
    *CONFIG_STATUS_ACCESS,
)


class _Stale(Exception):
    """The BindRequest was stale and has been deleted: nothing more to do or to record."""


def backoff_delay(failed_attempts: int, base: float, maximum: float) -> float:
    """Seconds before the next attempt after ``failed_attempts`` failures (KAI: 2**n seconds)."""
    return min(maximum, base * 2.0**failed_attempts)


class Binder(Controller):
    """The binder control loop; ``run(stop)`` blocks until ``stop`` is set.

    Its stores: ``bindrequests`` by ``namespace/name``, and ``nodes`` by name (a node not held yet is
    read from the API).
    """

    name = "binder"
    key_field = "bind_request"

    def __init__(self, kube: Kube, *, plugins: Sequence[BindPlugin] = (), workers: int = DEFAULT_WORKERS,
                 base_delay: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY,
                 sweep_period: float = DEFAULT_SWEEP_PERIOD, metrics: BinderMetrics | None = None,
                 settings: KaiObjects | None = None, clock=time.monotonic) -> None:
        super().__init__(kube, workers=workers, error_delay=max_delay, clock=clock)
        self.plugins = list(plugins)
        self.settings = settings
        self.base_delay, self.max_delay = base_delay, max_delay
        self.sweep_period = sweep_period
        self.metrics = metrics
        self._next_sweep = clock() + sweep_period
        #: Where the pod conditions and events reporting outcomes are written (see :meth:`_report`).
        self.followups = Lanes("binder-followup", FOLLOWUP_LANES)
        self._lock = threading.Lock()
        self._not_before: dict[str, float] = {}
        #: The ``failedAttempts`` this binder last wrote per BindRequest: a stored copy counting fewer is older
        #: than its own write, and is not acted on (the watch brings the new one).
        self._attempts_written: dict[str, int] = {}
        self._dirty_nodes: set[str] = set()

    def _run(self, stop: threading.Event) -> None:
        self.followups.start()
        try:
            super()._run(stop)
        finally:  # after the workers: their last reports are queued
            self.followups.close(self.stop_timeout)

    # -- informer side -------------------------------------------------------------------------
    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Informer callback: queue the BindRequest's key (a deleted one is forgotten)."""
        key = object_key(obj)
        if kind == "DELETED":
            node = (obj.get("spec") or {}).get("selectedNode")
            with self._lock:
                self._not_before.pop(key, None)
                self._attempts_written.pop(key, None)
                if node:
                    self._dirty_nodes.add(node)
        else:
            self.queue.add(key)

    def informers(self) -> dict[str, Informer]:
        """The binder's stores, and those of plugins that watch something (their optional ``informers()``)."""
        stores = {"bindrequests": Informer(self.kube, object_path(*names.BINDREQUESTS), on_event=self.on_event,
                                           name="bindrequests"),
                  "nodes": Informer(self.kube, object_path(*names.NODES), transform=slim_node, name="nodes")}
        for plugin in self.plugins:
            stores.update(getattr(plugin, "informers", dict)())
        return stores

    def reconfigure(self) -> bool:
        """Take up the plugins of ``settings`` if they changed; whether they did."""
        value = self.changed_settings()
        if value is None:
            return False
        with self._lock:
            new = list(value.plugins)
            if [id(p) for p in new] == [id(p) for p in self.plugins]:
                return False
            old, self.plugins = self.plugins, new
        if self.stores:  # running: start the watches of new plugins, stop those of dropped ones
            stores = dict(self.stores)  # replaced whole: other threads iterate the stores
            for plugin in old:
                if all(plugin is not n for n in new):
                    for name, informer in getattr(plugin, "informers", dict)().items():
                        if name in stores and stores[name] is informer:
                            informer.stop(timeout=0)
                            del stores[name]
            for plugin in new:
                if all(plugin is not o for o in old):
                    for name, informer in getattr(plugin, "informers", dict)().items():
                        stores[name] = informer.start()
            self.stores = stores
        log.info("binder plugins applied", **fields(plugins=",".join(p.name for p in new),
                                                     objects=self.settings.describe() if self.settings else ""))
        return True

    def tick(self) -> None:
        """Every ``sweep_period``: delete stale BindRequests and let the plugins tidy up everywhere; and
        let them tidy up now on the nodes where a BindRequest was deleted."""
        self.reconfigure()
        if self.synced and self._clock() >= self._next_sweep:
            self.sweep()
            self.sync_plugins(None)
            self._next_sweep = self._clock() + self.sweep_period
        with self._lock:
            nodes, self._dirty_nodes = self._dirty_nodes, set()
        if nodes:
            self.sync_plugins(nodes)

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
        store = self.stores.get("bindrequests")
        return store.list() if store is not None else []

    def get(self, key: str) -> dict[str, Any] | None:
        store = self.stores.get("bindrequests")
        return store.get(key) if store is not None else None

    # -- one key -------------------------------------------------------------------------------
    def handle(self, key: str) -> float | None:
        """Act on one BindRequest; returns the delay before it must be looked at again, if any."""
        obj = self.get(key)
        if obj is None:
            return None
        request = BindRequest.from_object(obj)
        if request.deleting or request.phase == "Succeeded" or request.out_of_attempts:
            return None
        with self._lock:
            not_before = self._not_before.get(key, 0.0)
            if request.failed_attempts < self._attempts_written.get(key, 0):
                return None  # the store has not caught up with this binder's last status write yet
        if self._clock() < not_before:
            return not_before - self._clock()  # a retry is already scheduled; an event woke us early
        return self.attempt(request)

    def attempt(self, request: BindRequest) -> float | None:
        """One bind attempt and its status; returns the retry delay after a retryable failure."""
        ids = outcomes.ids(request)
        self.reconfigure()
        ctx = BindContext(request, {}, self.kube, read_pod=lambda: self._read_pod(request))
        try:
            with self._timed():
                if not request.pod_name or not request.selected_node:
                    raise InvalidBindRequest("spec.podName and spec.selectedNode are required")
                ctx.node = self._read_node(request.selected_node)
                self._bind(ctx, list(self.plugins))
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

    def _bind(self, ctx: BindContext, plugins: list[BindPlugin]) -> None:
        done: list[BindPlugin] = []
        try:
            for plugin in plugins:
                plugin.pre_bind(ctx)
                done.append(plugin)
            self._post_binding(ctx)
            for plugin in plugins:
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
        annotations: dict[str, str] = {}
        if request.received_resource_type:
            annotations[RECEIVED_RESOURCE_TYPE] = request.received_resource_type
        if request.predicted_numa_zones:
            annotations[NUMA_PLACEMENT_PREDICTED_ANNOTATION] = json.dumps(list(request.predicted_numa_zones),
                                                                          separators=(",", ":"))
        if annotations:
            metadata["annotations"] = annotations
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
        nodes = self.stores.get("nodes")
        node = nodes.get(name) if nodes is not None else None
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
        outcomes.set_status(self.kube, request, {"phase": "Succeeded", "reason": None})
        with self._lock:
            self._not_before.pop(request.key, None)
        pod = ctx.pod_ref()
        if pod is not None and event:
            self._report(request, pod, NORMAL, "True", names.REASON_BOUND,
                         f"Pod bound successfully to node {request.selected_node}")

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
        if outcomes.set_status(self.kube, request, status):
            if "failedAttempts" in status:
                with self._lock:
                    self._attempts_written[request.key] = status["failedAttempts"]
        elif retry is None:  # nobody learns of the failure (the API server away): the attempt is made again
            retry = backoff_delay(request.failed_attempts, self.base_delay, self.max_delay)
            with self._lock:
                self._not_before[request.key] = self._clock() + retry
        pod = ctx.pod_ref()
        if pod is not None:
            self._report(request, pod, WARNING, "False", names.REASON_BINDING_ERROR,
                         f"Failed to bind pod {request.namespace}/{request.pod_name} to node "
                         f"{request.selected_node}: {reason}")
        return retry

    def delete_stale(self, request: BindRequest, why: str) -> None:
        """Delete ``request``, stale for the reason ``why`` (see :func:`outcomes.delete_stale`)."""
        if outcomes.delete_stale(self.kube, request, why) and self.metrics is not None:
            self.metrics.stale_deleted()

    def _report(self, request: BindRequest, pod: dict[str, Any], event_type: str, status: str, reason: str,
                message: str) -> None:
        """The pod's ``PodBound`` condition and event about an outcome, written on the follow-up lanes (in order
        per pod) while this worker goes on to the next BindRequest."""
        condition = {"type": POD_BOUND_CONDITION, "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": rfc3339()}

        def write() -> None:
            outcomes.set_pod_condition(self.kube, request, condition)
            record_event(self.kube, pod, event_type, reason, message, names.SOURCE_BINDER)

        self.followups.submit(f"{request.namespace}/{request.pod_name}", f"{reason} condition and event", write)

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
