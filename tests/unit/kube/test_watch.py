"""Informer logic against a scripted API: relist diffs, 410 Gone, bookmarks, filtering, errors.

The real API server is exercised in tests/e2e/test_watch.py; here the replies are scripted to reach
the paths a healthy apiserver rarely takes.
"""

from __future__ import annotations

import contextlib
import threading
import time

import orjson

from kai.kube.client import ApiError
from kai.kube.watch import Informer


def obj(name: str, rv: str, ns: str = "ns", **extra) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}, **extra}


class Stream:
    def __init__(self, events: list[dict]) -> None:
        self.chunks = [orjson.dumps(e) + b"\n" for e in events]

    def stream(self, _amt):
        for chunk in self.chunks:  # split each event in two to check line buffering
            yield chunk[:7]
            yield chunk[7:]

    def shutdown(self) -> None:
        pass


class ScriptedKube:
    """Answers lists from ``lists`` and watches from ``watches`` in order; records the queries."""

    def __init__(self, lists: list, watches: list) -> None:
        self.lists, self.watches = lists, watches
        self.queries: list[tuple[str, dict]] = []
        self.done = threading.Event()

    def get(self, path, query):
        self.queries.append(("list", dict(query)))
        reply = self.lists.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    @contextlib.contextmanager
    def stream(self, path, query, read_timeout):
        self.queries.append(("watch", dict(query)))
        if not self.watches:
            self.done.set()
            time.sleep(0.05)
            raise ApiError("GET", path, 0, "script finished")
        reply = self.watches.pop(0)
        if isinstance(reply, Exception):
            raise reply
        yield Stream(reply)


def run(kube: ScriptedKube, **kw) -> tuple[Informer, list]:
    events: list = []
    informer = Informer(kube, "/api/v1/pods", on_event=lambda t, o: events.append((t, o["metadata"]["name"])), **kw)
    informer._backoff = lambda exc: time.sleep(0.001)  # no real waiting between scripted failures
    informer.start()
    assert kube.done.wait(5)
    informer.stop()
    return informer, events


def page(items, rv, cont=""):
    return {"metadata": {"resourceVersion": rv, "continue": cont}, "items": items}


def test_events_pages_and_resume_from_last_version():
    kube = ScriptedKube(
        lists=[page([obj("a", "1")], "5", cont="tok"), page([obj("b", "2")], "5")],
        watches=[
            [
                {"type": "ADDED", "object": obj("c", "6")},
                {"type": "MODIFIED", "object": obj("a", "7")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
            ],
            [{"type": "DELETED", "object": obj("b", "10")}],
        ],
    )
    informer, events = run(kube)
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "c"]
    assert informer.get("ns/a")["metadata"]["resourceVersion"] == "7"
    kinds = [(k, q.get("continue"), q.get("resourceVersion")) for k, q in kube.queries]
    assert kinds[:4] == [("list", None, None), ("list", "tok", None), ("watch", None, "5"), ("watch", None, "9")]
    assert all(q["allowWatchBookmarks"] == "true" for k, q in kube.queries if k == "watch")


def test_gone_relists_and_reports_only_the_difference():
    kube = ScriptedKube(
        lists=[
            page([obj("a", "1"), obj("b", "2"), obj("c", "3")], "3"),
            page([obj("a", "1"), obj("b", "8"), obj("d", "9")], "9"),
        ],
        watches=[[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]],
    )
    informer, events = run(kube)
    assert events[3:] == [("DELETED", "c"), ("MODIFIED", "b"), ("ADDED", "d")]
    assert informer.resource_version == "9"


def test_expired_continue_token_restarts_the_list():
    kube = ScriptedKube(
        lists=[
            page([obj("a", "1")], "5", cont="tok"),
            ApiError("GET", "/api/v1/pods", 410, "Gone"),
            page([obj("b", "2")], "6"),
        ],
        watches=[],
    )
    informer, events = run(kube)
    assert events == [("ADDED", "b")]  # the half-read first attempt is not reported


def test_errors_back_off_and_retry_without_losing_the_store():
    kube = ScriptedKube(
        lists=[ApiError("GET", "/api/v1/pods", 403, "Forbidden"), page([obj("a", "1")], "2")],
        watches=[
            ApiError("GET", "/api/v1/pods", 0, "connection refused"),
            [{"type": "ADDED", "object": obj("b", "3")}],
        ],
    )
    informer, events = run(kube)
    assert events == [("ADDED", "a"), ("ADDED", "b")]
    watch_versions = [q["resourceVersion"] for k, q in kube.queries if k == "watch"]
    assert watch_versions[:2] == ["2", "2"]  # a failed watch resumes, it does not relist


def test_a_resource_not_served_is_synced_empty_and_listed_again_until_it_is():
    kube = ScriptedKube(
        lists=[page([obj("a", "1")], "2"), ApiError("GET", "/api/v1/pods", 404, "Not Found"),
               ApiError("GET", "/api/v1/pods", 404, "Not Found"), page([obj("b", "4")], "4")],
        watches=[ApiError("GET", "/api/v1/pods", 410, "Gone"), [{"type": "ADDED", "object": obj("c", "5")}]],
    )
    informer, events = run(kube)
    assert informer.synced.is_set()
    # the CRD went away (its objects with it) and came back with new objects
    assert events == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert [k for k, _ in kube.queries][:5] == ["list", "watch", "list", "list", "list"]


