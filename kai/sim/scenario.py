"""Load KAI conformance scenarios (the neutral scenario format) into the kernel's domain objects.

A :class:`Scenario` keeps the facts as parsed YAML; :meth:`Scenario.build` turns the current facts
into a fresh Snapshot, so a multi-round simulation can feed decisions back into the facts and
build again. Malformed input raises :class:`ScenarioError` naming the file, the entry and the field.
"""

from __future__ import annotations

from typing import Any

import attrs

from kai.api import (
    UNLIMITED,
    Job,
    LabelRequirement,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodSet,
    Queue,
    QuotaSpec,
    ResourceRequest,
    Resources,
    SubGroup,
    Task,
    TaskStatus,
    Topology,
    TopologyConstraint,
)
from kai.framework import ConfigError, PluginSpec, SchedulerConfig, build_snapshot
from kai.framework.config import DEFAULT_CONFIG, KAI_DEFAULT_PLUGINS, parse_plugin_list, read_yaml

NOW = 1_800_000_000.0
#: KAI's test harness creates its pod groups and pods without a namespace (its messages read ``</name>``).
NAMESPACE = ""
DEFAULT_NODE_CPU = 20_000_000.0
DEFAULT_NODE_MEMORY = 20_000_000_000.0
DEFAULT_GPU_MEMORY_MIB = 100
DEFAULT_TASK_CPU = 1000.0
DEFAULT_TASK_MEMORY = 1_000_000_000.0
STATUSES = {s.value: s for s in TaskStatus}
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


class ScenarioError(ConfigError):
    """A scenario file is malformed."""


