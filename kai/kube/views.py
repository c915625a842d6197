"""Slim views of KAI's objects that more than one component reads, decoded once per change.

PodGroups (with KAI's rules of their priority and preemptibility), Queues and PriorityClasses, and the time
stamps and durations of their fields. The ``*_view`` functions are informer transforms: they read only the
fields used and never raise on bad content -- what is malformed is kept in the view and reported. The
scheduler's own views (pods, nodes, BindRequests ...) are :mod:`kai.scheduler.views`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import attrs

from kai.api import UNLIMITED, Queue, QuotaSpec, Reservation, ResourceTypeQuota, TopologyConstraint
from kai.api.names import (
    LAST_EVICTION_ANNOTATION,
    LAST_START_ANNOTATION,
    MAX_RUNTIME_ANNOTATION,
    PENDING_REASON_ANNOTATION,
    PREEMPTIBILITY_LABEL,
    RESERVATION_ANNOTATION,
    STALE_ANNOTATION,
)
from kai.api.podgroup import NON_PREEMPTIBLE, PREEMPTIBLE, SEMI_PREEMPTIBLE
from kai.common.durations import parse_duration
from kai.common.times import rfc3339

#: An object of decoded JSON, as the API server sends it.
JsonObject = dict[str, Any]
#: A PodGroup's ``spec.subGroups`` entry: name, minMember, parent, topology constraint, minSubGroup.
SubGroupSpec = tuple[str, int, str | None, TopologyConstraint | None, int | None]
#: Job priority when the PodGroup's class is unknown and no class is the global default (KAI's).
DEFAULT_PRIORITY = 50
#: Jobs below this priority are preemptible unless the PodGroup says otherwise.
PREEMPTIBLE_BELOW = 100
#: KAI multiplies queue memory quotas by 10^6 (its ``mebibytes`` constant).
QUEUE_MEMORY_UNIT = 1_000_000.0


def timestamp(value: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def go_duration(value: object) -> float | None:
    """Seconds of a Go duration string (``90s``, ``1h30m``); None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def strings(value: object) -> dict[str, str]:
    """A map of strings (labels, annotations) as strings; empty when it is not a map."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


@attrs.frozen(slots=True)
class PodGroupView:
    key: str
    namespace: str
    name: str
    uid: str
    queue: str
    priority_class: str
    preemptibility: str
    min_member: int
    #: (name, minMember, parent, topology constraint, minSubGroup) of each ``spec.subGroups`` entry.
    sub_groups: tuple[SubGroupSpec, ...]
    min_subgroup: int | None
    topology: TopologyConstraint | None
    created: float
    last_start: float | None
    stale_since: float | None
    last_eviction: float | None
    preemption_delay: float | None
    staleness_grace_period: float | None
    mark_unschedulable: bool
    #: ``status.schedulingConditions`` as found (the scheduler appends to them).
    conditions: tuple[JsonObject, ...]
    #: What is malformed in the spec (the field is ignored), or "".
    invalid: str = ""
    #: The dominant reason the scheduler last wrote (annotation ``kai.scheduler/pending-reason``), or "".
    pending_reason: str = ""
    #: ``kai.scheduler/max-runtime`` in seconds; None when unset or malformed (then noted in ``invalid``).
    max_runtime: float | None = None
    #: ``kai.scheduler/reservation``, the nodes the gang holds; None when unset or unreadable.
    reservation: Reservation | None = None


def _topology(tc: object) -> TopologyConstraint | None:
    if not isinstance(tc, dict) or not tc.get("topology"):
        return None
    return TopologyConstraint(str(tc["topology"]), tc.get("requiredTopologyLevel") or None,
                              tc.get("preferredTopologyLevel") or None)


def podgroup_view(raw: JsonObject) -> PodGroupView:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    labels, annotations = strings(meta.get("labels")), strings(meta.get("annotations"))
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    conditions = tuple(c for c in status.get("schedulingConditions") or () if isinstance(c, dict))
    min_member = spec.get("minMember")
    invalid: list[str] = []
    return PodGroupView(
        key=f"{ns}/{name}", namespace=ns, name=name, uid=meta.get("uid", ""), queue=str(spec.get("queue") or ""),
        priority_class=str(spec.get("priorityClassName") or ""),
        preemptibility=str(spec.get("preemptibility") or labels.get(PREEMPTIBILITY_LABEL) or ""),
        min_member=max(int(min_member), 1) if isinstance(min_member, int) else 1,
        sub_groups=tuple(
            (str(sg.get("name") or ""), int(sg.get("minMember") or 0), sg.get("parent"),
             _topology(sg.get("topologyConstraint")), _whole(sg.get("minSubGroup")))
            for sg in spec.get("subGroups") or () if isinstance(sg, dict)
        ),
        min_subgroup=_whole(spec.get("minSubGroup")),
        topology=_topology(spec.get("topologyConstraint")),
        created=timestamp(meta.get("creationTimestamp")) or 0.0,
        last_start=timestamp(annotations.get(LAST_START_ANNOTATION)),
        stale_since=timestamp(annotations.get(STALE_ANNOTATION)),
        last_eviction=timestamp(annotations.get(LAST_EVICTION_ANNOTATION)),
        preemption_delay=_duration(spec, "preemptionDelay", invalid),
        staleness_grace_period=_duration(spec, "stalenessGracePeriod", invalid),
        mark_unschedulable=spec.get("markUnschedulable") is not False,
        conditions=conditions,
        max_runtime=_max_runtime(annotations.get(MAX_RUNTIME_ANNOTATION), invalid),
        reservation=parse_reservation(annotations.get(RESERVATION_ANNOTATION)),
        invalid="; ".join(invalid),
        pending_reason=annotations.get(PENDING_REASON_ANNOTATION, ""),
    )


def _max_runtime(value: str | None, invalid: list[str]) -> float | None:
    """Seconds of the ``kai.scheduler/max-runtime`` annotation; a malformed or negative one is noted in ``invalid``."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value, f"annotation {MAX_RUNTIME_ANNOTATION}")
    except ValueError as exc:
        invalid.append(f"{exc}; the annotation is ignored")
        return None
    if seconds <= 0:
        invalid.append(f"annotation {MAX_RUNTIME_ANNOTATION}: {value!r} is not a positive duration; the annotation is "
                       "ignored")
        return None
    return seconds


