"""What must hold on a cluster after faults, checked on plain API objects (decoded JSON dicts).

Each check returns its violations as readable lines (empty: it holds). The checks read only what the
API shows -- pods, nodes, PodGroups, BindRequests, events -- and what a watch recorded meanwhile.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal

from kai.api import names
from kai.binder.reservation import pod_groups
from kai.common.quantity import parse

GPU = "nvidia.com/gpu"
#: The resources a node must not give out more of than it has.
RESOURCES = ("cpu", "memory", GPU, "pods")
TERMINATED = ("Succeeded", "Failed")
#: Who an Evict event is about: KAI's messages start ``Pod NS/NAME was ...`` or end ``... pod: NS/NAME``.
EVICTED_POD = re.compile(r"(?:^Pod |evicting remaining pod: )([^/\s]+)/(\S+?)(?=\s|$)")


def meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def node_of(pod: Mapping) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def holds_node(pod: Mapping) -> bool:
    """Bound and not finished: the pod takes its requests from its node (a pod being deleted still does)."""
    return bool(node_of(pod)) and (pod.get("status") or {}).get("phase") not in TERMINATED


def pod_requests(pod: Mapping) -> dict[str, Decimal]:
    """What a pod takes from its node, as the kubelet counts it: per resource the larger of its containers'
    sum and its largest init container (a limit stands in for a missing request), and one pod slot."""
    spec = pod.get("spec") or {}

    def requests(container: Mapping) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {name: parse(value) for name, value in merged.items()}

    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.get("containers") or ():
        for name, value in requests(container).items():
            total[name] += value
    for container in spec.get("initContainers") or ():
        for name, value in requests(container).items():
            total[name] = max(total[name], value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += parse(value)
    total["pods"] = Decimal(1)
    return dict(total)


def overcommitted_nodes(nodes: Iterable[Mapping], pods: Iterable[Mapping]) -> list[str]:
    """Nodes whose bound pods request more CPU, memory, GPUs or pod slots than the node's allocatable."""
    by_node: dict[str, list[Mapping]] = defaultdict(list)
    for pod in pods:
        if holds_node(pod):
            by_node[node_of(pod)].append(pod)
    out = []
    for node in nodes:
        name = meta(node).get("name", "")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        used: dict[str, Decimal] = defaultdict(Decimal)
        for pod in by_node.get(name, ()):
            for resource, value in pod_requests(pod).items():
                used[resource] += value
        for resource in RESOURCES:
            have = parse(allocatable.get(resource, "0"))
            if used[resource] > have:
                holders = ", ".join(f"{meta(p).get('namespace')}/{meta(p).get('name')}={pod_requests(p)[resource]}"
                                    for p in by_node[name] if pod_requests(p).get(resource))
                out.append(f"node {name}: {resource} requested {used[resource]} > allocatable {have} "
                           f"by {len(by_node[name])} pods ({holders})")
    return out


def shared_gpu_violations(pods: Iterable[Mapping], live_nodes: set[str]) -> list[str]:
    """Shared GPUs: the fractions of one device group add up to at most 1, every bound shared-GPU pod names
    its group, and a group in use on a live node has its reservation pod there (holding the device)."""
    fractions: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    reserved: set[tuple[str, str]] = set()
    out = []
    pods = list(pods)
    for pod in pods:
        labels = meta(pod).get("labels") or {}
        if labels.get(names.RESERVATION_APP[0]) == names.RESERVATION_APP[1] and holds_node(pod):
            reserved.add((node_of(pod), labels.get(names.GPU_GROUP_LABEL, "")))
    for pod in pods:
        fraction = (meta(pod).get("annotations") or {}).get(names.GPU_FRACTION)
        if fraction is None or not holds_node(pod):
            continue
        groups = pod_groups(meta(pod).get("labels") or {})
        if not groups:
            out.append(f"shared-GPU pod {meta(pod).get('name')} bound to {node_of(pod)} without a GPU group label")
        for group in groups:
            fractions[(node_of(pod), group)] += Decimal(fraction)
    for (node, group), total in sorted(fractions.items()):
        if total > 1:
            out.append(f"GPU group {group} on node {node}: fractions add up to {total} > 1")
        if node in live_nodes and (node, group) not in reserved:
            out.append(f"GPU group {group} on node {node} is in use but has no reservation pod")
    return out


