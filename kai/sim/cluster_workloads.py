"""The workloads of the simulator's cluster file: jobs with their pod sets, subgroups, topology constraints,
requests and DRA claims (``docs/simulate.md``)."""

from __future__ import annotations

from typing import Any

import attrs

from kai.api import (
    GpuRequestError,
    Job,
    PodSet,
    ResourceRequest,
    SubGroup,
    Task,
    TaskStatus,
    Toleration,
    TopologyConstraint,
    parse_gpu_sharing,
)
from kai.api.dra import ALL, EXACT_COUNT, DeviceRequest, PodResourceClaim, ResourceClaim
from kai.api.names import QUEUE_LABEL
from kai.api.numa import QOS_CLASSES
from kai.api.podgroup import NON_PREEMPTIBLE, PREEMPTIBLE, SEMI_PREEMPTIBLE
from kai.common.errors import ConfigError
from kai.common.yamlfile import describe
from kai.sim.cluster_fields import MAX_GPUS, MAX_PODS, MAX_PRIORITY, Entry, mig_counts, named

#: KAI's priority classes and their values.
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
#: Jobs with a priority below this are preemptible unless the workload says otherwise (KAI's rule).
PREEMPTIBLE_BELOW = 100
WORKLOAD_FIELDS = (
    "name", "queue", "priority", "preemptible", "replicas", "min_available", "gpus", "cpu", "memory",
    "node_selector", "tolerations", "running_on", "topology", "subgroups", "pod_sets", "annotations", "mig",
    "qos_class", "claims", "labels", "preemptibility",
)
#: KAI's preemptibility values of a workload's ``preemptibility``.
PREEMPTIBILITIES = (PREEMPTIBLE, NON_PREEMPTIBLE, SEMI_PREEMPTIBLE)
#: A claim of a workload's pods (one request for devices of a class; ``shared``: one claim for all its pods).
CLAIM_FIELDS = ("name", "device_class", "count", "all", "selectors", "admin_access", "shared")
#: Fields of a workload that belong to each pod set when the workload lists ``pod_sets``.
POD_SET_ONLY = ("replicas", "min_available", "running_on")
POD_SET_FIELDS = ("name", "parent", "gpus", "cpu", "memory", "topology") + POD_SET_ONLY
SUBGROUP_FIELDS = ("name", "parent", "topology")
CONSTRAINT_FIELDS = ("topology", "required_level", "preferred_level")


def parse_jobs(file: str, items: Any, node_names: set[str], now: float, classes: set[str],
               claims: list[ResourceClaim]) -> list[Job]:
    """The jobs of the file's workloads; the claims of their pods are added to ``claims``."""
    entries = named(items, file, "workloads")
    jobs = []
    pods = 0  # described by the workloads before this one
    for i, (where, item) in enumerate(entries):
        e = Entry(item, where, WORKLOAD_FIELDS)
        name, priority = e.get("name", str), _priority(e)
        # Earlier workloads were submitted earlier: one second apart, in file order.
        job = Job(name, e.get("queue", str), priority, creation=now - float(len(entries) - i),
                  topology=_constraint(e))
        job.pod_sets.clear()
        job.preemptible = e.get("preemptible", bool, priority < PREEMPTIBLE_BELOW)
        preemptibility = e.text("preemptibility", "", PREEMPTIBILITIES)
        if preemptibility:
            job.preemptible = preemptibility != NON_PREEMPTIBLE
            job.semi_preemptible = preemptibility == SEMI_PREEMPTIBLE
        if e.has("pod_sets"):
            for key in POD_SET_ONLY:
                if e.has(key):
                    raise ConfigError(f"{where}: field '{key}' belongs in each of 'pod_sets'")
            job.subgroups = _subgroups(e)
            for ps_where, ps in named(e.data["pod_sets"], where, "pod_sets"):
                ps_e = Entry(ps, ps_where, POD_SET_FIELDS)
                ps_name = ps_e.get("name", str)
                if ps_name in job.pod_sets or ps_name in job.subgroups:
                    raise ConfigError(f"{ps_where}: name {describe(ps_name)} is used twice in the workload")
                parent = ps_e.get("parent", str, None)
                if parent is not None and parent not in job.subgroups:
                    raise ConfigError(f"{ps_where}: field 'parent' names unknown subgroup {describe(parent)}")
                _add_pod_set(job, ps_e, ps_name, parent, e, f"{name}-{ps_name}", node_names, now,
                             pods + len(job.tasks))
        else:
            if e.has("subgroups"):
                raise ConfigError(f"{where}: field 'subgroups' needs 'pod_sets' (the pods of the subgroups)")
            _add_pod_set(job, e, "default", None, None, name, node_names, now, pods)
        requests = _claim_requests(e, classes)
        if requests:
            _claim_pods(job, requests, claims, e)
        jobs.append(job)
        pods += len(job.tasks)
    return jobs