def _get(d: dict, key: str, where: str, types, default=attrs.NOTHING):
    if key not in d or d[key] is None:
        if default is attrs.NOTHING:
            raise ScenarioError(f"{where}: field '{key}' is missing")
        return default
    value = d[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ScenarioError(f"{where}: field '{key}' must be {_tname(types)}, not {value!r}")
    if not isinstance(value, types):
        raise ScenarioError(f"{where}: field '{key}' must be {_tname(types)}, not {value!r}")
    return value


def _tname(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    names = {int: "a number", float: "a number", str: "a string", bool: "true or false", list: "a list",
             dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


NUM = (int, float)


@attrs.define
class Scenario:
    """One scenario of a conformance file."""

    name: str
    file: str
    data: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.file}: scenario {self.name!r}"

    @property
    def mode(self) -> str:
        return self.data["mode"]

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(self.data["actions"])

    def config(self) -> SchedulerConfig:
        """The scheduler configuration of the scenario (``predicates: false`` drops that plugin)."""
        cfg = self.data.get("config") or {}
        plugins = cfg.get("plugins", "default")
        if plugins == "default":
            specs = list(DEFAULT_CONFIG.plugins)
        else:
            specs = list(parse_plugin_list(plugins, f"{self.where}: config.plugins"))
        if not cfg.get("predicates", True):
            specs = [s for s in specs if s.name != "predicates"]
        grace = float(cfg.get("staleness_grace_period_seconds", DEFAULT_CONFIG.staleness_grace_period))
        return SchedulerConfig(
            self.actions, tuple(PluginSpec(s.name, s.arguments) for s in specs), grace,
            max_consolidation_preemptees=int(cfg.get("max_consolidation_preemptees",
                                                     DEFAULT_CONFIG.max_consolidation_preemptees)),
            allow_consolidating_reclaim=bool(cfg.get("allow_consolidating_reclaim",
                                                     DEFAULT_CONFIG.allow_consolidating_reclaim)))

    def unbuilt_plugins(self, installed) -> list[str]:
        """Plugins the scenario configures that are not installed (KAI's defaults not shipped yet count
        only when listed explicitly)."""
        plugins = (self.data.get("config") or {}).get("plugins", "default")
        if plugins == "default":
            return []
        names = [p if isinstance(p, str) else p.get("name") for p in plugins]
        return [n for n in names if n not in installed and n in KAI_DEFAULT_PLUGINS + ("gpuspread", "podaffinity")]

    def content_features(self) -> set[str]:
        """Features the scenario's content uses, computed from the facts (not from its tags)."""
        found: set[str] = set()
        for node in (self.data.get("nodes") or {}).values():
            if node.get("mig_strategy") or node.get("mig_instances"):
                found.add("mig")
        if self.data.get("topologies"):
            found.add("topology")
        for job in self.data.get("jobs") or []:
            g = job.get("gpus_per_task") or 0
            if 0 < g < 1:
                found.add("fractional_gpu")
            if job.get("gpu_memory_mib_per_task"):
                found.add("gpu_memory")
            if job.get("topology_constraint") or _has_topology(job):
                found.add("topology")
            if job.get("subgroups"):
                found.add("subgroups")
            for t in job.get("tasks") or []:
                if t.get("mig") or t.get("legacy_mig"):
                    found.add("mig")
                if t.get("gpu_groups"):
                    found.add("fractional_gpu")
        return found

    # --- building ---------------------------------------------------------------------------------

    def build(self, now: float = NOW):
        """A fresh Snapshot of the current facts."""
        d = self.data
        nodes_data = _get(d, "nodes", self.where, dict, {})
        nodes = [self._node(name, nd or {}) for name, nd in nodes_data.items()]
        queues = [self._queue(i, q) for i, q in enumerate(_get(d, "queues", self.where, list, []))]
        gpu_memory = {n.name: n.gpu_memory_mib for n in nodes}
        jobs = [self._job(j, now, gpu_memory) for j in _get(d, "jobs", self.where, list, [])]
        topologies = [self._topology_def(i, t) for i, t in enumerate(_get(d, "topologies", self.where, list, []))]
        return build_snapshot(nodes, queues, jobs, now, topologies)

    def _topology_def(self, i: int, td: dict) -> Topology:
        where = f"{self.where}: topologies[{i}]"
        if not isinstance(td, dict):
            raise ScenarioError(f"{where}: must be a mapping")
        levels = _get(td, "levels", where, list)
        if not all(isinstance(level, str) for level in levels):
            raise ScenarioError(f"{where}: field 'levels' must list node-label keys")
        return Topology(_get(td, "name", where, str), tuple(levels))

    def _node(self, name: str, nd: dict) -> Node:
        where = f"{self.where}: nodes.{name}"
        if not isinstance(nd, dict):
            raise ScenarioError(f"{where}: must be a mapping")
        gpus = _get(nd, "gpus", where, int, 0)
        strategy = nd.get("mig_strategy")
        gpu_mem = int(_get(nd, "gpu_memory_mib", where, NUM, DEFAULT_GPU_MEMORY_MIB))
        scalars = {p: float(c) for p, c in (_get(nd, "mig_instances", where, dict, {})).items() if c}
        labels = {
            "kai.scheduler/type": name,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": str(gpu_mem),
            "node-role.kubernetes.io/mig-enabled": "true" if strategy else "false",
            "nvidia.com/mig.strategy": strategy or "",
        }
        labels.update({str(k): str(v) for k, v in (_get(nd, "labels", where, dict, {})).items()})
        labels["nvidia.com/gpu.memory"] = str(gpu_mem)
        allocatable = Resources(
            float(_get(nd, "cpu_millis", where, NUM, DEFAULT_NODE_CPU)),
            float(_get(nd, "memory_bytes", where, NUM, DEFAULT_NODE_MEMORY)),
            0.0 if strategy == "mixed" else float(gpus),
            scalars,
        )
        return Node(name, allocatable, labels, max_pods=int(_get(nd, "max_pods", where, int, 110)),
                    gpu_memory_mib=gpu_mem)

    def _queue(self, i: int, q: dict) -> Queue:
        where = f"{self.where}: queues[{i}]"
        if not isinstance(q, dict):
            raise ScenarioError(f"{where}: must be a mapping")
        name = _get(q, "name", where, str)
        where = f"{self.where}: queue {name!r}"

        def f(key, default):
            return float(_get(q, key, where, NUM, default))

        def seconds(key):  # optional min runtimes (minruntime plugin)
            value = _get(q, key, where, NUM, None)
            return None if value is None else float(value)

        return Queue(
            name=name,
            parent=_get(q, "parent", where, str, None),
            priority=int(_get(q, "priority", where, int, 100)),
            gpu=QuotaSpec(f("deserved_gpus", 0.0), f("max_allowed_gpus", UNLIMITED), f("over_quota_weight", 0.0)),
            cpu=QuotaSpec(f("deserved_cpu_millis", UNLIMITED), f("max_allowed_cpu_millis", UNLIMITED), 1.0),
            memory=QuotaSpec(f("deserved_memory_bytes", UNLIMITED), f("max_allowed_memory_bytes", UNLIMITED), 1.0),
            creation=float(i),
            preempt_min_runtime=seconds("preempt_min_runtime_seconds"),
            reclaim_min_runtime=seconds("reclaim_min_runtime_seconds"),
        )

    def _job(self, jd: dict, now: float, gpu_memory: dict[str, int]) -> Job:
        if not isinstance(jd, dict):
            raise ScenarioError(f"{self.where}: jobs: every entry must be a mapping")
        name = _get(jd, "name", f"{self.where}: jobs", str)
        where = f"{self.where}: job {name!r}"
        tasks_data = _get(jd, "tasks", where, list)
        job = Job(
            name=name,
            namespace=NAMESPACE,
            queue=_get(jd, "queue", where, str),
            priority=int(_get(jd, "priority", where, int, 0)),
            creation=now - 60.0 * float(_get(jd, "created_minutes_ago", where, NUM, 0)),
            topology=_topology(jd.get("topology_constraint")),
        )
        job.preemptible = bool(_get(jd, "preemptible", where, bool, job.priority < 100))
        job.pod_sets.clear()
        self._pod_sets(job, jd, where, len(tasks_data))
        base = self._request(jd, where)
        for i, td in enumerate(tasks_data):
            job.add_task(self._task(job, i, td, jd, base, where))
        if any(t.status in (TaskStatus.ALLOCATED, TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RUNNING)
               for t in job.tasks.values()):
            job.last_start = now - 60.0
        stale = jd.get("stale_for_seconds")
        if stale is not None:
            job.stale_since = now - float(stale)
        return job

    def _pod_sets(self, job: Job, jd: dict, where: str, n_tasks: int) -> None:
        def add_sets(items, parent):
            for ps in items or []:
                name = _get(ps, "name", f"{where}: pod_sets", str)
                job.pod_sets[name] = PodSet(name, int(_get(ps, "min_available", f"{where}: pod set {name!r}", int)),
                                            parent, _topology(ps.get("topology_constraint")))

        def add_groups(items, parent):
            for sg in items or []:
                name = _get(sg, "name", f"{where}: subgroups", str)
                job.subgroups[name] = SubGroup(name, parent, _topology(sg.get("topology_constraint")))
                add_groups(sg.get("subgroups"), name)
                add_sets(sg.get("pod_sets"), name)

        add_groups(jd.get("subgroups"), None)
        add_sets(jd.get("pod_sets"), None)
        if not job.pod_sets or "min_available" in jd:
            job.pod_sets["default"] = PodSet("default", int(_get(jd, "min_available", where, int, n_tasks)))

    def _request(self, jd: dict, where: str) -> dict:
        if jd.get("best_effort"):
            return {"cpu": 0.0, "memory": 0.0, "gpus": 0, "fraction": 0.0, "gpu_mem": 0}
        g = float(_get(jd, "gpus_per_task", where, NUM, 0))
        return {
            "cpu": float(_get(jd, "cpu_millis_per_task", where, NUM, DEFAULT_TASK_CPU)),
            "memory": float(_get(jd, "memory_bytes_per_task", where, NUM, DEFAULT_TASK_MEMORY)),
            "gpus": int(g) if g >= 1 else 0,
            "fraction": g if 0 < g < 1 else 0.0,
            "gpu_mem": int(_get(jd, "gpu_memory_mib_per_task", where, NUM, 0)),
        }

    def _task(self, job: Job, i: int, td: dict, jd: dict, base: dict, where: str) -> Task:
        if not isinstance(td, dict):
            raise ScenarioError(f"{where}: tasks[{i}] must be a mapping")
        name = td.get("name") or f"{job.name}-{i}"
        where = f"{where}: task {name!r}"
        state = _get(td, "state", where, str)
        if state not in STATUSES:
            raise ScenarioError(f"{where}: field 'state' must be one of {', '.join(STATUSES)}, not {state!r}")
        gpus = base["gpus"]
        if "gpus" in td and not base["fraction"]:
            gpus = int(_get(td, "gpus", where, NUM))
        request = ResourceRequest(
            cpu=base["cpu"], memory=base["memory"], gpus=gpus, gpu_fraction=base["fraction"],
            gpu_memory_mib=0 if base["fraction"] else base["gpu_mem"],
            mig={str(k): int(v) for k, v in (_get(td, "mig", where, dict, {})).items()},
        )
        labels = {"job-name": name}
        labels.update({str(k): str(v) for k, v in (_get(td, "pod_labels", where, dict, {})).items()})
        selector = LabelSelector(tuple(sorted((_get(td, "pod_labels", where, dict, {})).items())))
        affinity = ()
        if td.get("node_affinity"):
            values = tuple(str(v) for v in _get(td, "node_affinity", where, list))
            affinity = ((LabelRequirement("kai.scheduler/type", "In", values),),)
        pod_aff = tuple(PodAffinityTerm(selector, k) for k in [td.get("pod_affinity_topology_key")] if k)
        pod_anti = tuple(PodAffinityTerm(selector, k) for k in [td.get("pod_anti_affinity_topology_key")] if k)
        sub_group = td.get("sub_group") or "default"
        if sub_group not in job.pod_sets:
            raise ScenarioError(f"{where}: field 'sub_group' names unknown pod set {sub_group!r}")
        return Task(
            name=name, job=job.uid, namespace=NAMESPACE, request=request, status=STATUSES[state],
            node=td.get("node"),
            pod_set=sub_group, priority=td.get("priority"), labels=labels, node_affinity=affinity,
            pod_affinity=pod_aff, pod_anti_affinity=pod_anti,
            gpu_groups=tuple(str(g) for g in td.get("gpu_groups") or ()),
            legacy_mig=bool(td.get("legacy_mig")),
        )


def job_uid(name: str) -> str:
    """The uid of the scenario job ``name``."""
    return f"{NAMESPACE}/{name}"


def _has_topology(jd: dict) -> bool:
    def walk(items):
        return any(i.get("topology_constraint") or walk(i.get("subgroups")) or walk(i.get("pod_sets"))
                   for i in items or [] if isinstance(i, dict))

    return walk(jd.get("subgroups")) or walk(jd.get("pod_sets"))


def _topology(tc) -> TopologyConstraint | None:
    if not tc or not tc.get("topology"):
        return None
    return TopologyConstraint(tc["topology"], tc.get("required_level"), tc.get("preferred_level"))


def load_scenarios(path: str, data: Any = None) -> list[Scenario]:
    """Parse one scenario file (a YAML list of scenarios); ``data`` is its content when already read."""
    if data is None:
        data = read_yaml(path, ScenarioError)
    if not isinstance(data, list):
        raise ScenarioError(f"{path}: must be a YAML list of scenarios")
    scenarios = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ScenarioError(f"{path}: entry {i} must be a mapping")
        name = entry.get("name")
        if not isinstance(name, str):
            raise ScenarioError(f"{path}: entry {i}: field 'name' is missing or not a string")
        sc = Scenario(name, path, entry)
        actions = _get(entry, "actions", sc.where, list)
        for a in actions:
            if not isinstance(a, str):
                raise ScenarioError(f"{sc.where}: field 'actions' must list action names")
        mode = _get(entry, "mode", sc.where, str)
        if mode not in ("single_session", "simulation"):
            raise ScenarioError(f"{sc.where}: field 'mode' must be single_session or simulation, not {mode!r}")
        scenarios.append(sc)
    return scenarios
