"""Looking up Kubernetes objects while grouping pods: the reader contract and an in-memory reader.

A reader answers ``get`` by (API group, kind, namespace, name) -- the version is not significant,
as with the API server -- and lists pods by label equality. A reader may also ``list`` the objects of
any kind by label equality (the Karta fallback needs it; without it no Karta is found). Lookups
return copies: a grouper may change what it gets.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Protocol

from kai.api.podgroup import NotFoundError
from kai.grouping.unstructured import labels, meta_str, split_api_version

#: Kinds without a namespace; they are looked up by name only.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "PriorityClass",
        "Namespace",
        "Node",
        "Queue",
        "Topology",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PersistentVolume",
        "StorageClass",
        "RuntimeClass",
    }
)


class ObjectReader(Protocol):
    """What a podgrouper may read from the cluster."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict:
        """The object, or raise :class:`kai.api.podgroup.NotFoundError`."""

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        """Pods of ``namespace`` carrying every label of ``selector``."""


def plural(kind: str) -> str:
    """The resource name of a kind, as the API server forms it (``PriorityClass`` -> ``priorityclasses``)."""
    word = kind.lower()
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def not_found(api_version: str, kind: str, name: str) -> NotFoundError:
    """The API server's NotFound error: ``jobs.batch "x" not found`` (core group: ``pods "x" not found``)."""
    group, _ = split_api_version(api_version)
    resource = plural(kind) + (f".{group}" if group else "")
    return NotFoundError(f'{resource} "{name}" not found')


class MemoryObjects:
    """An in-memory :class:`ObjectReader` over a set of object maps."""

    def __init__(self, objects: Iterable[dict] = ()):
        self._objects: dict[tuple[str, str, str, str], dict] = {}
        for obj in objects:
            self.add(obj)

    @staticmethod
    def _key(api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
        group, _ = split_api_version(api_version)
        return group, kind, "" if kind in CLUSTER_SCOPED_KINDS else (namespace or ""), name

    def add(self, obj: dict) -> None:
        """Store ``obj`` (replacing an object with the same group, kind, namespace and name)."""
        key = self._key(
            str(obj.get("apiVersion") or ""),
            str(obj.get("kind") or ""),
            meta_str(obj, "namespace"),
            meta_str(obj, "name"),
        )
        self._objects[key] = obj

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict:
        obj = self._objects.get(self._key(api_version, kind, namespace, name))
        if obj is None:
            raise not_found(api_version, kind, name)
        return copy.deepcopy(obj)

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        return self.list("v1", "Pod", namespace, selector)

    def list(self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        """Objects of the kind in ``namespace`` (any namespace for ``""``) carrying every label of ``selector``."""
        wanted_group, _ = split_api_version(api_version)
        found = []
        for (group, obj_kind, ns, _), obj in self._objects.items():
            if group != wanted_group or obj_kind != kind or (namespace and ns != namespace):
                continue
            obj_labels = labels(obj)
            if all(obj_labels.get(k) == v for k, v in selector.items()):
                found.append(copy.deepcopy(obj))
        return found