def _priority(e: Entry) -> int:
    value = e.get("priority", (int, str), PRIORITY_CLASSES["train"], "a number or a priority class name")
    if isinstance(value, str):
        if value not in PRIORITY_CLASSES:
            names = ", ".join(f"{k} ({v})" for k, v in PRIORITY_CLASSES.items())
            raise ConfigError(f"{e.where}: field 'priority': unknown priority class {describe(value)}; "
                              f"KAI's are {names}")
        return PRIORITY_CLASSES[value]
    return e.whole("priority", value, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)


def _add_pod_set(job: Job, e: Entry, ps_name: str, parent: str | None, workload: Entry | None, prefix: str,
                 node_names: set[str], now: float, pods: int) -> None:
    """Add one pod set of ``e`` (the workload itself, or one of its ``pod_sets``) and its pods to ``job``;
    requests not given in a pod set default to the workload's. ``pods``: pods the file described before."""
    outer = workload or e
    replicas = e.count("replicas", 1, minimum=1)
    if pods + replicas > MAX_PODS:
        raise ConfigError(f"{e.where}: the file describes more than {MAX_PODS:,} pods, the most it may")
    min_available = e.count("min_available", replicas, minimum=1)
    if min_available > replicas:
        raise ConfigError(f"{e.where}: field 'min_available' ({min_available}) exceeds 'replicas' ({replicas})")
    job.pod_sets[ps_name] = PodSet(ps_name, min_available, parent, _constraint(e) if workload else None)

    def amount(key: str) -> float:
        return e.quantity(key, outer.quantity(key, 0.0) if workload else 0.0)

    gpus = e.count("gpus", outer.count("gpus", 0, maximum=MAX_GPUS) if workload else 0, maximum=MAX_GPUS)
    request, invalid = _request(outer, gpus, amount("cpu") * 1000, amount("memory"))
    tolerations = tuple(_toleration(t, f"{outer.where}: tolerations[{k}]")
                        for k, t in enumerate(outer.get("tolerations", list, [])))
    placed = _running_on(e, replicas, node_names)
    qos_class = outer.text("qos_class", "", QOS_CLASSES)
    for k in range(replicas):
        node = placed[k] if k < len(placed) else None
        job.add_task(Task(f"{prefix}-{k}", job.uid, request, TaskStatus.RUNNING if node else TaskStatus.PENDING,
                          node, creation=job.creation, labels={"job-name": job.name, **outer.labels("labels")},
                          pod_set=ps_name,
                          node_selector=outer.labels("node_selector"), tolerations=tolerations, invalid=invalid,
                          qos_class=qos_class))
    if placed:
        job.last_start = now - 60.0


def _request(e: Entry, gpus: int, cpu: float, memory: float) -> tuple[ResourceRequest, str | None]:
    """A pod's request, and why it can never be scheduled when the workload's GPU-sharing annotations are
    malformed (not a file error: the pods stay pending with the reason, as in a cluster)."""
    base: dict[str, Any] = {"cpu": cpu, "memory": memory, "gpus": gpus, "mig": mig_counts(e, "mig")}
    try:
        fraction, devices, mib = parse_gpu_sharing(e.labels("annotations"), gpu_limit=gpus)
    except GpuRequestError as exc:
        return ResourceRequest(**base), f"invalid GPU request: {exc}"
    return ResourceRequest(gpu_fraction=fraction, gpu_devices=devices, gpu_memory_mib=mib, **base), None


def _toleration(value: Any, where: str) -> Toleration:
    e = Entry(value, where, ("key", "operator", "value", "effect"))
    op = e.text("operator", "Equal", ("Equal", "Exists"))
    return Toleration(e.get("key", str, ""), op, str(e.get("value", (str, int, float), "")), e.get("effect", str, ""))


