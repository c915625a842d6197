"""KAI's cluster snapshots (its ``snapshot`` plugin's ``GET /get-snapshot``), read and written.

A snapshot is a zip holding ``snapshot.json``::

    {"config": {"actions": "allocate, ...", "tiers": [{"plugins": [{"name": ..., "arguments": {...}}]}], ...},
     "schedulerParams": {"schedulerName": ..., "maxNumberConsolidationPreemptees": ..., ...},
     "rawObjects": {"pods": [...], "nodes": [...], "queues": [...], "podGroups": [...], "bindRequests": [...], ...},
     "discovery": {"serverVersion": {...}, "resources": [...]}}

:func:`read_snapshot` takes the zip or the bare ``snapshot.json``; :func:`snapshot_zip` writes one.
:func:`load_cache` fills a :class:`~kai.scheduler.cache.ClusterCache` with the raw objects, so a snapshot's
cycle is built by the very code of the live scheduler. :func:`scheduler_config` maps KAI's configuration and
parameters to the project's (a :class:`ConfigError` names anything that cannot be mapped); :func:`kai_config`
and :func:`scheduler_params` are the reverse.

The parameters follow Go's JSON: a field left out is Go's zero value (``false``, ``0``), durations are
nanoseconds; KAI's snapshot plugins leave out zero values, so a snapshot without ``schedulerParams`` at all
takes the project's defaults instead.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kai.api import names
from kai.common.errors import ConfigError
from kai.common.yamlfile import describe
from kai.framework import DEFAULT_CONFIG, SchedulerConfig
from kai.framework.config import parse_config
from kai.framework.shard import not_run
from kai.kube.client import ApiError, Kube
from kai.scheduler.cache import OPTIONAL, PATHS, ClusterCache
from kai.scheduler.convert import STUCK_IN_RELEASING_THRESHOLD
from kai.scheduler.partition import EVERYTHING, Partition

if TYPE_CHECKING:
    from kai.kube.server import Route
    from kai.scheduler.loop import Scheduler

#: Where a scheduler with the ``snapshot`` plugin serves its snapshot (KAI's path).
ROUTE = "/get-snapshot"
#: The entry of the zip.
SNAPSHOT_FILE = "snapshot.json"
#: ``rawObjects`` fields and the cache's informer of each kind, in KAI's order.
RAW_OBJECTS = {
    "pods": "pods", "nodes": "nodes", "queues": "queues", "podGroups": "podgroups", "bindRequests": "bindrequests",
    "priorityClasses": "priorityclasses", "configMaps": "configmaps", "persistentVolumes": "persistentvolumes",
    "persistentVolumeClaims": "persistentvolumeclaims", "csiStorageCapacities": "csistoragecapacities",
    "storageClasses": "storageclasses", "csiDrivers": "csidrivers", "resourceClaims": "resourceclaims",
    "resourceSlices": "resourceslices", "deviceClasses": "deviceclasses", "topologies": "topologies",
    "nodeResourceTopologies": "noderesourcetopologies",
}
#: The ``rawObjects`` KAI's plugin lists of its node pool only (by the pool's label selector), the others whole.
POOL_FIELDS = ("nodes", "queues", "podGroups")
#: KAI's plugin options that switch one of a plugin's functions off; the plugins here have no such switch.
DISABLE_OPTIONS = ("disableJobOrder", "disableTaskOrder", "disablePreemptable", "disableReclaimable",
                   "disableQueueOrder", "disablePredicate", "disableNodeOrder")
#: ``schedulerParams`` that change no decision here (status writers, logging, the period, CSI scheduling on).
PARAMS_NOT_DECIDING = ("numOfStatusRecordingWorkers", "schedulePeriod", "detailedFitErrors",
                       "updatePodEvictionCondition", "scheduleCSIStorage", "queueLabelKey")
NANOSECONDS = 1e9


@attrs.define
class KaiSnapshot:
    """A snapshot as read: KAI's configuration and parameters (None when absent) and the raw objects by
    ``rawObjects`` field."""

    config: dict[str, Any] | None
    params: dict[str, Any] | None
    objects: dict[str, list[dict[str, Any]]]
    discovery: dict[str, Any] | None = None


@attrs.define(frozen=True)
class Mapped:
    """A snapshot's settings here: the configuration, the cache's settings, and what was left out."""

    config: SchedulerConfig
    scheduler_name: str
    stuck_after: float
    #: KAI plugins and parameters that take no part here, named as in the snapshot.
    ignored: tuple[str, ...] = ()
    #: The node pool the snapshot's scheduler served (``partitionParams``; :mod:`kai.scheduler.partition`).
    partition: Partition = EVERYTHING


def read_snapshot(path: str | Path) -> KaiSnapshot:
    """The snapshot in the file at ``path``: the zip KAI serves or its ``snapshot.json``."""
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if SNAPSHOT_FILE not in archive.namelist():
                raise ConfigError(f"{where}: the zip holds no {SNAPSHOT_FILE}")
            data = archive.read(SNAPSHOT_FILE)
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"{where}: not a KAI snapshot (a zip or JSON): {exc}") from None
    return parse_snapshot(document, where)


def parse_snapshot(document: Any, where: str = "snapshot") -> KaiSnapshot:
    if not isinstance(document, dict) or not isinstance(document.get("rawObjects"), dict):
        raise ConfigError(f"{where}: a KAI snapshot is a mapping with 'rawObjects', not {describe(document)}")
    raw = document["rawObjects"]
    unknown = sorted(set(raw) - RAW_OBJECTS.keys())
    if unknown:
        raise ConfigError(f"{where}: rawObjects has unknown field(s) {', '.join(unknown)}")
    objects: dict[str, list[dict[str, Any]]] = {}
    for field in RAW_OBJECTS:
        items = raw.get(field) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ConfigError(f"{where}: rawObjects.{field} must be a list of objects")
        objects[field] = items
    for key in ("config", "schedulerParams", "discovery"):
        if document.get(key) is not None and not isinstance(document[key], dict):
            raise ConfigError(f"{where}: field '{key}' must be a mapping, not {describe(document[key])}")
    return KaiSnapshot(document.get("config"), document.get("schedulerParams"), objects, document.get("discovery"))


def snapshot_document(snapshot: KaiSnapshot) -> dict[str, Any]:
    """``snapshot.json``'s content, fields in KAI's order."""
    document: dict[str, Any] = {"config": snapshot.config, "schedulerParams": snapshot.params,
                                "rawObjects": {field: snapshot.objects.get(field, []) for field in RAW_OBJECTS}}
    if snapshot.discovery is not None:
        document["discovery"] = snapshot.discovery
    return document


def snapshot_zip(snapshot: KaiSnapshot) -> bytes:
    """The zip KAI's ``/get-snapshot`` serves."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(SNAPSHOT_FILE, json.dumps(snapshot_document(snapshot), separators=(",", ":")))
    return buffer.getvalue()


