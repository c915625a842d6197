"""List+watch of one Kubernetes resource path into an in-memory store, on a thread.

    kube = Kube.connect()
    pods = Informer(kube, "/api/v1/pods", on_event=handle, transform=slim_pod).start()
    pods.wait_synced(30)          # True once the first list is in the store
    pods.get("ns/name")           # the stored (transformed) object, or None
    pods.list()                   # a list copy of every stored object
    pods.stop()

``path`` is a collection URL: ``/api/v1/pods``, ``/api/v1/namespaces/ns/pods``,
``/apis/scheduling.run.ai/v2/queues``. Objects are decoded with orjson into plain dicts (no
generated models); ``transform(obj)`` may slim each one down or return None to leave it out of the
store (an object that stops matching is removed as if deleted). Store keys are
``"namespace/name"`` for namespaced objects and ``"name"`` otherwise.

``on_event(type, obj)`` runs on the informer's thread after the store has changed, with ``type``
``"ADDED"``, ``"MODIFIED"`` or ``"DELETED"`` and the transformed object; an exception in it is
logged and the informer goes on. ``on_change(type, obj, previous)`` is the same with the stored
object the change replaced or removed (None when ADDED), for a consumer that tells changes apart. A
relist (at start, after 410 Gone or after an error) reports the
difference to the previous store as the same three event types, so a consumer sees every change
exactly once whatever happened to the connection. A new version whose transformed object equals
the stored one changes nothing: the stored object is kept (so a consumer may key what it derives from
an object on its identity) and there is no event. ``changes`` counts the changes of the store, so a
consumer can tell that nothing changed since it last read it; :meth:`Informer.take` gives its one consumer
the store together with the keys changed since its last take. ``synced`` is set after the first list;
a resource that is not served (404: its CRD is not installed) counts as listed and empty, and is
listed again with the error backoff until it is served.

The watch asks for bookmarks and resumes from the last resourceVersion seen; a stream that ends
normally (server timeout) is reopened at once, failed requests are retried with exponential
backoff (0.5 s doubling up to 30 s, with jitter).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import urllib3

from kai.kube.client import ApiError, Kube

log = logging.getLogger(__name__)

EventHandler = Callable[[str, Any], None]
ChangeHandler = Callable[[str, Any, Any], None]


class _Gone(Exception):
    """The resourceVersion to resume from is too old: list again."""


def object_key(obj: dict) -> str:
    """``namespace/name`` or ``name`` of a Kubernetes object."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else meta.get("name", "")


