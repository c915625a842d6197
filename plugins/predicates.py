"""``predicates``: the per-node filters of Kubernetes and KAI.

Before any node is looked at (KAI's pre-predicates, reported as "Scheduling conditions were not met"):
the ConfigMaps the pod needs exist, the PersistentVolumeClaims of its volumes exist and are not
being deleted and none is unbound with immediate binding (kube-scheduler's VolumeBinding messages),
and some node of the pool is big enough for the pod (else the message names the largest node's
amount). For each candidate node of a task: the node is ready and
schedulable (a cordoned node takes a pod that tolerates its ``node.kubernetes.io/unschedulable:NoSchedule``
taint, as kube-scheduler's NodeUnschedulable filter allows); the task's node selector and required node
affinity match; the node's NoSchedule/NoExecute
taints are tolerated; its host ports are free on the node (pods placed in the session included); the
node's GPU type suits the request (MIG rules, GPU memory known for memory requests); the queue stays
within its limits (``kai_task_over_capacity``); required pod affinity and anti-affinity hold (including
the anti-affinity of pods already on the nodes); with ``restrictSchedulingNodes`` a GPU pod goes to a GPU
worker and any other pod to a CPU worker; a pod with claims needs a node its bound volumes are reachable
from and where its WaitForFirstConsumer claims can be bound (a matching available volume not taken
by another pod of the session, or a provisioner that reaches the node and, tracking capacity, has
room) -- see ``kai.api.storage``. Resource fit and pod slots (including the reservation pod of a
new shared GPU) are checked by the kernel before any predicate.
"""

from __future__ import annotations

from kai.sdk import (
    CPU_WORKER_LABEL,
    GPU_WORKER_LABEL,
    MIG_STRATEGY_LABEL,
    UNBOUND_IMMEDIATE,
    JobsKey,
    LargestNode,
    MemoKey,
    PodClaims,
    Reject,
    Taint,
    TaskStatus,
    claims_problem,
    classify,
    hookimpl,
    is_mig_resource,
    jobs_where,
    node_reasons,
    nodes_as_built,
    scheduling_conditions_message,
    static_bindings,
)

NAME = "predicates"
UNSCHEDULABLE = Reject(NAME, "node(s) were unschedulable")
#: The taint Kubernetes puts on a cordoned node; a pod tolerating it may go to the node.
CORDONED = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
NOT_READY = Reject(NAME, "node(s) had condition NotReady")
AFFINITY = Reject(NAME, "node(s) didn't match Pod's node affinity/selector")
POD_AFFINITY = Reject(NAME, "node(s) didn't match pod affinity rules")
POD_ANTI_AFFINITY = Reject(NAME, "node(s) didn't match pod anti-affinity rules")
EXISTING_ANTI_AFFINITY = Reject(NAME, "node(s) didn't satisfy existing pods anti-affinity rules")
MIG_ON_NON_MIG = Reject(NAME, "MIG job cannot be scheduled on non-MIG node")
MIG_SINGLE = Reject(NAME, "only whole gpu jobs can run on a node with MigStrategy='single'")
MIG_MIXED = Reject(NAME, "non MIG jobs cant run on a node with MigStrategy='mixed'")
PORTS = Reject(NAME, "node(s) didn't have free ports for the requested pod ports")
MIG_ENABLED_LABEL = "node-role.kubernetes.io/mig-enabled"
#: Memo keys of what the plugin works out from the snapshot as built: the jobs with required anti-affinity, host
#: ports and volume claims, the MIG nodes' strategies by name, the largest node and whether a node has host ports
#: in use outside the jobs.
ANTI_AFFINITY = JobsKey("predicates/anti-affinity")
HOST_PORTS = JobsKey("predicates/host-ports")
CLAIMS = JobsKey("predicates/claims")
MIG_NODES: MemoKey[dict[str, str]] = MemoKey("predicates/mig-nodes")
LARGEST: MemoKey[LargestNode] = MemoKey("predicates/largest-node")
NODE_PORTS: MemoKey[bool] = MemoKey("predicates/node-ports")


def mig_strategy(node) -> str | None:
    """None for a node without MIG, else its strategy: ``single``, ``mixed`` or ``none``."""
    labels = node.node.labels
    enabled = labels.get(MIG_ENABLED_LABEL)
    if enabled is not None:
        if enabled.strip().lower() not in ("true", "1", "t"):
            return None
    elif not any(is_mig_resource(k) for k in node.node.allocatable.scalars):
        return None
    strategy = labels.get(MIG_STRATEGY_LABEL, "")
    return strategy if strategy in ("single", "mixed") else "none"


