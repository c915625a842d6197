"""Helpers for testing podgroupers (shipped or third-party) without a cluster.

Build objects with :func:`obj` and :func:`pod`, then run the whole grouping flow -- owner
resolution, choice of podgrouper, PodGroup metadata -- with :func:`group`, over the installed
podgroupers plus any ``plugins`` you pass::

    job = obj("batch/v1", "Job", "train", uid="u1")
    metadata = group(pod("train-abc", owner=job), job)
    assert metadata.name == "pg-train-abc-u1"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai.api.names import SCHEDULER_NAME
from kai.api.podgroup import PodGroupMetadata
from kai.grouping.hub import GroupingConfig, PodGrouperHub, build_hub
from kai.grouping.objects import MemoryObjects


def obj(
    api_version: str,
    kind: str,
    name: str,
    namespace: str = "default",
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A Kubernetes object map; ``owner`` (another object map) becomes its owner reference.

    ``uid`` defaults to ``"uid-<name>"``; extra keyword arguments are top-level fields (``spec=...``).
    """
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}" if uid is None else uid}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"].get("uid", ""),
                "controller": True,
            }
        ]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}


def pod(
    name: str,
    namespace: str = "default",
    owner: dict[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A ``v1`` Pod for ``kai-scheduler``."""
    return obj(
        "v1",
        "Pod",
        name,
        namespace,
        uid=uid,
        labels=labels,
        annotations=annotations,
        owner=owner,
        spec={"schedulerName": SCHEDULER_NAME, **(spec or {})},
    )


def hub(
    *objects: dict[str, Any],
    config: GroupingConfig | None = None,
    arguments: Mapping[str, Mapping[str, Any]] | None = None,
    plugins: Mapping[str, object] | None = None,
) -> PodGrouperHub:
    """A hub over an in-memory cluster holding ``objects``."""
    return build_hub(MemoryObjects(objects), config, arguments, plugins)


def group(
    the_pod: dict[str, Any],
    *objects: dict[str, Any],
    config: GroupingConfig | None = None,
    arguments: Mapping[str, Mapping[str, Any]] | None = None,
    plugins: Mapping[str, object] | None = None,
) -> PodGroupMetadata:
    """The PodGroup metadata of ``the_pod`` in a cluster holding the pod and ``objects``."""
    return hub(the_pod, *objects, config=config, arguments=arguments, plugins=plugins).group(the_pod)


def subgroup_of(metadata: PodGroupMetadata, the_pod: dict[str, Any]) -> str | None:
    """The name of the sub-group listing ``the_pod``, or ``None``."""
    meta = the_pod["metadata"]
    found = metadata.subgroup_for_pod(meta.get("namespace", ""), meta["name"])
    return found.name if found else None


__all__ = ["group", "hub", "obj", "pod", "subgroup_of"]