def parse_reservation(value: str | None) -> Reservation | None:
    """The reservation a ``kai.scheduler/reservation`` annotation records; None when absent or unreadable."""
    if not value:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        return None
    since, until = timestamp(data.get("since")), timestamp(data.get("until"))
    if since is None or until is None:
        return None
    return Reservation(tuple(str(n) for n in data["nodes"]), since, until, timestamp(data.get("start")))


def reservation_annotation(reservation: Reservation) -> str:
    """The ``kai.scheduler/reservation`` annotation of ``reservation``."""
    start = None if reservation.start is None else rfc3339(reservation.start)
    return json.dumps({"nodes": list(reservation.nodes), "since": rfc3339(reservation.since),
                       "until": rfc3339(reservation.until), "start": start}, separators=(",", ":"))


def _whole(value: object) -> int | None:
    """A count that is not negative, else None (the CRD refuses anything else)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _duration(spec: JsonObject, field: str, invalid: list[str]) -> float | None:
    """Seconds of a Go duration field of ``spec`` (None when unset); a malformed one is noted in ``invalid``."""
    value = spec.get(field)
    if value is None:
        return None
    try:
        return parse_duration(value, f"spec.{field}")
    except ValueError as exc:
        invalid.append(f"{exc}; the field is ignored")
        return None


def queue_view(raw: JsonObject) -> Queue:
    """A Queue's spec as a domain object (copied per cycle by :func:`to_queue`)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    resources = spec.get("resources") or {}

    def quota(res: str, scale: float) -> QuotaSpec:
        r = resources.get(res) or {}

        def amount(key: str) -> float:
            value = float(r.get(key, 0) or 0)
            return UNLIMITED if value == UNLIMITED else value * scale

        weight = r.get("overQuotaWeight")
        return QuotaSpec(amount("quota"), amount("limit"), float(1 if weight is None else weight))

    priority = spec.get("priority")
    return Queue(
        name=meta.get("name", ""), parent=spec.get("parentQueue") or None,
        priority=int(priority) if isinstance(priority, int) else 100,
        gpu=quota("gpu", 1.0), cpu=quota("cpu", 1.0), memory=quota("memory", QUEUE_MEMORY_UNIT),
        creation=timestamp(meta.get("creationTimestamp")) or 0.0,
        preempt_min_runtime=go_duration(spec.get("preemptMinRuntime")),
        reclaim_min_runtime=go_duration(spec.get("reclaimMinRuntime")),
        display_name=str(spec.get("displayName") or ""),
        resource_types=tuple(resource_type(t) for t in spec.get("resourceTypes") or () if isinstance(t, dict)),
    )


def resource_type(raw: JsonObject) -> ResourceTypeQuota:
    """One entry of a Queue's ``spec.resourceTypes``: its GPU quota on the nodes its ``nodeSelector`` matches
    (quota 0, limit unlimited and over-quota weight 1 when not given)."""
    gpu, selector = raw.get("gpu"), raw.get("nodeSelector")
    gpu = gpu if isinstance(gpu, dict) else {}
    selector = selector if isinstance(selector, dict) else {}

    def number(key: str, default: float) -> float:
        value = gpu.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    return ResourceTypeQuota(str(raw.get("name") or ""), {str(k): str(v) for k, v in selector.items()},
                             QuotaSpec(number("quota", 0.0), number("limit", UNLIMITED),
                                       number("overQuotaWeight", 1.0)))


def priority_class_view(raw: JsonObject) -> tuple[str, int, bool]:
    """(name, value, globalDefault) of a PriorityClass."""
    return ((raw.get("metadata") or {}).get("name", ""), int(raw.get("value") or 0), bool(raw.get("globalDefault")))


def job_priority(pg: PodGroupView, classes: dict[str, int], default: int) -> int:
    """The PodGroup's priority class value, else the global default class's, else 50."""
    return classes.get(pg.priority_class, default)


def is_preemptible(pg: PodGroupView, priority: int) -> bool:
    """``spec.preemptibility`` (or the preemptibility label) when set, else priority below 100. A semi-preemptible
    PodGroup is preemptible (its surplus; :func:`is_semi_preemptible`)."""
    if pg.preemptibility in (PREEMPTIBLE, SEMI_PREEMPTIBLE):
        return True
    if pg.preemptibility == NON_PREEMPTIBLE:
        return False
    return priority < PREEMPTIBLE_BELOW


def is_semi_preemptible(pg: PodGroupView) -> bool:
    """``spec.preemptibility`` (or the preemptibility label) is ``semi-preemptible``."""
    return pg.preemptibility == SEMI_PREEMPTIBLE
