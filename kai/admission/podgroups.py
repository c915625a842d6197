"""KAI's PodGroup webhook (``scheduling.run.ai/v2alpha2``, ``POST /validate-scheduling-run-ai-v2alpha2-podgroup``):
the subgroup tree and the gang minimums ``minMember`` / ``minSubGroup``, with KAI's messages.

Refused outright (the first one found):

* ``minMember`` and ``minSubGroup`` both set on the PodGroup, or on a subgroup;
* two subgroups with one name; a subgroup whose ``parent`` is not a subgroup; a cycle of parents.

Then every subgroup, in name order, is checked, and all faults are reported together (one per line):

* a leaf (no child subgroup) with ``minSubGroup``, or without ``minMember``;
* a mid-level subgroup with ``minMember`` (use ``minSubGroup``) -- only a warning on UPDATE, as in KAI, for
  PodGroups created before the rule;
* ``minSubGroup`` above the number of direct children (of the subgroup, or of the PodGroup: its subgroups
  without parent) -- always only a warning, as in KAI.

An UPDATE of a semi-preemptible PodGroup (``spec.preemptibility`` or the ``kai.scheduler/preemptibility``
label) that raises ``minMember`` or ``minSubGroup`` of the PodGroup or of one of its subgroups is refused
(KAI's semi-preemptible design): it would turn running surplus pods into the non-preemptible core.
"""

from __future__ import annotations

from kai.admission.responses import allow, deny, kind, refusal
from kai.api.names import PREEMPTIBILITY_LABEL
from kai.api.podgroup import SEMI_PREEMPTIBLE

#: Faults KAI turns into warnings, by operation.
EXCEEDS, PARENT_MIN_MEMBER = "minSubGroupExceedsChildCount", "parentMinMember"
WARNING_FAULTS = {"CREATE": (EXCEEDS,), "UPDATE": (PARENT_MIN_MEMBER, EXCEEDS)}


def faults(spec: dict) -> list[tuple[str, str]]:
    """(fault, message) of the PodGroup ``spec``'s gang minimums and subgroup tree, in KAI's order.

    Raises :class:`ValueError` with the message of a structural fault."""
    if spec.get("minMember") is not None and spec.get("minSubGroup") is not None:
        raise ValueError("minMember and minSubGroup are mutually exclusive: set minMember "
                         f"({spec['minMember']}) to schedule a fixed number of pods, or set minSubGroup to require "
                         "a minimum number of child SubGroups, but not both")
    subgroups = [sg for sg in spec.get("subGroups") or () if isinstance(sg, dict)]
    found = _subgroup_faults(subgroups)
    min_subgroup = spec.get("minSubGroup")
    if min_subgroup is not None:
        roots = sum(1 for sg in subgroups if sg.get("parent") is None)
        if min_subgroup > roots:
            found.append((EXCEEDS, f"minSubGroup ({min_subgroup}) exceeds the number of direct child SubGroups "
                                   f"({roots})"))
    return found


def _subgroup_faults(subgroups: list[dict]) -> list[tuple[str, str]]:
    by_name: dict[str, dict] = {}
    for sg in subgroups:
        name = sg.get("name", "")
        if name in by_name:
            raise ValueError(f"duplicate subgroup name {name}")
        by_name[name] = sg
    children: dict[str, list[str]] = {}
    for name, sg in by_name.items():
        parent = sg.get("parent")
        if parent is None:
            continue
        if parent not in by_name:
            raise ValueError(f"parent {parent} of {name} was not found")
        children.setdefault(parent, []).append(name)
    if _has_cycle(by_name):
        raise ValueError("cycle detected in subgroups")
    found = []
    for name in sorted(by_name):
        found += _min_faults(by_name[name], len(children.get(name, ())))
    return found


