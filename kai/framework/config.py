"""The scheduler configuration in KAI's shape: an ``actions`` string and ``tiers`` of plugins.

```yaml
actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"
tiers:
  - plugins:
      - name: predicates
      - name: nodeplacement
        arguments: {gpu: binpack, cpu: binpack}
```

Plugins are called in the order they are listed (tier by tier). Also read:
``stalenessGracePeriodSeconds``, ``restrictSchedulingNodes``, ``fullHierarchyFairness``, ``usageDBConfig``
(historical queue usage for time-based fair share, KAI's shape; see :mod:`kai.framework.usage`) and
``scenarioSearchBudgets`` (the eviction actions' search budgets, see :mod:`kai.framework.scenariosearch`) and
``reservation`` (which waiting gangs hold nodes, see :mod:`kai.framework.reservation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, describe, read_yaml
from kai.framework.reservation import ReservationPolicy, parse_reservation_policy
from kai.framework.scenariosearch import SearchBudgets, parse_search_budgets
from kai.framework.usage import UsageDBConfig, parse_usage_db


@attrs.define(frozen=True)
class PluginSpec:
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.define(frozen=True)
class SchedulerConfig:
    actions: tuple[str, ...] = ("allocate",)
    plugins: tuple[PluginSpec, ...] = ()
    #: How long (seconds) a gang may stay below its minimum before its pods are evicted; negative: never.
    staleness_grace_period: float = 60.0
    #: Most victim jobs consolidation looks at for one job (KAI lets one more through); -1: no limit, 0: off.
    max_consolidation_preemptees: int = 16
    #: Victims that reclaim moves elsewhere (pipelines again) do not count as reclaimed resources.
    allow_consolidating_reclaim: bool = True
    #: Skip a job whose scheduling constraints equal those of a smaller job that failed in the action.
    use_scheduling_signatures: bool = True
    #: Where historical queue usage comes from (time-based fair share); None: no usage, KAI's default.
    usage_db: UsageDBConfig | None = None
    #: ``queueDepthPerAction``: (action, n) -- the action tries at most the n first jobs of each leaf queue.
    queue_depth_per_action: tuple[tuple[str, int], ...] = ()
    #: ``restrictSchedulingNodes`` (KAI's ``--restrict-node-scheduling``): only nodes labelled as GPU or CPU
    #: workers take part; GPU pods go to GPU workers, the others to CPU workers.
    restrict_node_scheduling: bool = False
    #: ``fullHierarchyFairness`` (KAI's ``--full-hierarchy-fairness``, on by default): fair share is divided down
    #: the whole queue tree; off, among the queues that have a parent only, as children of one unlimited parent
    #: (:func:`kai.framework.snapshot.project_level_queues`).
    full_hierarchy_fairness: bool = True
    #: ``scenarioSearchBudgets``: the time budgets of the eviction actions' victim search.
    scenario_search_budgets: SearchBudgets = SearchBudgets()
    #: ``reservation``: which waiting gangs hold nodes for themselves (:mod:`kai.framework.reservation`); off.
    reservation: ReservationPolicy = ReservationPolicy()

    def queue_depth(self, action: str) -> int | None:
        """How many jobs per leaf queue ``action`` tries in a cycle; None: all."""
        return dict(self.queue_depth_per_action).get(action)


#: KAI's default plugin list, in its order. :data:`DEFAULT_CONFIG` leaves out ``snapshot``, which serves every
#: object the scheduler reads on its metrics address: it is configured where wanted.
KAI_DEFAULT_PLUGINS = (
    "predicates", "proportion", "priority", "elastic", "kubeflow", "ray", "nodeavailability",
    "gpusharingorder", "gpupack", "resourcetype", "podaffinity", "subgrouporder", "taskorder", "nominatednode",
    "dynamicresources", "nodeplacement", "minruntime", "topology", "snapshot",
)
SHIPPED_DEFAULT_PLUGINS = (
    "predicates", "proportion", "priority", "elastic", "kubeflow", "ray", "nodeavailability",
    "gpusharingorder", "gpupack", "resourcetype", "podaffinity", "subgrouporder", "taskorder", "nominatednode",
    "dynamicresources", "nodeplacement", "minruntime", "topology",
)
#: KAI's default actions, in its order; the shipped defaults add ``runtimelimit``, which acts only on jobs that
#: declare a maximum runtime.
KAI_DEFAULT_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
DEFAULT_ACTIONS = (*KAI_DEFAULT_ACTIONS, "runtimelimit")
DEFAULT_CONFIG = SchedulerConfig(
    actions=DEFAULT_ACTIONS,
    plugins=tuple(
        PluginSpec(n, {"gpu": "binpack", "cpu": "binpack"} if n == "nodeplacement" else {})
        for n in SHIPPED_DEFAULT_PLUGINS
    ),
)


def parse_actions(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        names = [a.strip() for a in value.split(",")]
    elif isinstance(value, list) and all(isinstance(a, str) for a in value):
        names = [a.strip() for a in value]
    else:
        raise ConfigError(f"{where}: field 'actions' must be a comma-separated string or a list of names, "
                          f"not {describe(value)}")
    names = [n for n in names if n]
    if not names:
        raise ConfigError(f"{where}: field 'actions' names no action")
    return tuple(names)


def parse_plugin_list(items: Any, where: str) -> tuple[PluginSpec, ...]:
    if not isinstance(items, list):
        raise ConfigError(f"{where}: must be a list of plugins, not {describe(items)}")
    specs = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(f"{where}[{i}]: field 'name' is missing or not a string")
        args = item.get("arguments") or {}
        if not isinstance(args, dict):
            raise ConfigError(f"{where}[{i}] ({describe(item['name'])}): field 'arguments' must be a mapping, "
                              f"not {describe(args)}")
        specs.append(PluginSpec(item["name"], dict(args)))
    return tuple(specs)


#: The actions that take jobs from the queues in order (KAI's ``queueDepthPerAction`` keys).
QUEUE_DEPTH_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt")
#: Largest whole-number setting (jobs per queue, victims): more than any cluster holds.
MAX_SETTING = 2**31 - 1


def parse_queue_depths(data: Any, where: str) -> tuple[tuple[str, int], ...]:
    """``queueDepthPerAction``: action -> jobs tried per leaf queue (a whole number; -1: no limit)."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: field 'queueDepthPerAction' must map action names to numbers of jobs, "
                          f"not {describe(data)}")
    depths = []
    for action, depth in data.items():
        if action not in QUEUE_DEPTH_ACTIONS:
            raise ConfigError(f"{where}: queueDepthPerAction names action {describe(action)}; it applies to "
                              f"{', '.join(QUEUE_DEPTH_ACTIONS)}")
        if isinstance(depth, bool) or not isinstance(depth, int) or not -1 <= depth <= MAX_SETTING:
            raise ConfigError(f"{where}: queueDepthPerAction.{action} must be a whole number of jobs, -1 for no "
                              f"limit, not {describe(depth)}")
        if depth != -1:
            depths.append((action, depth))
    return tuple(depths)


