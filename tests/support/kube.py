"""An in-memory Kubernetes API server behind the :class:`~kai.kube.client.Kube` interface, for unit tests.

    kube = FakeApi()
    kube.add("/api/v1/namespaces/ns/pods/p", {"metadata": {"name": "p"}, "spec": {}})   # the world, as it is
    Binder(kube).handle("ns/br")                    # the code under test: get, post, patch, request, stream
    assert kube.objects["/api/v1/namespaces/ns/pods/p"]["spec"]["nodeName"] == "n1"
    assert kube.paths("PATCH") == [...]             # every call is logged: kube.calls

Objects are kept by path in ``objects``, which a test may read and change directly (a write updates the stored
object in place, so a test's reference to it stays current). Requests follow the API server's rules that the
components rely on:

* GET of an object, or of a collection (``/api/v1/pods``: every namespace) with equality label and field
  selectors; any other stored document (a discovery document) is returned as it is;
* POST creates (``generateName`` too; 409 if the name is taken), giving a uid and the namespace of the path;
  a POST of an Event is recorded in ``events`` instead; ``pods/<name>/binding`` sets the pod's node (409 if it
  has one or the UID differs); ``pods/<name>/eviction`` deletes the pod (409 if the UID precondition fails)
  unless a PodDisruptionBudget of its namespace whose ``matchLabels`` it matches has no
  ``status.disruptionsAllowed`` left (429 with the budget as cause; an eviction spends one);
* PUT and PATCH (JSON merge, JSON patch, strategic merge with ``conditions`` merged by type) of an object or of
  its ``status``: the object's own writes leave ``status`` as it was, ``/status`` writes change only ``status``;
  a ``metadata.resourceVersion`` in the body must be the stored one (409) and a ``metadata.uid`` the object's
  (422: immutable);
* DELETE, with ``preconditions`` (409);
* every write that changes an object gives it the next ``resourceVersion``; ``stream`` watches a collection
  from a resourceVersion, as informers do.

``fail`` makes chosen requests fail.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from kai.kube.client import JSON_PATCH, STRATEGIC_MERGE_PATCH, ApiError, Kube

#: Lists that a strategic merge patch merges element by element, by this key of theirs (their patchMergeKey).
MERGE_KEYS = {"conditions": "type"}


def merge_patch(target: dict, patch: dict) -> None:
    """Apply a JSON merge patch (RFC 7386) to ``target`` in place: ``None`` removes a key."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def strategic_merge_patch(target: dict, patch: dict) -> None:
    """Apply a strategic merge patch to ``target`` in place: a merge patch whose lists named in
    :data:`MERGE_KEYS` are merged element by element instead of replaced."""
    for key, value in patch.items():
        if key in MERGE_KEYS and isinstance(value, list) and isinstance(target.get(key), list):
            by = MERGE_KEYS[key]
            for item in value:
                match = next((t for t in target[key] if t.get(by) == item.get(by)), None)
                if match is None:
                    target[key].append(copy.deepcopy(item))
                else:
                    strategic_merge_patch(match, item)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            strategic_merge_patch(target[key], value)
        elif value is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(value)


def json_patch(target: dict, operations: list[dict], path: str = "") -> None:
    """Apply a JSON patch (RFC 6902: ``test``, ``add``, ``replace``, ``remove`` on object members) to ``target``
    in place, all or nothing; a failed ``test`` raises the API server's 422."""
    work = copy.deepcopy(target)
    for op in operations:
        *parents, key = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
        node = work
        for part in parents:
            node = node[part]
        if op["op"] == "test":
            if node.get(key) != op["value"]:
                raise ApiError("PATCH", path, 422, "Unprocessable Entity",
                               {"message": "the server rejected our request due to an error in our request"})
        elif op["op"] in ("add", "replace"):
            node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[key]
        else:
            raise AssertionError(f"unsupported JSON patch operation {op['op']}")
    target.clear()
    target.update(work)


class Call(NamedTuple):
    """A request the fake received (``WATCH`` for a watch), whatever its outcome."""

    method: str
    path: str
    body: Any = None


class Fault(NamedTuple):
    """Requests made to fail by :meth:`FakeApi.fail`."""

    status: int
    reason: str
    method: str
    path: str
    message: str | None
    times: int | None


