"""Pieces for in-memory API servers that stand in for the Kubernetes API in unit tests of kai.cluster."""

from __future__ import annotations

import copy

from kai.kube.client import Kube


def merge_patch(target: dict, patch: dict) -> None:
    """Apply a JSON merge patch (RFC 7386) to ``target`` in place: ``None`` removes a key."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class RequestKube(Kube):
    """A :class:`Kube` without a connection: ``get``/``post``/``patch``/``delete`` reach the subclass's
    ``request(method, path, query=None, body=None, content_type=...)`` as they do the real one."""

    def __init__(self) -> None:  # no API client: every call ends in the subclass's request()
        self.timeout = 0.0
