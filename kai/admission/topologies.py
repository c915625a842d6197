"""KAI's Topology webhook (``kai.scheduler/v1alpha1``, ``POST /validate-kai-scheduler-v1alpha1-topology``).

The CRD's CEL rules already keep the levels' node labels unique, immutable and ``kubernetes.io/hostname``
last; the webhook adds KAI's rules for the levels' ``alias``: aliases are unique within the topology, and no
alias equals a level's ``nodeLabel`` (a workload's ``requiredTopologyLevel`` would be ambiguous).
"""

from __future__ import annotations

from kai.admission.responses import allow, deny, kind, refusal


def alias_problem(topology: object) -> str | None:
    """KAI's message for the topology's aliases, or None."""
    if not isinstance(topology, dict):
        return None
    levels = [level for level in ((topology.get("spec") or {}).get("levels") or ()) if isinstance(level, dict)]
    node_labels = {level.get("nodeLabel") for level in levels}
    seen: set[str] = set()
    duplicates, collisions = [], []
    for level in levels:
        alias = level.get("alias")
        if not alias:
            continue
        if alias in seen:
            duplicates.append(alias)
        seen.add(alias)
        if alias in node_labels:
            collisions.append(alias)
    errors = []
    if duplicates:
        errors.append(f"aliases must be unique within the topology; duplicated: {_go_list(duplicates)}")
    if collisions:
        errors.append(f"an alias must not equal a nodeLabel; conflicting: {_go_list(collisions)}")
    return f"invalid topology aliases: {'; '.join(errors)}" if errors else None


def _go_list(items: list[str]) -> str:
    """Go's ``%v`` of a sorted string slice: ``[a b]``."""
    return f"[{' '.join(sorted(items))}]"


def review(request: dict) -> dict:
    """The ``response`` of an AdmissionReview of a Topology."""
    if kind(request) != "Topology" or request.get("operation") not in ("CREATE", "UPDATE"):
        return allow(request)
    problem = refusal(request, alias_problem)
    return allow(request) if problem is None else deny(request, problem)
