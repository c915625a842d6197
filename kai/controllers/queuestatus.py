"""The queue controller: Queue status and the ``kai_queue_*`` metrics.

For every Queue (``scheduling.run.ai/v2``) it writes, through the status subresource and only when
something changed (as KAI's queue controller):

* ``status.childQueues``: the queues whose ``spec.parentQueue`` names it, sorted;
* ``status.allocated``, ``allocatedNonPreemptible``, ``requested``: the sums of its child queues'
  status and of ``status.resourcesStatus`` of the PodGroups whose ``spec.queue`` names it.

A change of a PodGroup re-computes its queue; a change of a queue's status re-computes its parent,
so sums climb the tree one level per round. The metrics (quota, deserved GPUs, allocation; names
in ``docs/metrics.md``) are set from each queue after its status is written; time-based fair share
reads ``kai_queue_allocated_*``.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from kai.api import names
from kai.common.quantity import QuantityError, format_resources, parse, resource_list_patch, sum_resources
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.controller import Controller
from kai.kube.watch import Informer, object_key
from kai.logs import fields
from kai.metrics import QueueMetrics

log = logging.getLogger(__name__)

SUMMED = ("allocated", "allocatedNonPreemptible", "requested")
UNLIMITED = -1.0
RETRY_DELAY = 5.0

#: Every API call below (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access(names.QUEUES[0], names.QUEUES[2], ("list", "watch")),
    Access(names.QUEUES[0], f"{names.QUEUES[2]}/status", ("patch",)),
    Access(names.PODGROUPS[0], names.PODGROUPS[2], ("list", "watch")),
)


def slim_podgroup(obj: dict[str, Any]) -> dict[str, Any]:
    """What the controller keeps of a PodGroup: its key, queue and resource status."""
    resources = (obj.get("status") or {}).get("resourcesStatus") or {}
    return {"key": object_key(obj), "queue": (obj.get("spec") or {}).get("queue") or "",
            "resources": {name: resources.get(name) or {} for name in SUMMED}}


def queue_status(queue_name: str, queues: list[dict[str, Any]], podgroups: list[dict[str, Any]]) -> dict[str, Any]:
    """The status a queue should have: child queues and the three sums (pure; exported for tests)."""
    children = [q for q in queues if ((q.get("spec") or {}).get("parentQueue") or "") == queue_name]
    status: dict[str, Any] = {"childQueues": sorted((q.get("metadata") or {}).get("name", "") for q in children)}
    for name in SUMMED:
        lists = [(q.get("status") or {}).get(name) for q in children]
        lists += [pg["resources"][name] for pg in podgroups]
        status[name] = format_resources(sum_resources(lists))
    return status


def status_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch from ``current`` to ``wanted`` status (resource names that went away become null)."""
    patch: dict[str, Any] = {}
    if list(current.get("childQueues") or []) != wanted["childQueues"]:
        patch["childQueues"] = wanted["childQueues"] or None
    for name in SUMMED:
        have, want = current.get(name) or {}, wanted[name]
        change = resource_list_patch(have, want)
        if change is not None:
            patch[name] = change if want else None
    return patch or None


def metric_values(queue: dict[str, Any]) -> dict[str, float]:
    """KAI's queue metrics from a Queue's spec and status, in cores, bytes and devices."""
    resources = (queue.get("spec") or {}).get("resources") or {}

    def quota(resource: str) -> float:
        return float((resources.get(resource) or {}).get("quota") or 0.0)

    allocated = (queue.get("status") or {}).get("allocated") or {}

    def amount(name: str | None) -> float:
        try:
            return round(float(parse(allocated[name])), 4) if name in allocated else 0.0
        except QuantityError:
            return 0.0

    cpu, memory = quota("cpu"), quota("memory")
    return {
        "queue_deserved_gpus": quota("gpu"),
        "queue_quota_cpu_cores": UNLIMITED if cpu == UNLIMITED else cpu / 1000.0,
        "queue_quota_memory_bytes": UNLIMITED if memory == UNLIMITED else memory * 1e6,
        "queue_allocated_gpus": amount(next((k for k in sorted(allocated) if k.endswith("/gpu")), None)),
        "queue_allocated_cpu_cores": amount("cpu"),
        "queue_allocated_memory_bytes": amount("memory"),
    }