def parse_config(data: Any, where: str = "config") -> SchedulerConfig:
    """Build a configuration from parsed YAML; missing parts take the defaults."""
    if data is None:
        return DEFAULT_CONFIG
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping with 'actions' and 'tiers', not {describe(data)}")
    fields = Fields(data, where)
    actions = parse_actions(data["actions"], where) if "actions" in data else DEFAULT_ACTIONS
    grace = fields.number("stalenessGracePeriodSeconds", DEFAULT_CONFIG.staleness_grace_period)
    preemptees = fields.whole("maxConsolidationPreemptees", DEFAULT_CONFIG.max_consolidation_preemptees,
                              minimum=-1, maximum=MAX_SETTING)
    flags = {field: fields.flag(key, getattr(DEFAULT_CONFIG, field))
             for key, field in (("allowConsolidatingReclaim", "allow_consolidating_reclaim"),
                                ("useSchedulingSignatures", "use_scheduling_signatures"),
                                ("restrictSchedulingNodes", "restrict_node_scheduling"),
                                ("fullHierarchyFairness", "full_hierarchy_fairness"))}
    depths = parse_queue_depths(data.get("queueDepthPerAction"), where)
    usage_db = None
    if data.get("usageDBConfig") is not None:
        usage_db = parse_usage_db(data["usageDBConfig"], where)
    budgets = parse_search_budgets(data.get("scenarioSearchBudgets"), where)
    reservation = parse_reservation_policy(data.get("reservation"), where)
    plugins = DEFAULT_CONFIG.plugins if "tiers" not in data else _parse_tiers(data["tiers"], where)
    return SchedulerConfig(actions, plugins, staleness_grace_period=float(grace),
                           max_consolidation_preemptees=preemptees, usage_db=usage_db, queue_depth_per_action=depths,
                           scenario_search_budgets=budgets, reservation=reservation, **flags)


def _parse_tiers(tiers: Any, where: str) -> tuple[PluginSpec, ...]:
    if not isinstance(tiers, list):
        raise ConfigError(f"{where}: field 'tiers' must be a list, not {describe(tiers)}")
    plugins: list[PluginSpec] = []
    for t, tier in enumerate(tiers):
        if not isinstance(tier, dict) or "plugins" not in tier:
            raise ConfigError(f"{where}: tiers[{t}] must be a mapping with field 'plugins'")
        plugins.extend(parse_plugin_list(tier["plugins"], f"{where}: tiers[{t}].plugins"))
    return tuple(plugins)


def load_config(path: str | Path) -> SchedulerConfig:
    """Read a configuration file (YAML; empty: the defaults)."""
    return parse_config(read_yaml(path, top=(dict, type(None)), what="a mapping with 'actions' and 'tiers'"),
                        str(path))