def test_a_resource_never_served_still_syncs():
    kube = ScriptedKube(lists=[ApiError("GET", "/api/v1/pods", 404, "Not Found")] * 3 + [page([], "1")], watches=[])
    informer, events = run(kube)
    assert informer.synced.is_set() and events == [] and len(informer) == 0


def test_transform_filters_and_an_object_that_stops_matching_is_deleted():
    def only_kai(raw):
        return raw if raw.get("scheduler") == "kai" else None

    kube = ScriptedKube(
        lists=[page([obj("a", "1", scheduler="kai"), obj("x", "2", scheduler="other")], "2")],
        watches=[
            [
                {"type": "MODIFIED", "object": obj("x", "3", scheduler="other")},
                {"type": "MODIFIED", "object": obj("a", "4", scheduler="other")},
            ]
        ],
    )
    informer, events = run(kube, transform=only_kai)
    assert events == [("ADDED", "a"), ("DELETED", "a")]
    assert len(informer) == 0


def test_a_failing_handler_or_transform_does_not_stop_the_informer():
    def transform(raw):
        if raw["metadata"]["name"] == "bad":
            raise KeyError("spec")
        return raw

    seen = []

    def handler(kind, o):
        seen.append(o["metadata"]["name"])
        if o["metadata"]["name"] == "a":
            raise RuntimeError("consumer bug")

    kube = ScriptedKube(
        lists=[page([obj("a", "1"), obj("bad", "2")], "2")],
        watches=[[{"type": "ADDED", "object": obj("b", "3")}]],
    )
    informer = Informer(kube, "/api/v1/pods", on_event=handler, transform=transform).start()
    assert kube.done.wait(5)
    informer.stop()
    assert seen == ["a", "b"]
    assert informer.synced.is_set()


def test_a_version_that_changes_nothing_the_transform_keeps_is_stored_without_an_event():
    def phase_only(raw):
        return {"metadata": {"name": raw["metadata"]["name"]}, "phase": raw.get("phase")}

    kube = ScriptedKube(
        lists=[page([obj("a", "1", phase="Pending"), obj("b", "2", phase="Pending")], "2"),
               page([obj("a", "7", phase="Running", heartbeat=3), obj("b", "8", phase="Failed")], "8")],
        watches=[
            [
                {"type": "MODIFIED", "object": obj("a", "3", phase="Pending", heartbeat=1)},
                {"type": "MODIFIED", "object": obj("a", "4", phase="Running", heartbeat=1)},
                {"type": "MODIFIED", "object": obj("a", "5", phase="Running", heartbeat=2)},
            ],
            [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}],
        ],
    )
    informer, events = run(kube, transform=phase_only)
    # heartbeats alone are not reported, in the watch or in the relist after 410
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b")]
    assert informer.get("ns/a")["phase"] == "Running" and informer._versions["ns/a"] == "7"


def test_an_unchanged_object_keeps_its_stored_copy_and_only_changes_are_counted():
    informer = Informer(None, "/api/v1/pods", transform=lambda raw: dict(phase=raw.get("phase")))
    informer._replace([obj("a", "1", phase="Pending"), obj("b", "1", phase="Pending")], "1")
    assert informer.changes == 2
    stored = informer.get("ns/a")
    informer._apply({"type": "MODIFIED", "object": obj("a", "2", phase="Pending", heartbeat=1)})
    informer._replace([obj("a", "3", phase="Pending", heartbeat=2), obj("b", "1", phase="Pending")], "3")
    assert informer.get("ns/a") is stored and informer.changes == 2 and informer._versions["ns/a"] == "3"
    informer._apply({"type": "MODIFIED", "object": obj("a", "4", phase="Running")})
    assert informer.get("ns/a") == {"phase": "Running"} and informer.changes == 3
    informer._replace([obj("a", "4", phase="Running")], "5")  # b is gone
    informer._apply({"type": "DELETED", "object": obj("c", "6")})  # never stored: nothing changes
    assert informer.changes == 4 and informer.get("ns/b") is None


def test_on_change_gets_the_version_each_change_replaced_in_the_watch_and_in_a_relist():
    changes: list = []
    informer = Informer(None, "/api/v1/pods", transform=lambda raw: dict(phase=raw.get("phase")),
                        on_change=lambda kind, now, before: changes.append((kind, now, before)))
    informer._replace([obj("a", "1", phase="Pending"), obj("b", "1", phase="Pending")], "1")
    informer._apply({"type": "MODIFIED", "object": obj("a", "2", phase="Running")})
    informer._replace([obj("a", "3", phase="Succeeded")], "3")  # b is gone
    informer._apply({"type": "DELETED", "object": obj("a", "4", phase="Succeeded")})
    assert changes == [
        ("ADDED", {"phase": "Pending"}, None), ("ADDED", {"phase": "Pending"}, None),
        ("MODIFIED", {"phase": "Running"}, {"phase": "Pending"}),
        ("DELETED", {"phase": "Pending"}, {"phase": "Pending"}),
        ("MODIFIED", {"phase": "Succeeded"}, {"phase": "Running"}),
        ("DELETED", {"phase": "Succeeded"}, {"phase": "Succeeded"}),
    ]
