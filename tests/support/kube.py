"""Pieces for in-memory API servers that stand in for the Kubernetes API in unit tests of kai.cluster."""

from __future__ import annotations

import copy

from kai.kube.client import ApiError, Kube


def merge_patch(target: dict, patch: dict) -> None:
    """Apply a JSON merge patch (RFC 7386) to ``target`` in place: ``None`` removes a key."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
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


class RequestKube(Kube):
    """A :class:`Kube` without a connection: ``get``/``post``/``patch``/``delete`` reach the subclass's
    ``request(method, path, query=None, body=None, content_type=...)`` as they do the real one."""

    def __init__(self) -> None:  # no API client: every call ends in the subclass's request()
        self.timeout = 0.0