def bound_event_counts(events: Iterable[Mapping]) -> Counter:
    """Successful bindings the binder reported (``Bound`` events) per pod UID."""
    counts: Counter = Counter()
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") == names.REASON_BOUND and involved.get("kind") == "Pod":
            counts[involved.get("uid")] += int(event.get("count") or 1)
    return counts


def double_binds(nodes_seen: Mapping[str, set[str]], succeeded_on: Mapping[str, set[str]], bound_events: Counter,
                 pods: Mapping[str, Mapping], names_by_uid: Mapping[str, str]) -> list[str]:
    """Pods (by UID) placed more than once: seen on two nodes by the watch, with Succeeded BindRequests for two
    nodes, with more than one ``Bound`` event, or bound elsewhere than their Succeeded BindRequest says."""
    out = []

    def name(uid: str) -> str:
        return names_by_uid.get(uid, uid)

    for uid, seen in sorted(nodes_seen.items()):
        if len(seen) > 1:
            out.append(f"pod {name(uid)} seen on nodes {sorted(seen)}")
    for uid, nodes in sorted(succeeded_on.items()):
        if len(nodes) > 1:
            out.append(f"pod {name(uid)} has Succeeded BindRequests for nodes {sorted(nodes)}")
        pod = pods.get(uid)
        if pod is not None and node_of(pod) and {node_of(pod)} != nodes:
            out.append(f"pod {name(uid)} is bound to {node_of(pod)}, its Succeeded BindRequest says {sorted(nodes)}")
    for uid, count in sorted(bound_events.items()):
        if count > 1:
            out.append(f"pod {name(uid)} has {count} Bound events")
    return out


def evicted_pods(events: Iterable[Mapping]) -> set[str]:
    """``namespace/name`` of the pods KAI's ``Evict`` events (on PodGroups) name."""
    out = set()
    for event in events:
        if event.get("reason") == names.REASON_EVICT:
            out.update(f"{ns}/{name}" for ns, name in EVICTED_POD.findall(event.get("message") or ""))
    return out


def budget_overruns(plan, namespace: str, evicted: set[str]) -> list[str]:
    """The services (a chaos plan's, each under a budget of ``minAvailable`` bare pods) that lost more pods to
    evictions (``evicted``: ``namespace/name``) than the budget could ever allow: its pods less its minimum."""
    members: dict[str, set[str]] = defaultdict(set)
    for job in plan.jobs:
        if job.service:
            members[job.service].update(f"{namespace}/{name}" for name in job.pod_names())
    out = []
    for service, pods in sorted(members.items()):
        allowed = len(pods) - plan.budgets[service]
        if len(pods & evicted) > allowed:
            out.append(f"service {service}: {len(pods & evicted)} pods evicted, its budget allows {allowed} at most")
    return out