def _min_faults(sg: dict, child_count: int) -> list[tuple[str, str]]:
    name, min_member, min_subgroup = sg.get("name", ""), sg.get("minMember"), sg.get("minSubGroup")
    if min_member is not None and min_subgroup is not None:
        raise ValueError(f"subgroup {_quoted(name)}: minMember and minSubGroup are mutually exclusive")
    found = []
    if not child_count:
        if min_subgroup is not None:
            found.append(("invalidMinSubGroup", f"subgroup {_quoted(name)}: minSubGroup cannot be set on a leaf "
                                                "SubGroup (no child SubGroups)"))
        if min_member is None:
            found.append(("missingMinMember", f"subgroup {name}: minMember is required"))
        return found
    if min_member is not None:
        found.append((PARENT_MIN_MEMBER, f"subgroup {_quoted(name)}: minMember cannot be set on a mid-level SubGroup "
                                         "(has child SubGroups); use minSubGroup instead"))
    if min_subgroup is not None and min_subgroup > child_count:
        found.append((EXCEEDS, f"subgroup {_quoted(name)}: minSubGroup ({min_subgroup}) exceeds the number of "
                               f"direct child SubGroups ({child_count})"))
    return found


def _has_cycle(by_name: dict[str, dict]) -> bool:
    """Whether following parents from some subgroup comes back to it."""
    for start in by_name:
        seen, name = {start}, by_name[start].get("parent")
        while name is not None:
            if name in seen:
                return True
            seen.add(name)
            name = by_name[name].get("parent")
    return False


def _quoted(name: str) -> str:
    """Go's ``%q`` of a subgroup name (a DNS label: nothing to escape)."""
    return f'"{name}"'


def problem(podgroup: object, operation: str) -> tuple[str | None, list[str]]:
    """(refusal message or None, warnings) of the PodGroup for ``operation`` (CREATE or UPDATE)."""
    if not isinstance(podgroup, dict):
        return None, []
    try:
        found = faults(podgroup.get("spec") or {})
    except ValueError as exc:
        return str(exc), []
    warned = WARNING_FAULTS[operation]
    warnings = [message for fault, message in found if fault in warned]
    hard = [message for fault, message in found if fault not in warned]
    return ("\n".join(hard) if hard else None), warnings


def raised_minimums(old: object, new: object) -> str | None:
    """Why an UPDATE from ``old`` to ``new`` of a semi-preemptible PodGroup is refused: a raised minimum."""
    if not isinstance(old, dict) or not isinstance(new, dict) or not _semi_preemptible(new):
        return None
    before, after = old.get("spec") or {}, new.get("spec") or {}
    pairs = [("", before, after)]
    old_subgroups = {sg.get("name"): sg for sg in before.get("subGroups") or () if isinstance(sg, dict)}
    pairs += [(f"subgroup {_quoted(sg.get('name', ''))}: ", old_subgroups[sg.get("name")], sg)
              for sg in after.get("subGroups") or () if isinstance(sg, dict) and sg.get("name") in old_subgroups]
    for where, was, now in pairs:
        for key in ("minMember", "minSubGroup"):
            a, b = was.get(key), now.get(key)
            if isinstance(a, int) and isinstance(b, int) and b > a:
                return (f"{where}{key} of a semi-preemptible PodGroup cannot be increased ({a} to {b}): it would "
                        "make running elastic pods non-preemptible")
    return None


def _semi_preemptible(podgroup: dict) -> bool:
    labels = (podgroup.get("metadata") or {}).get("labels") or {}
    return SEMI_PREEMPTIBLE in ((podgroup.get("spec") or {}).get("preemptibility"), labels.get(PREEMPTIBILITY_LABEL))


def review(request: dict) -> dict:
    """The ``response`` of an AdmissionReview of a PodGroup."""
    operation = request.get("operation")
    if kind(request) != "PodGroup" or operation not in ("CREATE", "UPDATE"):
        return allow(request)
    if operation == "UPDATE" and (raised := raised_minimums(request.get("oldObject"), request.get("object"))):
        return deny(request, raised, [])
    message, warnings = problem(request.get("object"), operation)
    if refusal(request, lambda pg: problem(pg, operation)[0]) is None:
        return allow(request, warnings)
    return deny(request, message or "", warnings)

