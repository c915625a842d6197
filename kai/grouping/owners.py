"""The owner walk: from a pod up its ``ownerReferences`` to its top owner, as KAI's podgrouper walks it.

Each owner is read through the :class:`~kai.grouping.objects.ObjectReader` and must carry the uid
the reference names; an owner the reader may not see ends the walk there, and an owner with more
than one owner, or references that lead back to an object already walked (a cycle), is an error.
"""

from __future__ import annotations

from kai.api.podgroup import ForbiddenError, GroupingError
from kai.grouping.objects import ObjectReader
from kai.grouping.unstructured import meta_str


def resolve_owners(reader: ObjectReader, pod: dict) -> tuple[dict, list[dict]]:
    """The pod's top owner (read in full) and its owners, nearest first, the top owner last.

    A pod without owners is its own top owner (the pod given) and has no owners.
    """
    namespace = meta_str(pod, "namespace")
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    owners: list[dict] = []
    top = _pod_reference(pod)
    walked = {_identity(top)}
    ref = refs[0] if refs else None
    while ref is not None:
        if not isinstance(ref, dict):
            raise GroupingError(
                f"invalid owner reference {ref!r} on the way up from pod {namespace}/{meta_str(pod, 'name')}"
            )
        try:
            owner = _read_owner(reader, ref, namespace)
        except ForbiddenError:
            break
        except GroupingError as err:
            raise GroupingError(
                f"failed to find {ref.get('kind', '')}: <{namespace}/{ref.get('name', '')}>, "
                f"uid: <{ref.get('uid', '')}>: {err}"
            ) from err
        if _identity(owner) in walked:
            raise GroupingError(
                f"the owner references of pod {namespace}/{meta_str(pod, 'name')} form a cycle: "
                f"{owner['kind']} <{meta_str(owner, 'name')}> is reached twice"
            )
        walked.add(_identity(owner))
        owners.append(owner)
        top = owner
        next_refs = (owner.get("metadata") or {}).get("ownerReferences") or []
        if len(next_refs) > 1:
            raise GroupingError(
                f"found {ref.get('kind', '')} <{ref.get('name', '')} in namespace {namespace}> "
                f"with multiple owners: {next_refs}"
            )
        ref = next_refs[0] if next_refs else None
    if not owners:  # the pod as given: read again by name, it may be an older pod of the same name
        return {**pod, "apiVersion": top["apiVersion"], "kind": top["kind"]}, owners
    top_owner = reader.get(
        str(top.get("apiVersion") or ""),
        str(top.get("kind") or ""),
        meta_str(top, "namespace"),
        meta_str(top, "name"),
    )
    return top_owner, owners

def _read_owner(reader: ObjectReader, ref: dict, namespace: str) -> dict:
    owner = reader.get(
        str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), namespace, str(ref.get("name") or "")
    )
    uid = str(ref.get("uid") or "")
    if meta_str(owner, "uid") != uid:
        raise GroupingError(f"Owner resource with uid {uid} not found")
    owner["apiVersion"] = owner.get("apiVersion") or ref.get("apiVersion", "")
    owner["kind"] = owner.get("kind") or ref.get("kind", "")
    return owner


def _identity(obj: dict) -> tuple[str, str, str]:
    """What names an object within the pod's namespace: apiVersion, kind, name."""
    return str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), meta_str(obj, "name")


def _pod_reference(pod: dict) -> dict:
    """The pod as its own top owner (``v1``/``Pod`` when the map lacks its type)."""
    return {
        "apiVersion": pod.get("apiVersion") or "v1",
        "kind": pod.get("kind") or "Pod",
        "metadata": {"name": meta_str(pod, "name"), "namespace": meta_str(pod, "namespace")},
    }