def gpu_type_veto(task, node, strategy: str | None):
    """KAI's rules for which GPU requests a node's GPU type (``strategy``, see :func:`mig_strategy`) accepts.

    Legacy MIG pods never run.
    """
    if task.legacy_mig:
        return Reject(NAME, f"Legacy MIG jobs cannot be scheduled on node {node.name}")
    req = task.request
    if not req.wants_gpu:
        return None
    if strategy is None:
        if req.mig:
            return MIG_ON_NON_MIG
    else:
        if req.mig:
            legacy = sorted(t.uid for t in node.tasks.values() if t.legacy_mig)
            if legacy:
                return Reject(NAME, f"MIG job cannot be scheduled on node with legacy MIG jobs: <{legacy}>")
        if strategy == "single" and not req.is_whole_gpu:
            return MIG_SINGLE
        if strategy == "mixed" and not req.mig:
            return MIG_MIXED
    if req.gpu_memory_mib and (node.node.gpu_memory_mib <= 0 or not node.node.gpu_memory_synced):
        return Reject(NAME, "node is not a gpu node or the gpu memory count on the node was not synced yet, "
                            f"task: <{task.namespace}/{task.name}>, node: <{node.name}>")
    return None


def matches_node_affinity(task, labels) -> bool:
    if any(labels.get(k) != v for k, v in task.node_selector.items()):
        return False
    if not task.node_affinity:
        return True
    return any(all(req.matches(labels) for req in term) for term in task.node_affinity)


def untolerated_taint(task, node):
    for taint in node.node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in task.tolerations):
            return taint
    return None


class _AffinityView:
    """Where the pods matching a task's affinity terms are, computed once per placement attempt."""

    def __init__(self, session, task):
        self.required = []  # (topology key, domains with a match, may go anywhere)
        self.forbidden: list[tuple] = []  # (topology key, domains with a match[, True: an existing pod's term])
        placed = [(n, t) for n in session.nodes for t in n.tasks.values() if t is not task]
        for term in task.pod_affinity:
            domains = self._domains(term, task, placed)
            self_ok = not domains and term.selector.matches(task.labels)
            self.required.append((term.topology_key, domains, self_ok))
        for term in task.pod_anti_affinity:
            self.forbidden.append((term.topology_key, self._domains(term, task, placed)))
        for node, other in placed:
            for term in other.pod_anti_affinity:
                namespaces = term.namespaces or (other.namespace,)
                value = node.labels.get(term.topology_key)
                if value is not None and task.namespace in namespaces and term.selector.matches(task.labels):
                    self.forbidden.append((term.topology_key, {value}, True))

    @staticmethod
    def _domains(term, task, placed) -> set:
        namespaces = term.namespaces or (task.namespace,)
        return {
            node.labels[term.topology_key]
            for node, other in placed
            if term.topology_key in node.labels and other.namespace in namespaces
            and term.selector.matches(other.labels)
        }

    def check(self, labels):
        for key, domains, self_ok in self.required:
            if not self_ok and labels.get(key) not in domains:
                return POD_AFFINITY
        for entry in self.forbidden:
            key, domains = entry[0], entry[1]
            if labels.get(key) in domains:
                return EXISTING_ANTI_AFFINITY if len(entry) == 3 else POD_ANTI_AFFINITY
        return None


def missing_config_maps(session, task) -> list[str]:
    """The ConfigMaps ``task`` needs that do not exist."""
    return [name for name in task.config_maps if f"{task.namespace}/{name}" not in session.snapshot.config_maps]


def claims_condition(session, task) -> tuple[str | None, PodClaims | None]:
    """kube-scheduler's VolumeBinding pre-filter: why the task's claims keep it pending, else its sorted claims."""
    storage = session.snapshot.storage
    problem = claims_problem(task.claims, task.namespace, task.name, storage)
    if problem is not None:
        return problem, None
    claims = classify(task.claims, task.namespace, storage)
    return (UNBOUND_IMMEDIATE, None) if claims.immediate else (None, claims)


class _Volumes:
    """The static volumes the tasks placed in the session take for their WaitForFirstConsumer claims."""

    def __init__(self):
        self.by_task: dict[str, tuple[str, ...]] = {}

    def taken(self, task) -> set[str]:
        return {v for uid, names in self.by_task.items() if uid != task.uid for v in names}

    def add(self, session, task, claims: PodClaims, node) -> None:
        pending = [c for c in claims.delayed if c.selected_node is None]
        if pending:
            chosen, _ = static_bindings(pending, node.name, node.node.labels, session.snapshot.storage,
                                        self.taken(task))
            self.by_task[task.uid] = tuple(v.name for v in chosen.values())

    def remove(self, task) -> None:
        self.by_task.pop(task.uid, None)