class FakeApi(Kube):
    """The in-memory API server of the module docstring."""

    def __init__(self) -> None:
        super().__init__(api_client=None)
        self.objects: dict[str, dict] = {}
        self.calls: list[Call] = []
        self.events: list[dict] = []
        self.faults: list[Fault] = []
        self.version = 0
        self._ids = itertools.count(1)
        self._generated = itertools.count(1)
        self._history: list[tuple[int, str, str, dict]] = []  # (resourceVersion, event type, path, object)
        self._changed = threading.Condition(threading.RLock())

    # -- what a test does --

    def add(self, path: str, obj: dict) -> dict:
        """Store ``obj`` itself at ``path`` (replacing what is there), as someone else would create or change it:
        an object with ``metadata`` gets a uid (unless it has one) and the next resourceVersion."""
        with self._changed:
            if "metadata" in obj:
                obj["metadata"].setdefault("uid", f"uid-{next(self._ids)}")
                self._record("MODIFIED" if path in self.objects else "ADDED", path, obj)
            self.objects[path] = obj
            return obj

    def fail(self, status: int, reason: str, method: str = "", path: str = "", times: int | None = 1,
             message: str | None = None) -> None:
        """The next ``times`` requests (every one: ``None``) with verb ``method`` whose path ends with ``path``
        (empty: any) fail with ``status`` (0: no response); logged in ``calls`` all the same."""
        self.faults.append(Fault(status, reason, method, path, message, times))

    def paths(self, method: str) -> list[str]:
        """The paths of the calls with verb ``method``, in order."""
        return [call.path for call in self.calls if call.method == method]

    # -- the client's interface --

    def request(self, method: str, path: str, query: dict | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float | None = None) -> Any:
        self._started(method, path)
        self.calls.append(Call(method, path, copy.deepcopy(body)))
        self._fault(method, path)
        with self._changed:
            return self.serve(method, path, query, body, content_type)

    @contextlib.contextmanager
    def stream(self, path: str, query: dict, read_timeout: float) -> Iterator[Watch]:
        self._started("GET", path)
        self.calls.append(Call("WATCH", path))
        self._fault("WATCH", path)
        watch = Watch(self, path, query)
        try:
            yield watch
        finally:
            watch.shutdown()

    # -- the server --

    def serve(self, method: str, path: str, query: dict | None, body: Any, content_type: str) -> Any:
        """The reply to a request (under the fake's lock); a subclass adds rules of its own here."""
        if method == "GET":
            return self._get(path, query or {})
        if method == "POST":
            return self._post(path, body)
        if method in ("PUT", "PATCH"):
            return self._write(method, path, body, content_type)
        if method == "DELETE":
            return self._delete(path, body or {})
        raise AssertionError(f"unsupported request {method} {path}")

    def _get(self, path: str, query: dict) -> dict:
        if path in self.objects:
            return copy.deepcopy(self.objects[path])
        where = _resource(path)
        if where is None or where[3] is not None:
            raise _not_found("GET", path)
        items = [copy.deepcopy(obj) for p, obj in self.objects.items() if _listed(where, p, obj, query)]
        return {"metadata": {"resourceVersion": str(self.version)}, "items": items}

    def _post(self, path: str, body: dict) -> dict:
        where = _resource(path)
        if where is not None and where[2] == "events" and where[3] is None:
            self.events.append(copy.deepcopy(body))
            return copy.deepcopy(body)
        if where is not None and where[2] == "pods" and where[4] == "binding":
            return self._bind(path, body)
        if where is not None and where[2] == "pods" and where[4] == "eviction":
            return self._evict(path, body)
        if where is None or where[3] is not None:
            raise AssertionError(f"unsupported POST {path}")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta['generateName']}x{next(self._generated)}"
        target = f"{path}/{meta['name']}"
        if target in self.objects:
            raise ApiError("POST", path, 409, "Conflict", {"reason": "AlreadyExists",
                                                           "message": f"{where[2]} \"{meta['name']}\" already exists"})
        if where[1] is not None:
            meta.setdefault("namespace", where[1])
        meta.setdefault("uid", f"uid-{next(self._ids)}")
        self._record("ADDED", target, obj)
        self.objects[target] = obj
        return copy.deepcopy(obj)

    def _bind(self, path: str, body: dict) -> dict:
        pod = self.objects.get(path.rsplit("/", 1)[0])
        if pod is None:
            raise _not_found("POST", path)
        uid = (body.get("metadata") or {}).get("uid")
        node = pod.get("spec", {}).get("nodeName")
        if node or (uid and uid != pod["metadata"].get("uid")):
            raise ApiError("POST", path, 409, "Conflict", {"message": f"pod is already assigned to node {node!r}"
                                                           if node else "Precondition failed: UID"})
        bound = copy.deepcopy(pod)
        bound.setdefault("spec", {})["nodeName"] = body["target"]["name"]
        bound["metadata"].setdefault("annotations", {}).update((body.get("metadata") or {}).get("annotations") or {})
        self._replace(path.rsplit("/", 1)[0], pod, bound)
        return {}

    def _evict(self, path: str, body: dict) -> dict:
        pod_path = path.rsplit("/", 1)[0]
        pod = self.objects.get(pod_path)
        if pod is None:
            raise _not_found("POST", path)
        namespace = pod["metadata"].get("namespace")
        labels = pod["metadata"].get("labels") or {}
        for pdb_path, pdb in self.objects.items():
            where = _resource(pdb_path)
            if where is None or where[2] != "poddisruptionbudgets" or where[1] != namespace:
                continue
            selector = (pdb.get("spec") or {}).get("selector") or {}
            if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
                continue
            status = pdb.setdefault("status", {})
            if status.get("disruptionsAllowed", 0) < 1:
                cause = f"The disruption budget {pdb['metadata']['name']} needs more healthy pods"
                raise ApiError("POST", path, 429, "Too Many Requests", {
                    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                    "details": {"causes": [{"reason": "DisruptionBudget", "message": cause}]}})
            status["disruptionsAllowed"] -= 1
        return self._delete(pod_path, (body.get("deleteOptions") or {}))

    def _write(self, method: str, path: str, body: Any, content_type: str) -> dict:
        status = path.endswith("/status")
        target = path.removesuffix("/status") if status else path
        current = self.objects.get(target)
        if current is None:
            raise _not_found(method, path)
        meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
        if meta.get("uid") and meta["uid"] != current.get("metadata", {}).get("uid"):
            raise ApiError(method, path, 422, "Invalid", {"message": "metadata.uid: field is immutable"})
        if meta.get("resourceVersion") and meta["resourceVersion"] != current.get("metadata", {}).get(
                "resourceVersion"):
            raise ApiError(method, path, 409, "Conflict", {"message": "the object has been modified"})
        changed = copy.deepcopy(body) if method == "PUT" else copy.deepcopy(current)
        if method == "PATCH" and content_type == JSON_PATCH:
            json_patch(changed, body, path)
        elif method == "PATCH" and content_type == STRATEGIC_MERGE_PATCH:
            strategic_merge_patch(changed, body)
        elif method == "PATCH":
            merge_patch(changed, body)
        if status:  # the status subresource changes the status only
            result = _with_status({k: copy.deepcopy(v) for k, v in current.items() if k != "status"}, changed)
        else:  # the object's own writes leave its status as it was
            result = _with_status({k: v for k, v in changed.items() if k != "status"}, current)
        return self._replace(target, current, result)

    def _delete(self, path: str, body: dict) -> dict:
        current = self.objects.get(path)
        if current is None:
            raise _not_found("DELETE", path)
        meta = current.get("metadata", {})
        for field, value in (body.get("preconditions") or {}).items():
            if value != meta.get(field):
                raise ApiError("DELETE", path, 409, "Conflict", {"message": f"Precondition failed: {field}"})
        del self.objects[path]
        self._record("DELETED", path, current)
        return {}

    def _replace(self, path: str, current: dict, changed: dict) -> dict:
        """Make the stored ``current`` into ``changed`` in place, with the next resourceVersion if it differs."""
        meta = changed.setdefault("metadata", {})
        for field in ("uid", "resourceVersion"):
            if field in current.get("metadata", {}):
                meta[field] = current["metadata"][field]
        if changed != current:
            _update(current, changed)
            self._record("MODIFIED", path, current)
        return copy.deepcopy(current)

    def _record(self, kind: str, path: str, obj: dict) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self._history.append((self.version, kind, path, copy.deepcopy(obj)))
        self._changed.notify_all()

    def _fault(self, method: str, path: str) -> None:
        for i, fault in enumerate(self.faults):
            if fault.method in ("", method) and path.endswith(fault.path):
                if fault.times is not None:
                    if fault.times > 1:
                        self.faults[i] = fault._replace(times=fault.times - 1)
                    else:
                        del self.faults[i]
                raise ApiError(method, path, fault.status, fault.reason,
                               {"message": fault.message} if fault.message else None)