class Informer:
    """Keeps a store of the objects under ``path`` current; see the module docstring."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        on_event: EventHandler | None = None,
        on_change: ChangeHandler | None = None,
        transform: Callable[[dict], Any] | None = None,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = 500,
        watch_timeout: int = 300,
        name: str | None = None,
    ) -> None:
        self.kube = kube
        self.path = path
        self.name = name or path
        self.on_event = on_event
        self.on_change = on_change
        self.transform = transform
        self.selectors = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.resource_version = ""
        self.synced = threading.Event()
        self._store: dict[str, Any] = {}
        self._versions: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None
        self._failures = 0
        #: How many times the store changed (an object added, changed or removed).
        self.changes = 0
        self._touched: set[str] = set()

    # -- reading the store (any thread) --

    def get(self, key: str) -> Any:
        return self._store.get(key)

    def list(self) -> list:
        with self._lock:
            return list(self._store.values())

    def take(self) -> tuple[dict[str, Any], set[str]]:
        """A copy of the store by key and the keys added, changed or removed since the last take (all of them
        at the first): for one consumer that keeps what it derives from each object."""
        with self._lock:
            touched, self._touched = self._touched, set()
            return dict(self._store), touched

    def __len__(self) -> int:
        return len(self._store)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    def load(self, items: Iterable[dict]) -> Informer:
        """Fill the store from objects in hand (a snapshot file) instead of the API server: a list without a
        watch; the informer counts as synced."""
        self._replace(items, "")
        return self

    # -- lifecycle --

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=f"informer {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            try:
                resp.shutdown()  # unblocks the read on the informer's thread
            except Exception:  # noqa: BLE001 - the stream may already be gone
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the informer's thread --

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
            except _Gone:
                log.info("%s: resourceVersion %s expired, listing again", self.name, self.resource_version)
                need_list = True
            except (ApiError, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    break
                need_list = need_list or isinstance(exc, ApiError) and exc.status == 410
                if need_list and isinstance(exc, ApiError) and exc.status == 404:
                    self._replace([], "")  # the resource is not served (its CRD is absent): nothing exists
                self._backoff(exc)

    def _backoff(self, exc: Exception) -> None:
        delay = min(30.0, 0.5 * 2**self._failures) * random.uniform(0.8, 1.2)
        self._failures += 1
        level = logging.WARNING if self._failures <= 3 or self._failures % 20 == 0 else logging.DEBUG
        log.log(level, "%s: %s; retrying in %.1fs", self.name, exc, delay)
        self._stop.wait(delay)

    def _list(self) -> None:
        items: list[dict] = []
        query: dict[str, Any] = {"limit": self.page_size, **self.selectors}
        while True:
            try:
                page = self.kube.get(self.path, query)
            except ApiError as exc:
                if exc.status == 410 and "continue" in query:  # the continue token expired: start over
                    items.clear()
                    query.pop("continue")
                    continue
                raise
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        self._replace(items, meta.get("resourceVersion", ""))

    def _replace(self, items: Iterable[dict], resource_version: str) -> None:
        fresh: dict[str, tuple[Any, str]] = {}
        for raw in items:
            obj = self._transform(raw)
            if obj is not None:
                fresh[object_key(raw)] = (obj, (raw.get("metadata") or {}).get("resourceVersion", ""))
        events: list[tuple[str, Any, Any]] = []
        with self._lock:
            for key in [k for k in self._store if k not in fresh]:
                self._versions.pop(key, None)
                gone = self._store.pop(key)
                self._touched.add(key)
                events.append(("DELETED", gone, gone))
            for key, (obj, version) in fresh.items():
                unchanged = key in self._store and (self._versions.get(key) == version
                                                    or self._same(self._store[key], obj))
                self._versions[key] = version
                if unchanged:
                    continue
                previous = self._store.get(key)
                events.append(("MODIFIED" if previous is not None else "ADDED", obj, previous))
                self._store[key] = obj
                self._touched.add(key)
            self.changes += len(events)
            self.resource_version = resource_version
        log.debug("%s: listed %d objects at resourceVersion %s", self.name, len(fresh), resource_version)
        for event in events:
            self._emit(*event)
        self.synced.set()

    def _watch(self) -> None:
        query: dict[str, Any] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": int(self.watch_timeout * random.uniform(1.0, 2.0)),
            **self.selectors,
        }
        try:
            with self.kube.stream(self.path, query, read_timeout=query["timeoutSeconds"] + 30) as resp:
                self._response = resp
                self._failures = 0
                if self._stop.is_set():
                    return
                pending = b""
                for chunk in resp.stream(65536):
                    lines = (pending + chunk).split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        if line.strip():
                            self._apply(orjson.loads(line))
                    if self._stop.is_set():
                        return
        finally:
            self._response = None

    def _apply(self, event: dict) -> None:
        kind, raw = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if raw.get("code") == 410:
                raise _Gone()
            raise ApiError("WATCH", self.path, raw.get("code") or 0, raw.get("message") or "watch error")
        version = (raw.get("metadata") or {}).get("resourceVersion", "")
        if kind == "BOOKMARK":
            self.resource_version = version
            return
        key = object_key(raw)
        obj = self._transform(raw) if kind != "DELETED" else None
        with self._lock:
            self.resource_version = version
            if obj is None:  # deleted, or no longer of interest
                known = self._store.pop(key, None)
                self._versions.pop(key, None)
                self.changes += known is not None
                self._touched.add(key)
            else:
                known = self._store.get(key)
                self._versions[key] = version
                if known is not None and self._same(known, obj):
                    return
                self._store[key] = obj
                self.changes += 1
                self._touched.add(key)
        if obj is not None:
            self._emit("MODIFIED" if known is not None else "ADDED", obj, known)
        elif known is not None:
            self._emit("DELETED", self._transform(raw) or known if kind == "DELETED" else known, known)

    def _same(self, known: Any, obj: Any) -> bool:
        """Whether a new version changed nothing the transform keeps (a heartbeat, another component's
        condition); whole objects always differ (their resourceVersion), so they are not compared."""
        return self.transform is not None and known == obj

    def _transform(self, raw: dict) -> Any:
        if self.transform is None:
            return raw
        try:
            return self.transform(raw)
        except Exception:  # noqa: BLE001 - a malformed object must not stop the informer
            log.exception("%s: cannot read %s; leaving it out", self.name, object_key(raw))
            return None

    def _emit(self, kind: str, obj: Any, previous: Any) -> None:
        if self.on_event is None and self.on_change is None:
            return
        try:
            if self.on_event is not None:
                self.on_event(kind, obj)
            if self.on_change is not None:
                self.on_change(kind, obj, previous)
        except Exception:  # noqa: BLE001 - a consumer's bug must not stop the informer
            log.exception("%s: event handler failed on %s", self.name, kind)