def restricted_node(task, node) -> Reject | None:
    """KAI's ``--restrict-node-scheduling`` rule: GPU pods on GPU workers, the others on CPU workers."""
    labels = node.node.labels
    if task.request.wants_gpu:
        if GPU_WORKER_LABEL not in labels:
            return Reject(NAME, f"gpu task: <{task.namespace}/{task.name}> can't run on non gpu nodes, "
                                f"node: <{node.name}>")
    elif CPU_WORKER_LABEL not in labels:
        return Reject(NAME, f"cpu task: <{task.namespace}/{task.name}> can't run on non cpu nodes, node: <{node.name}>")
    return None


def _has_anti_affinity(job) -> bool:
    return any(t.pod_anti_affinity for t in job.tasks.values())


def _has_host_ports(job) -> bool:
    return any(t.host_ports for t in job.tasks.values())


def _has_claims(job) -> bool:
    return any(t.claims for t in job.tasks.values())


class _HostPorts:
    """The host ports in use on each node: pods outside the snapshot's jobs, and every task on the node --
    placed, pipelined or releasing -- kept current through the allocation events."""

    def __init__(self, session):
        self.by_node: dict[str, dict[str, tuple]] = {}
        for node in session.nodes:
            held = {t.uid: t.host_ports for t in node.tasks.values() if t.host_ports}
            if node.node.host_ports:
                held[""] = node.node.host_ports
            if held:
                self.by_node[node.name] = held

    def add(self, task, node) -> None:
        if task.host_ports:
            self.by_node.setdefault(node.name, {})[task.uid] = task.host_ports

    def remove(self, task, node) -> None:
        if task.host_ports and not (task.status is TaskStatus.RELEASING and task.node == node.name):
            self.by_node.get(node.name, {}).pop(task.uid, None)

    def free(self, task, node) -> bool:
        held = self.by_node.get(node.name)
        if not held:
            return True
        return not any(mine.conflicts(theirs) for uid, ports in held.items() if uid != task.uid
                       for theirs in ports for mine in task.host_ports)