class Watch:
    """An open watch of a collection: the events after the query's resourceVersion of the objects its
    selectors match, one JSON line each, until ``shutdown`` or the query's ``timeoutSeconds``."""

    def __init__(self, api: FakeApi, path: str, query: dict) -> None:
        self.api, self.query = api, query
        self.where = _resource(path)
        if self.where is None or self.where[3] is not None:
            raise AssertionError(f"unsupported watch of {path}")
        self.since = int(query.get("resourceVersion") or 0)
        self.deadline = time.monotonic() + float(query.get("timeoutSeconds", 60))
        self.closed = False

    def stream(self, _amount: int) -> Iterator[bytes]:
        changed = self.api._changed
        while True:
            with changed:
                changed.wait_for(lambda: self.closed or self.api.version > self.since,
                                 max(0.0, self.deadline - time.monotonic()))
                if self.closed or self.api.version <= self.since:
                    return
                events = [e for e in self.api._history if e[0] > self.since]
                self.since = self.api.version
            lines = b"".join(orjson.dumps({"type": kind, "object": obj}) + b"\n" for _, kind, path, obj in events
                             if _listed(self.where, path, obj, self.query))
            if lines:
                yield lines

    def shutdown(self) -> None:
        with self.api._changed:
            self.closed = True
            self.api._changed.notify_all()


