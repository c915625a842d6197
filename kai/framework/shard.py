"""KAI's ``SchedulingShard`` (and the ``Config`` it refers to) applied to a scheduler configuration.

KAI's operator renders a shard into the scheduler's config map and flags
(``pkg/operator/operands/scheduler``, ``pkg/apis/kai/v1/schedulingshard_types.go``). Here the shard is
laid over a base configuration (the ``--config`` file, else the built-in default): every field the shard
sets wins, what it leaves unset stays as the base has it.

* ``placementStrategy`` (``gpu``, ``cpu``: binpack or spread; unset ones are binpack): ``nodeplacement``'s
  arguments; GPU binpack turns ``gpupack`` and ``gpusharingorder`` on and ``gpuspread`` off, GPU spread the
  reverse; spread of either turns the ``consolidation`` action off.
* ``kValue``: ``proportion``'s ``kValue``; ``minRuntime``: ``minruntime``'s ``defaultPreemptMinRuntime`` and
  ``defaultReclaimMinRuntime``. A field that configures a plugin enables it.
* ``plugins`` / ``actions``: per name ``enabled``, ``priority`` and (plugins) ``arguments``, which replace
  the arguments. Plugins and actions run by priority, highest first (KAI's defaults for its own names, 0
  for others), ties in base order.
* ``queueDepthPerAction`` (only for enabled actions), ``usageDBConfig`` (a Prometheus client without a
  connection takes the Config's ``prometheus``: the in-cluster one when enabled, else
  ``externalPrometheusUrl``) and ``scenarioSearchBudgets`` (the whole block; its unset fields take KAI's
  defaults) replace the base's.
* ``args``: the KAI scheduler flags in :data:`ARGS` and this scheduler's ``bind-mode``; other flags,
  ``goMemLimit`` and ``goMemLimitRatio`` are reported as ignored. ``partitionLabelValue`` is the shard's
  partition (:mod:`kai.scheduler.shards`).
* KAI's plugins this scheduler does not run as plugins (:func:`not_run`) are left out of the plugins and,
  when enabled, reported as ignored (``plugins.NAME``).

Errors are :class:`ConfigError` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from kai.common.durations import parse_duration
from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, describe
from kai.framework.config import MAX_SETTING, PluginSpec, SchedulerConfig, parse_queue_depths
from kai.framework.scenariosearch import parse_search_budgets
from kai.framework.usage import parse_usage_db

PLACEMENTS = ("binpack", "spread")
#: KAI's default plugin priorities (higher runs first); a plugin not named here has 0.
PLUGIN_PRIORITIES = {
    "predicates": 1900, "proportion": 1800, "priority": 1700, "nodeavailability": 1600, "resourcetype": 1500,
    "podaffinity": 1400, "elastic": 1300, "kubeflow": 1200, "ray": 1100, "subgrouporder": 1000, "taskorder": 900,
    "nominatednode": 800, "dynamicresources": 700, "minruntime": 600, "topology": 500, "snapshot": 400,
    "sg-nodelocalgreedy": 360, "sg-multinodegang": 350, "gpupack": 300, "gpuspread": 300, "nodeplacement": 200,
    "gpusharingorder": 100,
}
ACTION_PRIORITIES = {"allocate": 500, "consolidation": 400, "reclaim": 300, "preempt": 200, "stalegangeviction": 100}
#: KAI scheduler flags a shard's ``args`` may set here, and what they are.
ARGS = {
    "max-consolidation-preemptees": "a whole number",
    "use-scheduling-signatures": "true or false",
    "allow-consolidating-reclaim": "true or false",
    "restrict-node-scheduling": "true or false",
    "full-hierarchy-fairness": "true or false",
    "default-staleness-grace-period": "a duration",
    "schedule-period": "a positive duration",
    "bind-mode": "direct or bindRequest",
}
#: The values of ``args.bind-mode``: how the scheduler has placed pods bound (:mod:`kai.scheduler.bindmode`).
BIND_MODES = ("direct", "bindRequest")
#: The true-or-false flags and the configuration field each sets.
FLAG_ARGS = {"use-scheduling-signatures": "use_scheduling_signatures",
             "allow-consolidating-reclaim": "allow_consolidating_reclaim",
             "restrict-node-scheduling": "restrict_node_scheduling",
             "full-hierarchy-fairness": "full_hierarchy_fairness"}
#: Shard fields this scheduler does not act on.
IGNORED_FIELDS = ("goMemLimit", "goMemLimitRatio")
#: KAI plugins with no plugin here: ``reflectjoborder``, which serves the session's job order over KAI's HTTP
#: endpoint (``/get-job-order``), and KAI's scenario generators ``sg-*`` (:data:`SCENARIO_GENERATOR_PREFIX`),
#: which the job solver here always runs.
NOT_RUN_PLUGINS = ("reflectjoborder",)
SCENARIO_GENERATOR_PREFIX = "sg-"
#: KAI's in-cluster usage Prometheus, in the Config's namespace.
IN_CLUSTER_PROMETHEUS = "http://usage-prometheus.{namespace}.svc.cluster.local:9090"
DEFAULT_NAMESPACE = "kai-scheduler"


@attrs.define(frozen=True)
class ShardSettings:
    """A shard applied: the scheduler configuration, ``--schedule-period`` and ``--bind-mode`` if its args set
    them, and the fields and args it sets that are not acted on."""

    config: SchedulerConfig
    schedule_period: float | None = None
    ignored: tuple[str, ...] = ()
    bind_mode: str | None = None


@attrs.define
class _Entry:
    enabled: bool
    priority: int
    position: int
    arguments: dict[str, Any] = attrs.field(factory=dict)


def apply_shard(base: SchedulerConfig, shard: dict[str, Any] | None,
                kai_config: dict[str, Any] | None = None) -> ShardSettings:
    """``base`` with the SchedulingShard object ``shard`` laid over it (None: ``base`` as it is)."""
    if shard is None:
        return ShardSettings(base)
    where = f"SchedulingShard {(shard.get('metadata') or {}).get('name', '')}: spec"
    spec = Fields(shard.get("spec") or {}, where)
    plugins = {p.name: _Entry(True, PLUGIN_PRIORITIES.get(p.name, 0), i, dict(p.arguments))
               for i, p in enumerate(base.plugins)}
    actions = {a: _Entry(True, ACTION_PRIORITIES.get(a, 0), i) for i, a in enumerate(base.actions)}

    def plugin(name: str, enabled: bool = True) -> _Entry:
        entry = plugins.setdefault(name, _Entry(enabled, PLUGIN_PRIORITIES.get(name, 0), len(plugins)))
        entry.enabled = enabled
        return entry

    if spec.has("placementStrategy"):
        placement = Fields(spec.get("placementStrategy", dict), f"{where}.placementStrategy")
        gpu, cpu = (placement.text(key, "binpack", PLACEMENTS) for key in ("gpu", "cpu"))
        plugin("nodeplacement").arguments.update(gpu=gpu, cpu=cpu)
        for name in ("gpupack", "gpusharingorder"):
            if gpu == "binpack" or name in plugins:
                plugin(name, gpu == "binpack")
        if gpu == "spread" or "gpuspread" in plugins:
            plugin("gpuspread", gpu == "spread")
        if "spread" in (gpu, cpu) and "consolidation" in actions:
            actions["consolidation"].enabled = False
    if spec.has("kValue"):
        plugin("proportion").arguments["kValue"] = float(spec.number("kValue", minimum=0.0))
    if spec.has("minRuntime"):
        min_runtime = Fields(spec.get("minRuntime", dict), f"{where}.minRuntime")
        for key, argument in (("preemptMinRuntime", "defaultPreemptMinRuntime"),
                              ("reclaimMinRuntime", "defaultReclaimMinRuntime")):
            if min_runtime.has(key):
                value = min_runtime.text(key)
                _duration(value, partial(min_runtime.fail, key), minimum=0.0)
                plugin("minruntime").arguments[argument] = value
    _overrides(spec, "plugins", plugins, PLUGIN_PRIORITIES, ("enabled", "priority", "arguments"))
    _overrides(spec, "actions", actions, ACTION_PRIORITIES, ("enabled", "priority"))
    skipped = tuple(f"plugins.{n}" for n in _ordered(plugins) if not_run(n))
    for name in [n for n in plugins if not_run(n)]:
        del plugins[name]
    action_names = _ordered(actions)
    if not action_names:
        raise ConfigError(f"{where}: field 'actions' disables every action")
    config = attrs.evolve(base, actions=action_names,
                          plugins=tuple(PluginSpec(n, plugins[n].arguments) for n in _ordered(plugins)))
    if spec.has("queueDepthPerAction"):
        depths = parse_queue_depths(spec.get("queueDepthPerAction", dict), where)
        off = [action for action in spec.mapping("queueDepthPerAction") if action not in action_names]
        if off:
            raise spec.fail("queueDepthPerAction", f"names action(s) {', '.join(off)}, which are not enabled; "
                                                   f"the actions are {', '.join(action_names)}")
        config = attrs.evolve(config, queue_depth_per_action=depths)
    if spec.has("usageDBConfig"):
        usage = _with_prometheus(spec.get("usageDBConfig", dict), kai_config, where)
        config = attrs.evolve(config, usage_db=parse_usage_db(usage, where))
    if spec.has("scenarioSearchBudgets"):
        budgets = parse_search_budgets(spec.get("scenarioSearchBudgets", dict), where)
        config = attrs.evolve(config, scenario_search_budgets=budgets)
    config, period, bind_mode, ignored_args = _args(spec, config, where)
    ignored = tuple(f for f in IGNORED_FIELDS if spec.has(f) and spec.data[f] != "") + skipped + ignored_args
    return ShardSettings(config, period, ignored, bind_mode)


def not_run(plugin: str) -> bool:
    """Whether ``plugin`` is a KAI plugin that has no plugin here."""
    return plugin in NOT_RUN_PLUGINS or plugin.startswith(SCENARIO_GENERATOR_PREFIX)


def _overrides(spec: Fields, key: str, entries: dict[str, _Entry], priorities: dict[str, int],
               known: tuple[str, ...]) -> None:
    for name, override in spec.mapping(key).items():
        fields = Fields(override or {}, f"{spec.where}.{key}.{name}", known)
        entry = entries.setdefault(name, _Entry(True, priorities.get(name, 0), len(entries)))
        entry.enabled = fields.flag("enabled", entry.enabled)
        entry.priority = fields.whole("priority", entry.priority, minimum=-MAX_SETTING, maximum=MAX_SETTING)
        if fields.has("arguments"):
            arguments = fields.mapping("arguments")
            bad = [k for k, v in arguments.items() if not isinstance(v, (str, int, float, bool))]
            if bad:
                raise fields.fail("arguments", f"must map names to values; {describe(bad[0])} is not a value")
            entry.arguments = dict(arguments)


def _ordered(entries: dict[str, _Entry]) -> tuple[str, ...]:
    """The enabled names, highest priority first, ties in base order."""
    return tuple(sorted((n for n, e in entries.items() if e.enabled),
                        key=lambda n: (-entries[n].priority, entries[n].position)))


def _with_prometheus(usage: dict[str, Any], kai_config: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """KAI's operator: a Prometheus client without a connection uses the Config's Prometheus."""
    if usage.get("clientType") != "prometheus" or usage.get("connectionString") or usage.get("connectionStringEnvVar"):
        return usage
    spec = (kai_config or {}).get("spec") or {}
    prometheus = spec.get("prometheus") or {}
    if prometheus.get("enabled") is True:
        url = IN_CLUSTER_PROMETHEUS.format(namespace=spec.get("namespace") or DEFAULT_NAMESPACE)
    elif isinstance(prometheus.get("externalPrometheusUrl"), str) and prometheus["externalPrometheusUrl"]:
        url = prometheus["externalPrometheusUrl"]
    else:
        raise ConfigError(f"{where}.usageDBConfig: a prometheus client without 'connectionString' needs the "
                          "Config's prometheus.enabled or prometheus.externalPrometheusUrl")
    return {**usage, "connectionString": url}


def _args(spec: Fields, config: SchedulerConfig, where: str
          ) -> tuple[SchedulerConfig, float | None, str | None, tuple[str, ...]]:
    """The honoured scheduler flags of ``args`` applied, the period and bind mode they set; the ``args.NAME`` of
    the others."""
    args = Fields(spec.mapping("args"), f"{where}.args")
    period = bind_mode = None
    for name in (n for n in args.data if n in ARGS):
        value = args.text(name)
        invalid = args.fail(name, f"must be {ARGS[name]}, not {describe(value)}")
        if name == "max-consolidation-preemptees":
            number = int(value.strip()) if value.strip().lstrip("-").isdigit() else None
            if number is None or not -1 <= number <= MAX_SETTING:
                raise invalid
            config = attrs.evolve(config, max_consolidation_preemptees=number)
        elif name in FLAG_ARGS:
            flag = _go_bool(value)
            if flag is None:
                raise invalid
            changes: dict[str, Any] = {FLAG_ARGS[name]: flag}
            config = attrs.evolve(config, **changes)
        elif name == "default-staleness-grace-period":
            config = attrs.evolve(config, staleness_grace_period=_duration(value, partial(args.fail, name)))
        elif name == "bind-mode":
            if value not in BIND_MODES:
                raise invalid
            bind_mode = value
        else:
            period = _duration(value, partial(args.fail, name))
            if period <= 0:
                raise invalid
    return config, period, bind_mode, tuple(f"args.{name}" for name in args.data if name not in ARGS)


def _duration(value: str, fail: Callable[[str], ConfigError], minimum: float | None = None) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise fail(f"must be a duration (like 30s, 5m), not {describe(value)}") from None
    if minimum is not None and seconds < minimum:
        raise fail(f"must not be negative, not {describe(value)}")
    return seconds


def _go_bool(value: str) -> bool | None:
    """Go's ``strconv.ParseBool``; None for anything else."""
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None