def explained(pod: Mapping, podgroup: Mapping | None, events_about: Mapping[tuple[str, str], set[str]]) -> bool:
    """A pending pod is explained by condition PodScheduled=False, an Unschedulable event, or its PodGroup's
    scheduling condition or Unschedulable / NotReady event."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
        return True
    if names.REASON_UNSCHEDULABLE in events_about.get(("Pod", meta(pod).get("name")), set()):
        return True
    if podgroup is None:
        return False
    if (podgroup.get("status") or {}).get("schedulingConditions"):
        return True
    reasons = events_about.get(("PodGroup", meta(podgroup).get("name")), set())
    return bool(reasons & {names.REASON_UNSCHEDULABLE, names.REASON_NOT_READY})


def podgroup_of(pod: Mapping) -> str:
    return (meta(pod).get("annotations") or {}).get(names.POD_GROUP_ANNOTATION, "")


def account_pods(created: Mapping[str, str], pods: Mapping[str, Mapping], podgroups: Mapping[str, Mapping],
                 events: Iterable[Mapping], live_nodes: set[str], evicted_elsewhere: set[str] = frozenset(),
                 seen_on: Mapping[str, set[str]] | None = None) -> tuple[Counter, list[str]]:
    """Where every pod the run created (UID -> ``namespace/name``) ended up, and the pods lost.

    Counted: ``running`` (on a live node), ``pending`` (unbound, explained), ``on a vanished node`` (bound to
    a node deleted since), ``removed with a vanished node`` (gone, last seen (``seen_on``: UID -> nodes) on a
    deleted node: the pod garbage collector removes those), ``evicted`` (gone, named by an Evict event or,
    when a kill lost that event, in ``evicted_elsewhere``). Lost: bound to a live node but not Running,
    pending without any explanation, gone without an eviction.
    """
    events = list(events)
    about: dict[tuple[str, str], set[str]] = defaultdict(set)
    for event in events:
        involved = event.get("involvedObject") or {}
        about[(involved.get("kind"), involved.get("name"))].add(event.get("reason"))
    evicted = evicted_pods(events) | set(evicted_elsewhere)
    counts: Counter = Counter()
    lost = []
    for uid, key in sorted(created.items(), key=lambda item: item[1]):
        pod = pods.get(uid)
        if pod is None:
            if key in evicted:
                counts["evicted"] += 1
            elif any(node not in live_nodes for node in (seen_on or {}).get(uid, ())):
                counts["removed with a vanished node"] += 1
            else:
                lost.append(f"pod {key} is gone and no eviction names it")
            continue
        node = node_of(pod)
        phase = (pod.get("status") or {}).get("phase")
        if node and node not in live_nodes:
            counts["on a vanished node"] += 1
        elif node:
            if phase == "Running":
                counts["running"] += 1
            else:
                lost.append(f"pod {key} is bound to {node} but {phase}")
        elif explained(pod, podgroups.get(podgroup_of(pod)), about):
            counts["pending"] += 1
        else:
            lost.append(f"pod {key} is pending without an event or condition saying why")
    return counts, lost


def partial_gangs(podgroups: Mapping[str, Mapping], pods: Iterable[Mapping], live_nodes: set[str],
                  removed: set[str] = frozenset()) -> list[str]:
    """PodGroups with some but fewer than ``minMember`` pods bound; those with a pod on a vanished node (not in
    ``live_nodes``), or with a pod ``removed`` from one by the garbage collector, are left out: such a gang
    was whole until its node went."""
    pods = list(pods)
    bound: Counter = Counter(podgroup_of(p) for p in pods if holds_node(p))
    out = []
    for name in set(podgroups) - touching_vanished_nodes(pods, live_nodes) - set(removed):
        need = int((podgroups[name].get("spec") or {}).get("minMember") or 1)
        if 0 < bound[name] < need:
            out.append(f"PodGroup {name}: {bound[name]} of minMember {need} pods bound")
    return sorted(out)


def touching_vanished_nodes(pods: Iterable[Mapping], live_nodes: set[str]) -> set[str]:
    """The PodGroups with a pod bound to a node not in ``live_nodes``."""
    return {podgroup_of(p) for p in pods if holds_node(p) and node_of(p) not in live_nodes}


def unfinished_bind_requests(bind_requests: Iterable[Mapping]) -> list[str]:
    """BindRequests the binder has not finished (phase neither Succeeded nor Failed)."""
    return [f"BindRequest {meta(br).get('name')} for node {(br.get('spec') or {}).get('selectedNode')} is "
            f"{(br.get('status') or {}).get('phase') or 'without a phase'}"
            for br in bind_requests if (br.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