def _resource(path: str) -> tuple[str, str | None, str, str | None, str] | None:
    """(API prefix, namespace, resource, name, subresource) of a REST path; None if it names no resource."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        prefix, rest = parts[:2], parts[2:]
    elif parts[0] == "apis":
        prefix, rest = parts[:3], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 3:
        return None
    return "/" + "/".join(prefix), namespace, rest[0], rest[1] if len(rest) > 1 else None, "/".join(rest[2:])


def _listed(collection: tuple, path: str, obj: dict, query: dict) -> bool:
    """Whether the object ``obj`` at ``path`` is an item of ``collection`` (every namespace if it names none)
    that the query's selectors match."""
    where = _resource(path)
    if where is None or where[3] is None or where[4] or (where[0], where[2]) != (collection[0], collection[2]):
        return False
    if collection[1] is not None and where[1] != collection[1]:
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (all(_label_term(labels, t) for t in _terms(query.get("labelSelector")))
            and all(_field_term(obj, t) for t in _terms(query.get("fieldSelector"))))


def _terms(selector: str | None) -> list[str]:
    return [t.strip() for t in (selector or "").split(",") if t.strip()]


def _label_term(labels: dict, term: str) -> bool:
    if "(" in term:
        raise AssertionError(f"unsupported label selector {term!r}")
    if "!=" in term:
        key, value = term.split("!=", 1)
        return labels.get(key) != value
    if "=" in term:
        key, value = term.split("=", 1)
        return labels.get(key) == value.removeprefix("=")
    return term[1:] not in labels if term.startswith("!") else term in labels


def _field_term(obj: dict, term: str) -> bool:
    negated = "!=" in term
    field, value = term.split("!=" if negated else "=", 1)
    node: Any = obj
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return (str(node if node is not None else "") == value.removeprefix("=")) != negated


def _not_found(method: str, path: str) -> ApiError:
    return ApiError(method, path, 404, "Not Found", {"reason": "NotFound", "message": f"{path} not found"})


def _with_status(obj: dict, source: dict) -> dict:
    """``obj`` with the ``status`` of ``source`` (none if it has none)."""
    if "status" in source:
        obj["status"] = copy.deepcopy(source["status"])
    return obj


def _update(target: dict, new: dict) -> None:
    """Make ``target`` equal to ``new`` in place, keeping the dictionaries both have (references stay current)."""
    for key in [k for k in target if k not in new]:
        del target[key]
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _update(target[key], value)
        else:
            target[key] = value