def list_objects(kube: Kube, partition: Partition = EVERYTHING) -> dict[str, list[dict[str, Any]]]:
    """Every object of the kinds a snapshot holds, listed from the API server, of :data:`POOL_FIELDS` those of
    ``partition`` only, as KAI's plugin lists them; a kind that is not served (its CRD is absent, DRA is off) is
    empty."""
    objects: dict[str, list[dict[str, Any]]] = {}
    for field, informer in RAW_OBJECTS.items():
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"limit": 500}
        if field in POOL_FIELDS and partition.selector:
            query["labelSelector"] = partition.selector
        while True:
            try:
                page = kube.get(PATHS[informer], query)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                break
            items.extend(page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            query["continue"] = token
        objects[field] = items
    return objects


def discovery(kube: Kube) -> dict[str, Any]:
    """The ``discovery`` of a snapshot: the server's version and the API resource lists of the optional APIs
    the scheduler reads (DRA, NodeResourceTopologies) when they are served."""
    out: dict[str, Any] = {"serverVersion": None, "resources": []}
    try:
        out["serverVersion"] = kube.get("/version")
    except ApiError:
        pass
    for group, version in {OPTIONAL[name] for name in OPTIONAL}:
        try:
            out["resources"].append(kube.get(f"/apis/{group}/{version}"))
        except ApiError:
            continue
    return out


def take_snapshot(kube: Kube, config: SchedulerConfig, scheduler_name: str, stuck_after: float,
                  period: float, partition: Partition = EVERYTHING) -> KaiSnapshot:
    """The cluster as a scheduler with these settings reads it, now: what ``/get-snapshot`` serves."""
    return KaiSnapshot(kai_config(config), scheduler_params(config, scheduler_name, stuck_after, period, partition),
                       list_objects(kube, partition), discovery(kube))


def snapshot_route(current: Callable[[], Scheduler | None]) -> Route:
    """The handler of :data:`ROUTE`: the zip while the configuration of the scheduler ``current()`` gives has the
    ``snapshot`` plugin, listed at the request as KAI's plugin lists its informers' stores then; else nothing
    (a 404)."""
    def serve() -> tuple[bytes, str, dict[str, str]] | None:
        scheduler = current()
        if scheduler is None:
            return None
        plugins = scheduler.plugins
        if "snapshot" not in plugins.names:
            return None
        cache = scheduler.cache
        snapshot = take_snapshot(cache.kube, plugins.config, cache.scheduler_name, cache.stuck_after,
                                 scheduler.period, cache.partition)
        return snapshot_zip(snapshot), "application/zip", {"Content-Disposition": "attachment; filename=snapshot.zip"}
    return serve


def load_cache(objects: dict[str, list[dict[str, Any]]], scheduler_name: str = names.SCHEDULER_NAME,
               stuck_after: float = STUCK_IN_RELEASING_THRESHOLD, restrict_node_scheduling: bool = False,
               partition: Partition = EVERYTHING) -> ClusterCache:
    """A cache (no API server behind it) holding ``objects`` (by ``rawObjects`` field), as its informers would
    list them for a scheduler of ``partition``."""
    cache = ClusterCache(kube=None, scheduler_name=scheduler_name, stuck_after=stuck_after,  # type: ignore[arg-type]
                         partition=partition)
    cache.restrict_node_scheduling = restrict_node_scheduling
    return cache.load({informer: objects.get(field, []) for field, informer in RAW_OBJECTS.items()})


def scheduler_config(snapshot: KaiSnapshot, where: str = "snapshot") -> Mapped:
    """The snapshot's KAI configuration and parameters as the project's; a ConfigError names what has no
    counterpart here. KAI plugins that have no plugin here (``snapshot``, ``reflectjoborder``, ``sg-*``) and
    parameters that change no decision are left out and named in :attr:`Mapped.ignored`."""
    ignored: list[str] = []
    config = DEFAULT_CONFIG
    if snapshot.config is not None:
        data = dict(snapshot.config)
        unknown = sorted(set(data) - {"actions", "tiers", "queueDepthPerAction", "usageDBConfig",
                                      "scenarioSearchBudgets"})
        if unknown:
            raise ConfigError(f"{where}: config field(s) {', '.join(unknown)} have no counterpart here")
        tiers = []
        for t, tier in enumerate(data.get("tiers") or []):
            plugins = []
            for p, option in enumerate((tier or {}).get("plugins") or []):
                name = (option or {}).get("name")
                switched = [key for key in DISABLE_OPTIONS if option.get(key)]
                if switched:
                    raise ConfigError(f"{where}: config.tiers[{t}].plugins[{p}] ({name}): {', '.join(switched)} "
                                      "has no counterpart here (the plugins here have no function switches)")
                if isinstance(name, str) and not_run(name):
                    ignored.append(f"plugin {name}")
                    continue
                plugins.append({k: v for k, v in option.items() if k not in DISABLE_OPTIONS})
            tiers.append({"plugins": plugins})
        if "tiers" in data:
            data["tiers"] = tiers
        config = parse_config(data, f"{where}: config")
    scheduler_name, stuck_after = names.SCHEDULER_NAME, STUCK_IN_RELEASING_THRESHOLD
    partition = EVERYTHING
    if snapshot.params is not None:
        params = snapshot.params
        partition = _partition(params.get("partitionParams"), where)
        ignored += [f"schedulerParams.{key}" for key in PARAMS_NOT_DECIDING if params.get(key)]
        known = {"schedulerName", "restrictSchedulingNodes", "maxNumberConsolidationPreemptees",
                 "useSchedulingSignatures", "fullHierarchyFairness", "allowConsolidatingReclaim",
                 "globalDefaultStalenessGracePeriod", "stuckInReleasingThreshold", "partitionParams",
                 *PARAMS_NOT_DECIDING}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigError(f"{where}: schedulerParams field(s) {', '.join(unknown)} have no counterpart here")
        config = attrs.evolve(
            config,
            restrict_node_scheduling=bool(params.get("restrictSchedulingNodes")),
            max_consolidation_preemptees=_whole(params, "maxNumberConsolidationPreemptees", where),
            use_scheduling_signatures=bool(params.get("useSchedulingSignatures")),
            full_hierarchy_fairness=bool(params.get("fullHierarchyFairness")),
            allow_consolidating_reclaim=bool(params.get("allowConsolidatingReclaim")),
            staleness_grace_period=_whole(params, "globalDefaultStalenessGracePeriod", where) / NANOSECONDS)
        scheduler_name = str(params.get("schedulerName") or names.SCHEDULER_NAME)
        stuck = _whole(params, "stuckInReleasingThreshold", where) / NANOSECONDS
        stuck_after = stuck if stuck > 0 else STUCK_IN_RELEASING_THRESHOLD  # KAI: zero is its default
    return Mapped(config, scheduler_name, stuck_after, tuple(ignored), partition)


def _partition(params: Any, where: str) -> Partition:
    """The partition of KAI's ``partitionParams``: the objects labelled ``NodePoolLabelKey=NodePoolLabelValue``,
    or without the key when no value is given; every object without a key (KAI's ``GetLabelSelector``)."""
    if params is None:
        return EVERYTHING
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: schedulerParams.partitionParams must be a mapping, not {describe(params)}")
    key, value = params.get("NodePoolLabelKey") or "", params.get("NodePoolLabelValue") or ""
    if not isinstance(key, str) or not isinstance(value, str):
        raise ConfigError(f"{where}: schedulerParams.partitionParams: the node pool label key and value must be "
                          "strings")
    return Partition(key, value or None) if key else EVERYTHING


def _whole(params: dict[str, Any], key: str, where: str) -> int:
    value = params.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: schedulerParams.{key} must be a whole number, not {describe(value)}")
    return value


def kai_config(config: SchedulerConfig) -> dict[str, Any]:
    """``config`` in KAI's shape (``config`` of a snapshot): the actions, one tier of the plugins with their
    arguments as strings, and the queue depths. Historical usage and search budgets are not written."""
    out: dict[str, Any] = {"actions": ", ".join(config.actions),
                           "tiers": [{"plugins": [_plugin_option(p.name, p.arguments) for p in config.plugins]}]}
    if config.queue_depth_per_action:
        out["queueDepthPerAction"] = dict(config.queue_depth_per_action)
    return out


def _plugin_option(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    option: dict[str, Any] = {"name": name}
    if arguments:
        option["arguments"] = {k: _go_string(v) for k, v in arguments.items()}
    return option


def _go_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def scheduler_params(config: SchedulerConfig, scheduler_name: str, stuck_after: float,
                     period: float, partition: Partition = EVERYTHING) -> dict[str, Any]:
    """The parameters of a scheduler with ``config`` serving ``partition`` (``schedulerParams`` of a snapshot),
    zero values left out."""
    params: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "restrictSchedulingNodes": config.restrict_node_scheduling,
        "maxNumberConsolidationPreemptees": config.max_consolidation_preemptees,
        "useSchedulingSignatures": config.use_scheduling_signatures,
        "fullHierarchyFairness": config.full_hierarchy_fairness,
        "allowConsolidatingReclaim": config.allow_consolidating_reclaim,
        "globalDefaultStalenessGracePeriod": round(config.staleness_grace_period * NANOSECONDS),
        "schedulePeriod": round(period * NANOSECONDS),
        "stuckInReleasingThreshold": round(stuck_after * NANOSECONDS),
        "partitionParams": partition.key and {"NodePoolLabelKey": partition.key,
                                              "NodePoolLabelValue": partition.value or ""},
    }
    return {key: value for key, value in params.items() if value}