class QueueController(Controller):
    """Keeps Queue status and queue metrics current; ``run(stop)`` blocks until ``stop`` is set."""

    name = "queue-controller"
    key_field = "queue"
    wait_for_sync = True  # sums over a partial list would be written as truth

    def __init__(self, kube: Kube, metrics: QueueMetrics | None = None) -> None:
        super().__init__(kube, error_delay=RETRY_DELAY)
        self.metrics = metrics
        self._lock = threading.Lock()
        self._parent: dict[str, str] = {}  # queue -> parent, to also refresh a former parent
        self._pg_queue: dict[str, str] = {}  # podgroup key -> queue
        self._by_queue: dict[str, set[str]] = defaultdict(set)  # queue -> podgroup keys

    # -- events --------------------------------------------------------------------------------
    def on_queue(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        parent = (obj.get("spec") or {}).get("parentQueue") or ""
        with self._lock:
            former = self._parent.pop(name, "")
            if kind != "DELETED":
                self._parent[name] = parent
        for key in {name, parent, former} - {""}:
            self.queue.add(key)

    def on_podgroup(self, kind: str, pg: dict[str, Any]) -> None:
        key, queue = pg["key"], pg["queue"]
        with self._lock:
            former = self._pg_queue.pop(key, "")
            self._by_queue[former].discard(key)
            if kind != "DELETED":
                self._pg_queue[key] = queue
                self._by_queue[queue].add(key)
        for name in {queue, former} - {""}:
            self.queue.add(name)

    # -- one queue -----------------------------------------------------------------------------
    def reconcile(self, name: str) -> bool:
        """Bring queue ``name``'s status and metrics up to date; False when the write must be retried."""
        queue = self.stores["queues"].get(name) if "queues" in self.stores else None
        if queue is None:
            if self.metrics is not None:
                self.metrics.remove_queue(name)
            return True
        with self._lock:
            pg_keys = sorted(self._by_queue.get(name, ()))
        podgroups = []
        for key in pg_keys:
            pg = self.stores["podgroups"].get(key)
            if pg is None:
                continue
            try:
                for resources in pg["resources"].values():
                    for value in resources.values():
                        parse(value)
            except QuantityError as exc:
                log.error("PodGroup resource status unreadable; left out of its queue's sums",
                          **fields(podgroup=key, queue=name, error=str(exc)))
                continue
            podgroups.append(pg)
        wanted = queue_status(name, self.stores["queues"].list(), podgroups)
        patch = status_patch(queue.get("status") or {}, wanted)
        if patch is not None:
            try:
                queue = self.kube.patch(object_path(*names.QUEUES, name=name),
                                        {"status": patch}, subresource="status")
            except ApiError as exc:
                if exc.status == 404:
                    return True  # deleted meanwhile; its DELETED event follows
                log.warning("cannot write queue status", **fields(queue=name, error=str(exc)))
                return False
            log.debug("queue status updated", **fields(queue=name, allocated=wanted["allocated"]))
        if self.metrics is not None:
            self.metrics.set_queue(name, (queue.get("metadata") or {}).get("labels") or {}, metric_values(queue),
                                   str((queue.get("spec") or {}).get("displayName") or ""))
        return True

    def informers(self) -> dict[str, Informer]:
        return {
            "queues": Informer(self.kube, object_path(*names.QUEUES), on_event=self.on_queue, name="queues"),
            "podgroups": Informer(self.kube, object_path(*names.PODGROUPS), on_event=self.on_podgroup,
                                  transform=slim_podgroup, name="podgroups"),
        }

    def handle(self, name: str) -> float | None:
        return None if self.reconcile(name) else RETRY_DELAY