class Predicates:
    name = NAME

    def __init__(self):
        self.affinity: dict[str, _AffinityView] = {}
        self.anti_affinity_pods = False
        #: Queue-capacity verdict of the task being placed, when it does not depend on the node.
        self.capacity: dict[str, Reject | None] = {}
        #: Strategy of every MIG node of the session, by node name.
        self.mig_nodes: dict[str, str] = {}
        #: Whether the GPU-type rules can veto the task being placed (False for most whole-GPU and CPU tasks).
        self.gpu_rules: dict[str, bool] = {}
        #: The verdict of the pre-predicates of each task (they do not change within a session).
        self.conditions: dict[str, Reject | None] = {}
        self.ports: _HostPorts | None = None
        self.largest: LargestNode | None = None
        self.restrict = False
        #: The sorted claims of each task with claims that passed the pre-predicates.
        self.claims: dict[str, PodClaims] = {}
        self.volumes = _Volumes()

    @hookimpl
    def kai_session_open(self, session):
        self.affinity = {}
        self.capacity = {}
        self.anti_affinity_pods = bool(jobs_where(session, ANTI_AFFINITY, _has_anti_affinity))
        self.mig_nodes = nodes_as_built(session, MIG_NODES, lambda: {
            n.name: s for n in session.nodes if (s := mig_strategy(n)) is not None})
        self.gpu_rules = {}
        self.conditions = {}
        self.claims = {}
        self.volumes = _Volumes()
        node_ports: bool = nodes_as_built(session, NODE_PORTS, lambda: any(n.node.host_ports for n in session.nodes))
        if node_ports or jobs_where(session, HOST_PORTS, _has_host_ports):
            self.ports = _HostPorts(session)
        else:
            self.ports = None
        if self.ports is None and not jobs_where(session, CLAIMS, _has_claims):
            # no host ports and no claims in this session: nothing to follow
            session.calls.withdraw(self, ("kai_on_allocate", "kai_on_deallocate"))
        self.largest = nodes_as_built(session, LARGEST, lambda: LargestNode(session.nodes))
        self.restrict = session.plugins.config.restrict_node_scheduling

    @hookimpl
    def kai_session_job_added(self, session, job):
        tasks = job.tasks.values()
        if (any(t.pod_anti_affinity for t in tasks) and not self.anti_affinity_pods) or (
                self.ports is None and any(t.host_ports or t.claims for t in tasks)):
            return Reject(NAME, "the session opened without pods with host ports, claims or anti-affinity")
        return None

    @hookimpl
    def kai_on_allocate(self, session, task, node):
        if task.host_ports and self.ports is not None:
            self.ports.add(task, node)
        if task.claims and task.uid in self.claims:
            self.volumes.add(session, task, self.claims[task.uid], node)

    @hookimpl
    def kai_on_deallocate(self, session, task, node):
        if task.host_ports and self.ports is not None:
            self.ports.remove(task, node)
        if task.claims:
            self.volumes.remove(task)

    def _scheduling_conditions(self, session, task) -> Reject | None:
        """KAI's pre-predicates: the needed ConfigMaps exist and some node is big enough."""
        failures = []
        missing = missing_config_maps(session, task) if task.config_maps else ()
        if missing:
            failures.append(("ConfigMap", f"Missing required configmaps: [{' '.join(missing)}]"))
        if task.claims:
            problem, claims = claims_condition(session, task)
            if problem is not None:
                failures.append(("VolumeBinding", problem))
            elif claims is not None:
                self.claims[task.uid] = claims
        too_big = self.largest.too_small_for(task) if self.largest is not None else None
        if too_big is not None:
            failures.append(("MaxNodePoolResources", too_big))
        if not failures:
            return None
        return Reject(NAME, scheduling_conditions_message(task, failures))

    @hookimpl
    def kai_pre_predicate(self, session, task, job):
        if task.uid not in self.conditions:
            self.conditions[task.uid] = self._scheduling_conditions(session, task)
        veto = self.conditions[task.uid]
        if veto is not None:
            return veto
        self.gpu_rules[task.uid] = self._gpu_rules_apply(task)
        if task.pod_affinity or task.pod_anti_affinity or self.anti_affinity_pods:
            self.affinity[task.uid] = _AffinityView(session, task)
        else:
            self.affinity.pop(task.uid, None)
        if not task.request.gpu_memory_mib:
            self.capacity[task.uid] = session.task_over_capacity(task, job, None)
        else:
            self.capacity.pop(task.uid, None)
        return None

    @hookimpl
    def kai_predicate(self, session, task, job, node):
        n = node.node
        if n.unschedulable and not any(t.tolerates(CORDONED) for t in task.tolerations):
            return UNSCHEDULABLE
        if not n.ready:
            return NOT_READY
        if (task.node_selector or task.node_affinity) and not matches_node_affinity(task, n.labels):
            return AFFINITY
        taint = untolerated_taint(task, node) if n.taints else None
        if taint is not None:
            return Reject(NAME, f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}")
        if task.host_ports and not (self.ports is not None and self.ports.free(task, node)):
            return PORTS
        rules = self.gpu_rules.get(task.uid)
        if rules or (rules is None and self._gpu_rules_apply(task)):
            veto = gpu_type_veto(task, node, self.mig_nodes.get(n.name))
            if veto is not None:
                return veto
        veto = (self.capacity[task.uid] if task.uid in self.capacity
                else session.task_over_capacity(task, job, node))
        if veto is not None:
            if veto.kind:  # KAI's form of a queue-capacity veto on one node
                return Reject(veto.plugin, f"node does not have enough capacity. Reason: {veto.kind}, "
                                           f"Details: {veto.reason}", veto.kind)
            return veto
        view = self.affinity.get(task.uid)
        if view is not None and (veto := view.check(n.labels)) is not None:
            return veto
        if task.claims and (claims := self.claims.get(task.uid)) is not None:
            reasons = node_reasons(claims, n.name, n.labels, session.snapshot.storage, self.volumes.taken(task))
            if reasons:
                return Reject(NAME, reasons[0])
        return restricted_node(task, node) if self.restrict else None

    @hookimpl
    def kai_nodes_alike(self, session, task, job):
        # After the pre-predicates: no label, port, volume, GPU-type or per-node capacity rule applies to the
        # task, so the verdict depends on schedulability, readiness and taints alone.
        return (not (task.node_selector or task.node_affinity or task.host_ports or task.claims or self.restrict)
                and self.gpu_rules.get(task.uid) is False and task.uid not in self.affinity
                and task.uid in self.capacity)

    def _gpu_rules_apply(self, task) -> bool:
        req = task.request
        return task.legacy_mig or bool(req.mig) or bool(req.gpu_memory_mib) or (bool(self.mig_nodes) and req.wants_gpu)


def build(arguments):
    return Predicates()