def _running_on(e: Entry, replicas: int, node_names: set[str]) -> list[str]:
    value = e.get("running_on", (str, list), [], "a node name or a list of node names (one per running pod)")
    nodes = [value] if isinstance(value, str) else e.names("running_on")
    if len(nodes) > replicas:
        raise ConfigError(f"{e.where}: field 'running_on' lists {len(nodes)} pods but 'replicas' is {replicas}")
    for node in nodes:
        if node not in node_names:
            raise ConfigError(f"{e.where}: field 'running_on' names unknown node {describe(node)}")
    return nodes


def _subgroups(e: Entry) -> dict[str, SubGroup]:
    """The inner groups of a workload's tree; parents must be listed before their children."""
    groups: dict[str, SubGroup] = {}
    for where, item in named(e.get("subgroups", list, []), e.where, "subgroups"):
        g = Entry(item, where, SUBGROUP_FIELDS)
        name, parent = g.get("name", str), g.get("parent", str, None)
        if name in groups:
            raise ConfigError(f"{where}: subgroup {describe(name)} is listed twice")
        if parent is not None and parent not in groups:
            raise ConfigError(f"{where}: field 'parent' names {describe(parent)}, which is not a subgroup listed "
                              "before it")
        groups[name] = SubGroup(name, parent, _constraint(g))
    return groups


def _constraint(e: Entry) -> TopologyConstraint | None:
    """The entry's ``topology`` constraint: ``{topology, required_level, preferred_level}``."""
    if not e.has("topology"):
        return None
    c = Entry(e.data["topology"], f"{e.where}: topology", CONSTRAINT_FIELDS)
    required, preferred = c.get("required_level", str, None), c.get("preferred_level", str, None)
    if required is None and preferred is None:
        raise ConfigError(f"{c.where}: give 'required_level', 'preferred_level' or both")
    return TopologyConstraint(c.get("topology", str), required, preferred)


def _claim_requests(e: Entry, classes: set[str]) -> list[tuple[str, bool, DeviceRequest]]:
    """(claim name, shared, its one request) of each entry of a workload's ``claims``."""
    out = []
    for where, item in named(e.get("claims", list, []), e.where, "claims"):
        c, request = claim_request(item, where, classes, CLAIM_FIELDS)
        out.append((c.get("name", str), c.get("shared", bool, False), request))
    return out


def claim_request(item: Any, where: str, classes: set[str], fields: tuple[str, ...],
                  max_count: int = MAX_GPUS) -> tuple[Entry, DeviceRequest]:
    """A claim entry (fields ``fields``, among them ``{device_class, count, all, selectors, admin_access}``) and
    its one request: ``count`` devices of the class (at most ``max_count``), or ``all`` the matching ones."""
    c = Entry(item, where, fields)
    device_class = c.get("device_class", str)
    if device_class not in classes:
        raise c.fail("device_class", f"names unknown device class {describe(device_class)}")
    every = c.get("all", bool, False)
    if every and c.has("count"):
        raise ConfigError(f"{where}: fields 'all' and 'count' exclude each other")
    request = DeviceRequest("devices", device_class, tuple(c.names("selectors")), ALL if every else EXACT_COUNT,
                            0 if every else c.count("count", 1, minimum=1, maximum=max_count),
                            c.get("admin_access", bool, False))
    return c, request


def _claim_pods(job: Job, requests: list[tuple[str, bool, DeviceRequest]], claims: list[ResourceClaim],
                e: Entry) -> None:
    """Give every pod of ``job`` its claims: one per pod (``<pod>-<claim>``), or one for all (``shared``)."""
    shared = {name: ResourceClaim("default", f"{job.name}-{name}", (request,), labels={QUEUE_LABEL: job.queue})
              for name, is_shared, request in requests if is_shared}
    claims.extend(shared.values())
    for task in job.tasks.values():
        if task.node is not None:
            raise ConfigError(f"{e.where}: pods with 'claims' cannot be 'running_on' a node (their devices are "
                              "not known); let them be placed in a first cycle")
        own = []
        for name, is_shared, request in requests:
            if is_shared:
                claim = shared[name]
            else:  # as if generated from a template for the pod
                claim = ResourceClaim("default", f"{task.name}-{name}", (request,), from_template=True)
                claims.append(claim)
            own.append((PodResourceClaim(name, claim.name, "" if is_shared else name), claim))
        task.resource_claims = tuple(entry for entry, _ in own)
        task.request = attrs.evolve(task.request, dra_gpus=sum(claim.gpus for _, claim in own))
