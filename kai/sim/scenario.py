"""Load KAI conformance scenarios (the neutral scenario format) into the kernel's domain objects.

A :class:`Scenario` keeps the facts as parsed YAML; :meth:`Scenario.build` turns the current facts
into a fresh Snapshot, so a multi-round simulation can feed decisions back into the facts and
build again. The facts are read and checked once per content: while they are unchanged, a build
only makes fresh domain objects from what was read. Malformed input raises :class:`ScenarioError`
naming the file, the entry and the field.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable
from typing import Any

import attrs

from kai.api import (
    ACTIVE_USED,
    MIG_PREFIX,
    UNLIMITED,
    DisruptionBudget,
    Job,
    LabelRequirement,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodSet,
    Queue,
    QuotaSpec,
    Reservation,
    ResourceRequest,
    Resources,
    ResourceTypeQuota,
    SubGroup,
    Task,
    TaskStatus,
    Topology,
    TopologyConstraint,
    mig_gpu_slices,
)
from kai.api.numa import QOS_CLASSES
from kai.api.podgroup import NON_PREEMPTIBLE, PREEMPTIBLE, SEMI_PREEMPTIBLE
from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, describe, read_yaml
from kai.framework import PluginSpec, SchedulerConfig, build_snapshot
from kai.framework.config import DEFAULT_CONFIG, KAI_DEFAULT_PLUGINS, MAX_SETTING, parse_plugin_list
from kai.framework.reservation import parse_reservation_policy
from kai.sim.cluster_fields import MAX_GPU_MEMORY_MIB, MAX_GPUS, MAX_PODS, MAX_PODS_PER_NODE, MAX_PRIORITY
from kai.sim.dra_facts import ScenarioDRA
from kai.sim.numa_facts import amounts, numa_placement, numa_topology
from kai.sim.scenario_format import needs

NOW = 1_800_000_000.0
#: KAI's test harness creates its pod groups and pods without a namespace (its messages read ``</name>``).
NAMESPACE = ""
DEFAULT_NODE_CPU = 20_000_000.0
DEFAULT_NODE_MEMORY = 20_000_000_000.0
DEFAULT_GPU_MEMORY_MIB = 100
DEFAULT_TASK_CPU = 1000.0
DEFAULT_TASK_MEMORY = 1_000_000_000.0
STATUSES = {s.value: s for s in TaskStatus}
#: Largest job age or staleness (minutes): about 1900 years.
MAX_AGE_MINUTES = 1e9
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction", "runtimelimit")
#: KAI's preemptibility values of a job's ``preemptibility`` field.
PREEMPTIBILITIES = (PREEMPTIBLE, NON_PREEMPTIBLE, SEMI_PREEMPTIBLE)
#: The domain objects of a scenario's facts: nodes, queues, jobs, ``now``, topologies, the DRA objects and the
#: PodDisruptionBudgets.
Facts = tuple[list[Node], list[Queue], list[Job], float, list[Topology], ScenarioDRA, list[DisruptionBudget]]


class ScenarioError(ConfigError):
    """A scenario file is malformed."""


#: Most rounds a simulation scenario may ask for (``rounds_until_match`` and ``rounds_after_match``).
MAX_ROUNDS = 1000
EXPECTED_SUMS = ("gpus_required", "gpus_accepted", "cpu_millis_required", "memory_bytes_required",
                 "last_start_older_than_seconds")


def _fields(data: Any, where: str) -> Fields:
    return Fields(data, where, error=ScenarioError)


def _entries(data: Any, where: str) -> list[tuple[str, Fields]]:
    """(name, fields) of a mapping of names to mappings (``nodes``, ``expected.jobs``); null: none."""
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: must be a mapping of names, not {describe(data)}")
    out = []
    for name, value in data.items():
        if not isinstance(name, str):
            raise ScenarioError(f"{where}: {describe(name)} is not a name (a string)")
        out.append((name, _fields(value if value is not None else {}, f"{where}[{describe(name)}]")))
    return out


def _items(f: Fields, key: str) -> list[tuple[int, Any]]:
    """(index, item) of a list field (empty when not set)."""
    return list(enumerate(f.sequence(key, [])))


def _scalars(f: Fields, key: str) -> tuple[str, ...]:
    """A list of scalars (names, group ids), as strings."""
    values = f.sequence(key, [])
    for i, value in enumerate(values):
        if isinstance(value, (dict, list)) or value is None:
            raise f.fail(key, f"must list names; item {i} is {describe(value)}")
    return tuple(str(v) for v in values)


def _counts(f: Fields, key: str) -> dict[str, int]:
    """A mapping of MIG profiles to whole counts."""
    counts = {}
    for profile, count in f.mapping(key).items():
        try:
            mig_gpu_slices(str(profile))
        except ValueError:
            raise f.fail(key, f"names {describe(profile)}, not a MIG profile like {MIG_PREFIX}1g.10gb") from None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GPUS:
            raise f.fail(key, f"must map MIG profiles to counts from 0 to {MAX_GPUS}; {describe(profile)} maps to "
                         f"{describe(count)}")
        counts[str(profile)] = count
    return counts


@attrs.define
class Scenario:
    """One scenario of a conformance file."""

    name: str
    file: str
    data: dict[str, Any]
    #: How errors name the scenario (``file: scenario 'name'``).
    where: str = attrs.field(init=False)
    #: The facts as last read: (their content, marshalled; the maker of their domain objects).
    _read: tuple[bytes, Callable[[float], tuple]] | None = attrs.field(init=False, default=None, eq=False,
                                                                      repr=False)

    def __attrs_post_init__(self) -> None:
        self.where = f"{self.file}: scenario {describe(self.name)}"

    @property
    def mode(self) -> str:
        return self.data["mode"]

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(self.data["actions"])

    def config(self) -> SchedulerConfig:
        """The scheduler configuration of the scenario (``predicates: false`` drops that plugin; ``numa`` is added
        last when a node has a NUMA topology, as KAI's test harness does)."""
        cfg = _fields(self.data.get("config") or {}, f"{self.where}: config")
        plugins = cfg.data.get("plugins", "default")
        if plugins == "default":
            specs = list(DEFAULT_CONFIG.plugins)
        else:
            specs = list(parse_plugin_list(plugins, f"{self.where}: config.plugins"))
        if not cfg.flag("predicates", True):
            specs = [s for s in specs if s.name != "predicates"]
        nodes = self.data.get("nodes")
        if (isinstance(nodes, dict) and any(isinstance(n, dict) and n.get("numa") for n in nodes.values())
                and all(s.name != "numa" for s in specs)):
            specs.append(PluginSpec("numa"))
        return SchedulerConfig(
            self.actions, tuple(PluginSpec(s.name, s.arguments) for s in specs),
            cfg.number("staleness_grace_period_seconds", DEFAULT_CONFIG.staleness_grace_period),
            max_consolidation_preemptees=cfg.whole("max_consolidation_preemptees",
                                                   DEFAULT_CONFIG.max_consolidation_preemptees, -1, MAX_SETTING),
            allow_consolidating_reclaim=cfg.flag("allow_consolidating_reclaim",
                                                 DEFAULT_CONFIG.allow_consolidating_reclaim),
            reservation=parse_reservation_policy(cfg.data.get("reservation"), f"{self.where}: config"))

    def unbuilt_plugins(self, installed) -> list[str]:
        """Plugins the scenario configures that are not installed (KAI's defaults not shipped yet count
        only when listed explicitly)."""
        config = self.data.get("config")
        plugins = config.get("plugins", "default") if isinstance(config, dict) else "default"
        if not isinstance(plugins, list):  # "default", or malformed: the loader reports it
            return []
        names = [p if isinstance(p, str) else p.get("name") for p in plugins if isinstance(p, (str, dict))]
        return [n for n in names if n not in installed and n in KAI_DEFAULT_PLUGINS + ("gpuspread", "podaffinity")]

    # --- checking and building ----------------------------------------------------------------------

    def check(self) -> None:
        """Read every part of the scenario once, so that a malformed one fails when the file is loaded."""
        self.config()
        self.facts(NOW)
        self._check_expected()
        sim = _fields(self.data.get("simulation") or {}, f"{self.where}: simulation")
        for key in ("rounds_until_match", "rounds_after_match"):
            sim.whole(key, None, 0, MAX_ROUNDS)

    def _check_expected(self) -> None:
        where = f"{self.where}: expected"
        expected = _fields(self.data.get("expected") or {}, where)
        for section in ("jobs", "tasks"):
            for _, want in _entries(expected.data.get(section), f"{where}.{section}"):
                want.text("status", None, STATUSES)
                want.text("node", None)
                for key in EXPECTED_SUMS:
                    want.number(key, None)
                want.get("fit_error_message", (str, int, float), None, "a message")
                want.names("reserved_nodes")
                for i, zone in enumerate(want.sequence("numa_zones", [])):
                    if isinstance(zone, bool) or not isinstance(zone, int):
                        raise want.fail("numa_zones", f"must list zone indices; item {i} is {describe(zone)}")
        for _, want in _entries(expected.data.get("nodes"), f"{where}.nodes"):
            for key in ("idle_gpus", "releasing_gpus"):
                want.number(key, None)
            zones = _fields(want.mapping("numa_zones_available"), f"{want.where}: numa_zones_available")
            for zone in zones.data:
                if isinstance(zone, bool) or not isinstance(zone, int) or zone < 0:
                    raise want.fail("numa_zones_available", f"must map zone indices to amounts, not {describe(zone)}")
                amounts(zones, zone)
        for key in ("max_binds", "max_evictions", "max_pipelines"):
            expected.number(key, None, minimum=0)

    def build(self, now: float = NOW):
        """A fresh Snapshot of the current facts."""
        nodes, queues, jobs, now, topologies, dra, budgets = self.facts(now)
        return build_snapshot(nodes, queues, jobs, now, topologies, dra=dra.resources(), budgets=budgets)

    def facts(self, now: float) -> Facts:
        """Fresh domain objects of the current facts: nodes, queues, jobs, ``now``, topologies, the DRA objects
        and the budgets (immutable, so shared by the builds of the same facts)."""
        try:  # version 0: no references, whose use depends on reference counts, and no interning flags
            content = marshal.dumps(self.data, 0)
        except ValueError:  # a value marshal does not take (a YAML timestamp): read the facts every time
            return self._read_facts()(now)
        if self._read is None or self._read[0] != content:
            self._read = (content, self._read_facts())
        return self._read[1](now)

    def _read_facts(self) -> Callable[[float], Facts]:
        """Read and check the facts; the result makes their domain objects for a given ``now``."""
        top = _fields(self.data, self.where)
        dra = ScenarioDRA(self.where, NAMESPACE, top.data.get("device_classes"))
        nodes = [self._node(name, nd, dra) for name, nd in _entries(top.data.get("nodes"), f"{self.where}: nodes")]
        dra.read_claims(top.data.get("resource_claims"))
        queues = [self._queue(i, q) for i, q in _items(top, "queues")]
        jobs = [self._job(i, j, dra) for i, j in _items(top, "jobs")]
        topologies = [self._topology_def(i, t) for i, t in _items(top, "topologies")]
        budgets = [self._budget(i, b) for i, b in _items(top, "disruption_budgets")]

        def make(now: float) -> Facts:
            return ([n() for n in nodes], [q() for q in queues], [j(now) for j in jobs], now, list(topologies), dra,
                    list(budgets))

        return make

    def _budget(self, i: int, bd: Any) -> DisruptionBudget:
        """A PodDisruptionBudget covering the pods whose ``pod_labels`` include its ``pod_labels``."""
        name = _fields(bd, f"{self.where}: disruption_budgets[{i}]").text("name")
        f = _fields(bd, f"{self.where}: disruption budget {describe(name)}")
        selector = LabelSelector(tuple(sorted(f.labels("pod_labels").items())))
        return DisruptionBudget(name, NAMESPACE, selector, f.whole("disruptions_allowed", minimum=0, maximum=MAX_PODS))

    def _topology_def(self, i: int, td: Any) -> Topology:
        f = _fields(td, f"{self.where}: topologies[{i}]")
        f.sequence("levels")
        return Topology(f.text("name"), tuple(f.names("levels")))

    def _node(self, name: str, f: Fields, dra: ScenarioDRA) -> Callable[[], Node]:
        gpus = f.whole("gpus", 0, 0, MAX_GPUS)
        strategy = f.text("mig_strategy", None)
        gpu_mem = int(f.number("gpu_memory_mib", DEFAULT_GPU_MEMORY_MIB, 0, MAX_GPU_MEMORY_MIB))
        scalars = {p: float(c) for p, c in _counts(f, "mig_instances").items() if c}
        labels = {
            "kai.scheduler/type": name,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": str(gpu_mem),
            "node-role.kubernetes.io/mig-enabled": "true" if strategy else "false",
            "nvidia.com/mig.strategy": strategy or "",
        }
        labels.update(f.labels("labels"))
        labels["nvidia.com/gpu.memory"] = str(gpu_mem)
        dra.add_devices(name, f.sequence("devices", []), f"{f.where}: devices")
        cpu, memory = f.number("cpu_millis", DEFAULT_NODE_CPU, 0), f.number("memory_bytes", DEFAULT_NODE_MEMORY, 0)
        node_gpus = 0.0 if strategy == "mixed" else float(gpus)
        rest = {"max_pods": f.whole("max_pods", 110, 0, MAX_PODS_PER_NODE), "gpu_memory_mib": gpu_mem,
                "gpu_memory_synced": f.flag("gpu_memory_synced", True), "numa": numa_topology(f)}

        def make() -> Node:
            return Node(name, Resources(cpu, memory, node_gpus, dict(scalars)), dict(labels), **rest)

        return make

    def _queue(self, i: int, q: Any) -> Callable[[], Queue]:
        name = _fields(q, f"{self.where}: queues[{i}]").text("name")
        f = _fields(q, f"{self.where}: queue {describe(name)}")

        def amount(key, default):
            return f.number(key, default)

        def seconds(key):  # optional min runtimes (minruntime plugin)
            return f.number(key, None, 0)

        parent = f.text("parent", None)
        priority = f.whole("priority", 100, -MAX_PRIORITY, MAX_PRIORITY)
        gpu = (amount("deserved_gpus", 0.0), amount("max_allowed_gpus", UNLIMITED), amount("over_quota_weight", 0.0))
        cpu = (amount("deserved_cpu_millis", UNLIMITED), amount("max_allowed_cpu_millis", UNLIMITED), 1.0)
        memory = (amount("deserved_memory_bytes", UNLIMITED), amount("max_allowed_memory_bytes", UNLIMITED), 1.0)
        runtimes = seconds("preempt_min_runtime_seconds"), seconds("reclaim_min_runtime_seconds")
        types = [self._resource_type(f, k, t) for k, t in _items(f, "resource_types")]

        def make() -> Queue:
            return Queue(name=name, parent=parent, priority=priority, gpu=QuotaSpec(*gpu), cpu=QuotaSpec(*cpu),
                         memory=QuotaSpec(*memory), creation=float(i), preempt_min_runtime=runtimes[0],
                         reclaim_min_runtime=runtimes[1],
                         resource_types=tuple(ResourceTypeQuota(n, dict(sel), QuotaSpec(*spec))
                                              for n, sel, spec in types))

        return make

    @staticmethod
    def _resource_type(queue: Fields, k: int, data: Any) -> tuple[str, dict[str, str], tuple[float, float, float]]:
        """(name, node selector, (deserved, limit, over-quota weight)) of one of a queue's ``resource_types``."""
        f = _fields(data, f"{queue.where}: resource_types[{k}]")
        return f.text("name"), f.labels("node_selector"), (
            f.number("deserved_gpus", 0.0), f.number("max_allowed_gpus", UNLIMITED), f.number("over_quota_weight", 1.0))

    def _job(self, i: int, jd: Any, dra: ScenarioDRA) -> Callable[[float], Job]:
        name = _fields(jd, f"{self.where}: jobs[{i}]").text("name")
        f = _fields(jd, f"{self.where}: job {describe(name)}")
        tasks_data = f.sequence("tasks")
        queue = f.text("queue")
        priority = f.whole("priority", 0, -MAX_PRIORITY, MAX_PRIORITY)
        age = 60.0 * f.number("created_minutes_ago", 0, -MAX_AGE_MINUTES, MAX_AGE_MINUTES)
        topology = _topology(f, "topology_constraint")
        preemptible = f.flag("preemptible", priority < 100)
        preemptibility = f.text("preemptibility", "", choices=PREEMPTIBILITIES)
        if preemptibility:
            preemptible = preemptibility != NON_PREEMPTIBLE
        f.flag("deleting", False)
        pod_sets, subgroups = self._pod_sets(f, len(tasks_data))
        base = self._request(f)
        base["qos_class"] = f.text("qos_class", "", choices=QOS_CLASSES)
        sets = {p[0] for p in pod_sets}
        tasks = [self._task(name, k, td, base, sets, f.where, dra) for k, td in enumerate(tasks_data)]
        stale = f.number("stale_for_seconds", None, -MAX_AGE_MINUTES * 60.0, MAX_AGE_MINUTES * 60.0)
        rest = {"min_subgroup": f.whole("min_subgroup", None, 0, MAX_PODS),
                "preemption_delay": f.number("preemption_delay_seconds", None, 0, MAX_AGE_MINUTES * 60.0),
                "staleness_grace_period": f.number("staleness_grace_period_seconds", None, -MAX_AGE_MINUTES * 60.0,
                                                   MAX_AGE_MINUTES * 60.0),
                "max_runtime": f.number("max_runtime_seconds", None, 0, MAX_AGE_MINUTES * 60.0)}
        held = f.entry("reservation", ("nodes", "expires_in_seconds")) if f.has("reservation") else None
        reserved = None if held is None else (tuple(held.names("nodes")),
                                              held.number("expires_in_seconds", 3600.0, -MAX_AGE_MINUTES * 60.0,
                                                          MAX_AGE_MINUTES * 60.0))

        def make(now: float) -> Job:
            job = Job(name=name, namespace=NAMESPACE, queue=queue, priority=priority, preemptible=preemptible,
                      semi_preemptible=preemptibility == SEMI_PREEMPTIBLE, creation=now - age,
                      topology=_constraint(topology),
                      subgroups={g: SubGroup(g, parent, _constraint(tc), least) for g, parent, tc, least in subgroups},
                      pod_sets={p: PodSet(p, least, parent, _constraint(tc)) for p, least, parent, tc in pod_sets},
                      **rest)
            for task in tasks:
                job.add_task(task())
            if any(t.status in (TaskStatus.ALLOCATED, TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RUNNING)
                   for t in job.tasks.values()):
                job.last_start = now - 60.0
            if stale is not None:
                job.stale_since = now - stale
            if reserved is not None:
                job.reservation = Reservation(reserved[0], now - 60.0, now + reserved[1])
            return job

        return make

    def _pod_sets(self, f: Fields, n_tasks: int) -> tuple[list[tuple], list[tuple]]:
        """The job's pod sets (name, gang size, parent, constraint) and subgroups (name, parent, constraint,
        min_subgroup), in file order; a constraint is given as ``(topology, required, preferred)``."""
        pod_sets: dict[str, tuple] = {}
        subgroups: dict[str, tuple] = {}

        def add_sets(parent_fields: Fields, parent):
            for k, ps in _items(parent_fields, "pod_sets"):
                name = _fields(ps, f"{parent_fields.where}: pod_sets[{k}]").text("name")
                p = _fields(ps, f"{f.where}: pod set {describe(name)}")
                pod_sets[name] = (name, p.whole("min_available", minimum=0, maximum=MAX_PODS), parent,
                                  _topology(p, "topology_constraint"))

        def add_groups(parent_fields: Fields, parent):
            for k, sg in _items(parent_fields, "subgroups"):
                name = _fields(sg, f"{parent_fields.where}: subgroups[{k}]").text("name")
                g = _fields(sg, f"{f.where}: subgroup {describe(name)}")
                subgroups[name] = (name, parent, _topology(g, "topology_constraint"),
                                   g.whole("min_subgroup", None, 0, MAX_PODS))
                add_groups(g, name)
                add_sets(g, name)

        add_groups(f, None)
        add_sets(f, None)
        if not pod_sets or f.has("min_available"):
            pod_sets["default"] = ("default", f.whole("min_available", n_tasks, 0, MAX_PODS), None, None)
        return list(pod_sets.values()), list(subgroups.values())

    def _request(self, f: Fields) -> dict:
        g = f.number("gpus_per_task", 0, 0, MAX_GPUS)
        cpu = f.number("cpu_millis_per_task", DEFAULT_TASK_CPU, 0)
        memory = f.number("memory_bytes_per_task", DEFAULT_TASK_MEMORY, 0)
        gpu_mem = int(f.number("gpu_memory_mib_per_task", 0, 0, MAX_GPU_MEMORY_MIB))
        devices = f.whole("gpu_devices_per_task", 1, 1, MAX_GPUS)
        if f.flag("best_effort", False):
            return {"cpu": 0.0, "memory": 0.0, "gpus": 0, "fraction": 0.0, "gpu_mem": 0, "devices": 1}
        return {"cpu": cpu, "memory": memory, "gpus": int(g) if g >= 1 else 0, "fraction": g if 0 < g < 1 else 0.0,
                "gpu_mem": gpu_mem, "devices": devices}

    def _task(self, job: str, i: int, td: Any, base: dict, pod_sets: set[str], where: str,
              dra: ScenarioDRA) -> Callable[[], Task]:
        name = _fields(td, f"{where}: tasks[{i}]").text("name", None) or f"{job}-{i}"
        f = _fields(td, f"{where}: task {describe(name)}")
        state = f.text("state", choices=STATUSES)
        gpus = base["gpus"]
        task_gpus = f.number("gpus", None, 0, MAX_GPUS)
        if task_gpus is not None and not base["fraction"]:
            gpus = int(task_gpus)
        claims = dra.pod_claims(f, "resource_claims")
        request = ResourceRequest(
            cpu=base["cpu"], memory=base["memory"], gpus=gpus, gpu_fraction=base["fraction"],
            gpu_memory_mib=0 if base["fraction"] else base["gpu_mem"], mig=_counts(f, "mig"),
            gpu_devices=base["devices"] if base["fraction"] or base["gpu_mem"] else 1,
            dra_gpus=dra.gpus(claims),
        )
        pod_labels = f.labels("pod_labels")
        labels = {"job-name": name, **pod_labels}
        selector = LabelSelector(tuple(sorted(pod_labels.items())))
        affinity: tuple[tuple[LabelRequirement, ...], ...] = ()
        values = _scalars(f, "node_affinity")
        if values:
            affinity = ((LabelRequirement("kai.scheduler/type", "In", values),),)
        pod_aff = tuple(PodAffinityTerm(selector, k) for k in [f.text("pod_affinity_topology_key", None)] if k)
        pod_anti = tuple(PodAffinityTerm(selector, k) for k in [f.text("pod_anti_affinity_topology_key", None)] if k)
        sub_group = f.text("sub_group", None) or "default"
        if sub_group not in pod_sets:
            raise f.fail("sub_group", f"names unknown pod set {describe(sub_group)}")
        node = f.text("node", None)
        if node is None and STATUSES[state] in ACTIVE_USED:
            raise f.fail("node", f"is missing: a {state} task occupies a node")
        fields = {"name": name, "job": job_uid(job), "namespace": NAMESPACE, "request": request,
                  "status": STATUSES[state], "node": node, "pod_set": sub_group,
                  "priority": f.whole("priority", None, -MAX_PRIORITY, MAX_PRIORITY), "node_affinity": affinity,
                  "pod_affinity": pod_aff, "pod_anti_affinity": pod_anti, "gpu_groups": _scalars(f, "gpu_groups"),
                  "legacy_mig": f.flag("legacy_mig", False), "qos_class": base["qos_class"],
                  "numa_recorded": numa_placement(f), "resource_claims": claims}

        def make() -> Task:
            return Task(labels=dict(labels), **fields)

        return make


def job_uid(name: str) -> str:
    """The uid of the scenario job ``name``."""
    return f"{NAMESPACE}/{name}"


def _has_topology(jd: dict) -> bool:
    def walk(items):
        return any(i.get("topology_constraint") or walk(i.get("subgroups")) or walk(i.get("pod_sets"))
                   for i in items or [] if isinstance(i, dict))

    return walk(jd.get("subgroups")) or walk(jd.get("pod_sets"))


def _topology(f: Fields, key: str) -> tuple[str, str | None, str | None] | None:
    """The constraint of field ``key`` (``{topology, required_level, preferred_level}``) as
    ``(topology, required, preferred)``; none without a topology."""
    if not f.has(key):
        return None
    tc = f.entry(key)
    topology = tc.text("topology", None)
    if not topology:
        return None
    return topology, tc.text("required_level", None), tc.text("preferred_level", None)


def _constraint(read: tuple[str, str | None, str | None] | None) -> TopologyConstraint | None:
    """A fresh constraint of what :func:`_topology` read."""
    return TopologyConstraint(*read) if read is not None else None


def load_scenarios(path: str, data: Any = None) -> list[Scenario]:
    """Parse and check one scenario file (a YAML list of scenarios); ``data`` is its content when already read."""
    if data is None:
        data = read_yaml(path, ScenarioError, list, "a YAML list of scenarios")
    if not isinstance(data, list):
        raise ScenarioError(f"{path}: must be a YAML list of scenarios, not {describe(data)}")
    scenarios = []
    for i, entry in enumerate(data):
        name = _fields(entry, f"{path}: entry {i}").text("name")
        sc = Scenario(name, path, entry)
        f = _fields(entry, sc.where)
        f.sequence("actions")
        f.names("actions")
        f.text("mode", choices=("single_session", "simulation"))
        if not needs(entry):  # a scenario using unbuilt fields is reported as skipped, not read
            sc.check()
        scenarios.append(sc)
    return scenarios
