"""The podgroupers' object reader against the API server: any kind by discovery, with a short-lived cache.

:class:`KubeObjects` implements :class:`kai.grouping.objects.ObjectReader` over the raw client.
The resource name and scope of a kind come from the discovery document of its apiVersion
(``/api/v1``, ``/apis/<group>/<version>``), so owners of kinds nobody told the scheduler about
(a new CRD, a third-party controller) are read like built-in ones.

Objects read are kept ``ttl`` seconds (at most ``size`` of them): the pods of one workload are
grouped in a burst and share their owners' reads. PodGroups are never cached: the control loop
writes them and podgroupers must see its writes.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from kai.api.podgroup import ForbiddenError, NotFoundError
from kai.grouping.objects import not_found
from kai.grouping.unstructured import split_api_version
from kai.kube.client import ApiError, Kube, object_path

#: Kinds read fresh on every lookup.
UNCACHED_KINDS = frozenset({"PodGroup"})


class KubeObjects:
    """Reads objects through ``kube``; see the module docstring."""

    def __init__(self, kube: Kube, ttl: float = 5.0, size: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.ttl = ttl
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._objects: OrderedDict[tuple[str, str, str, str], tuple[float, dict]] = OrderedDict()
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}  # apiVersion -> kind -> (plural, namespaced)
        self._discovery_lock = threading.Lock()
        self._fetching: dict[tuple[str, str, str, str], threading.Lock] = {}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict:
        """The object; raises NotFoundError (also for a kind the API does not serve) or ForbiddenError.

        Concurrent lookups of one object wait for a single read.
        """
        key = (api_version, kind, namespace or "", name)
        if kind in UNCACHED_KINDS:
            return self._read(api_version, kind, namespace, name)
        hit = self._cached(key)
        if hit is not None:
            return hit
        with self._lock:
            fetching = self._fetching.setdefault(key, threading.Lock())
        with fetching:
            hit = self._cached(key)  # read meanwhile by the lookup this one waited for
            if hit is not None:
                return hit
            try:
                obj = self._read(api_version, kind, namespace, name)
            finally:
                with self._lock:
                    self._fetching.pop(key, None)
            with self._lock:
                self._objects[key] = (self._clock() + self.ttl, obj)
                self._objects.move_to_end(key)
                while len(self._objects) > self.size:
                    self._objects.popitem(last=False)
            return copy.deepcopy(obj)

    def _cached(self, key: tuple[str, str, str, str]) -> dict | None:
        with self._lock:
            hit = self._objects.get(key)
            if hit is None or hit[0] <= self._clock():
                return None
            self._objects.move_to_end(key)
            return copy.deepcopy(hit[1])

    def _read(self, api_version: str, kind: str, namespace: str, name: str) -> dict:
        plural, namespaced = self.resource(api_version, kind)
        group, version = split_api_version(api_version)
        path = object_path(group, version, plural, namespace if namespaced else None, name)
        try:
            return self.kube.get(path)
        except ApiError as exc:
            if exc.status == 404:
                raise not_found(api_version, kind, name) from exc
            if exc.status == 403:
                raise ForbiddenError(str(exc)) from exc
            raise

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))} if selector else {}
        reply = self.kube.get(object_path("", "v1", "pods", namespace), query)
        return list(reply.get("items") or ())

    def list(self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        """Objects of a kind (in ``namespace``, or in every namespace for ``""``) with every label of
        ``selector``; raises NotFoundError when no API serves the kind."""
        plural, namespaced = self.resource(api_version, kind)
        group, version = split_api_version(api_version)
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))} if selector else {}
        try:
            reply = self.kube.get(object_path(group, version, plural, (namespace or None) if namespaced else None),
                                  query)
        except ApiError as exc:
            if exc.status in (403, 404):
                raise NotFoundError(f"cannot list {plural}.{group}: {exc}") from None
            raise
        return list(reply.get("items") or ())

    def forget(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Drop one cached object (it is known to have changed)."""
        with self._lock:
            self._objects.pop((api_version, kind, namespace or "", name), None)

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """``(plural, namespaced)`` of a kind from discovery; raises NotFoundError when no API serves it."""
        known = self._resources.get(api_version, {}).get(kind)
        if known is None:
            with self._discovery_lock:  # one discovery at a time; a CRD may have appeared since the last one
                known = self._resources.get(api_version, {}).get(kind)
                if known is None:
                    self._resources[api_version] = self._discover(api_version, kind)
                    known = self._resources[api_version].get(kind)
        if known is None:
            raise NotFoundError(f"the API server serves no kind {kind} in {api_version}")
        return known

    def _discover(self, api_version: str, kind: str) -> dict[str, tuple[str, bool]]:
        group, version = split_api_version(api_version)
        if not version:
            raise NotFoundError(f"invalid apiVersion {api_version!r} of kind {kind}")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            document = self.kube.get(path)
        except ApiError as exc:
            if exc.status == 404:
                raise NotFoundError(f"the API server serves no {api_version} (looking up kind {kind})") from exc
            raise
        return {
            r["kind"]: (r["name"], bool(r.get("namespaced")))
            for r in document.get("resources") or ()
            if "/" not in r.get("name", "/") and r.get("kind")
        }

