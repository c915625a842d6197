"""The queue file of a timed trace replay (``--queues FILE``): which queues there are and which pod goes where.

Two shapes are read:

* a mapping with ``queues`` -- a list of queues in the cluster file's form (``docs/simulate.md``) or of
  KAI Queue objects -- and optionally ``map``, from values of the trace's queue column to queue names;
* KAI's Queue objects as ``kubectl`` takes them: one per YAML document, or a ``List`` of them.

A KAI Queue is read as the scheduler reads it from the API server (``spec.resources.{gpu,cpu,memory}``
with ``quota``, ``limit`` and ``overQuotaWeight``, ``spec.parentQueue``, ``spec.priority``). Every
error names the file and the field.
"""

from __future__ import annotations

from typing import Any

import attrs

from kai.api import Queue
from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, describe, read_yaml_documents
from kai.kube.views import queue_view
from kai.sim.cluster_file import parse_queues

TOP_FIELDS = ("queues", "map")
KAI_FIELDS = ("apiVersion", "kind", "metadata", "spec")
SPEC_FIELDS = ("parentQueue", "priority", "resources", "displayName", "preemptMinRuntime", "reclaimMinRuntime")
RESOURCE_FIELDS = ("quota", "limit", "overQuotaWeight")


@attrs.frozen
class QueueFile:
    """The queues of a queue file and the map from trace values to their names (empty: values are names)."""

    queues: list[Queue]
    names: dict[str, str] = attrs.field(factory=dict)

    def queue_of(self, value: str) -> str:
        return self.names.get(value, value)

    def leaves(self) -> set[str]:
        parents = {q.parent for q in self.queues}
        return {q.name for q in self.queues if q.name not in parents}


def read_queue_file(path: str) -> QueueFile:
    """The queues of ``path``; a :class:`ConfigError` naming the file and the field when it is wrong."""
    docs = [d for d in read_yaml_documents(path) if d is not None]
    if len(docs) == 1 and isinstance(docs[0], dict) and "queues" in docs[0]:
        top = Fields(docs[0], path, TOP_FIELDS)
        items = top.sequence("queues")
        names = top.labels("map")
        queues = _queues(path, items)
    else:
        if len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "List":
            docs = Fields(docs[0], path).sequence("items")
        queues = [_kai_queue(item, f"{path}: document {i + 1}") for i, item in enumerate(docs)]
        names = {}
    if not queues:
        raise ConfigError(f"{path}: defines no queue")
    seen = {q.name for q in queues}
    for value, name in names.items():
        if name not in seen:
            raise ConfigError(f"{path}: field 'map': {describe(value)} maps to unknown queue {describe(name)}")
    return QueueFile(queues, names)


def _queues(path: str, items: list) -> list[Queue]:
    """A ``queues`` list: cluster-file entries, or KAI Queue objects when the first one is."""
    if items and isinstance(items[0], dict) and "spec" in items[0]:
        return [_kai_queue(item, f"{path}: queues[{i}]") for i, item in enumerate(items)]
    return parse_queues(path, items)


def _kai_queue(item: Any, where: str) -> Queue:
    """One KAI Queue object, its fields checked before the scheduler's reader takes it."""
    e = Fields(item, where, KAI_FIELDS)
    if e.get("kind", str, "Queue") != "Queue":
        raise e.fail("kind", f"must be Queue, not {describe(item['kind'])}")
    name = e.entry("metadata").get("name", str)
    where = f"{where} {describe(name)}"
    spec = Fields(e.mapping("spec"), f"{where}: spec", SPEC_FIELDS)
    spec.get("parentQueue", str, "")
    spec.whole("priority", 100)
    resources = spec.entry("resources", ("gpu", "cpu", "memory"))
    for resource in ("gpu", "cpu", "memory"):
        r = resources.entry(resource, RESOURCE_FIELDS)
        r.number("quota", 0, minimum=-1)
        r.number("limit", 0, minimum=-1)
        r.number("overQuotaWeight", 1, minimum=0)
    return queue_view(item)
