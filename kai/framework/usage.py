"""Historical queue usage for time-based fair share (KAI's usage DB): its configuration, and what a
session used.

With a usage source configured (``usageDBConfig`` in the scheduler configuration), every queue's
past usage of each resource, normalised to the cluster's capacity over the same window, leans the
over-quota split of the fair-share division away from queues that used more (the proportion
plugin's ``kValue``). Without one, usage is zero and fair share is purely quota and weight. The
sources themselves -- where usage comes from -- are in :mod:`kai.usagedb`.

Usage is a mapping ``queue name -> (CPU, memory, GPU)`` of fractions (a queue's summed allocation
over the window divided by the summed capacity).
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any, cast

import attrs

from kai.api import ALLOCATED, MIG_PREFIX, mig_gpu_slices, names
from kai.common.durations import parse_duration
from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, describe
from kai.framework.asbuilt import nodes_as_built
from kai.framework.memo import MemoKey

if TYPE_CHECKING:
    from kai.framework.nodes import NodeInfo
    from kai.framework.session import Session

CPU, MEMORY, GPU = range(3)
#: Every queue's historical usage: queue name -> (CPU, memory, GPU) fractions of the cluster's capacity.
Usage = dict[str, tuple[float, float, float]]
WEEK = 7 * 24 * 3600.0
#: Longest duration of the usage parameters (about 30 years).
MAX_DURATION = 1e9
CLIENT_TYPES = ("prometheus", "in-process", "fake-with-history")
WINDOW_TYPES = ("sliding", "tumbling", "cron")
PARAM_FIELDS = ("halfLifePeriod", "windowSize", "windowType", "tumblingWindowStartTime", "cronString",
                "fetchInterval", "stalenessPeriod", "waitTimeout", "extraParams")


@attrs.define(frozen=True)
class UsageParams:
    """KAI's ``usageParams``, durations in seconds (``half_life`` None: no decay)."""

    half_life: float | None = None
    window: float = WEEK
    window_type: str = "sliding"
    #: Unix time the first tumbling window starts (tumbling windows only).
    tumbling_start: float | None = None
    #: The schedule of a cron window's resets, as :func:`cron_schedule` reads ``cronString`` (cron windows only).
    cron: str | None = None
    #: Granularity of the history: Prometheus' subquery step, the in-process history's buckets (at least).
    resolution: float = 60.0
    #: How long one Prometheus query may take.
    query_timeout: float = 10.0
    fetch_interval: float = 60.0
    staleness: float = 300.0
    wait_timeout: float = 60.0
    extra: dict[str, str] = attrs.field(factory=dict)

    def window_start(self, now: float) -> float:
        """Where the window that ``now`` falls in begins."""
        if self.window_type == "sliding":
            return now - self.window
        if self.window_type == "cron":
            return last_reset(cast(str, self.cron), now)
        start = cast(float, self.tumbling_start)  # set for every tumbling window
        if start >= now:
            return now
        return start + math.floor((now - start) / self.window) * self.window

    def decay(self, age: float) -> float:
        """Weight of a sample ``age`` seconds old."""
        return 1.0 if self.half_life is None else 0.5 ** (age / self.half_life)


@attrs.define(frozen=True)
class UsageDBConfig:
    """KAI's ``usageDBConfig``: which source, where it is, and its parameters."""

    client_type: str
    connection_string: str = ""
    connection_string_env_var: str = ""
    params: UsageParams = UsageParams()


def parse_usage_db(data: Any, where: str) -> UsageDBConfig:
    """``usageDBConfig`` from parsed YAML; errors name ``where`` and the field."""
    where = f"{where}: usageDBConfig"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping")
    _known(data, ("clientType", "connectionString", "connectionStringEnvVar", "usageParams"), where)
    client = data.get("clientType")
    if client not in CLIENT_TYPES:
        raise ConfigError(f"{where}: field 'clientType' must be one of {', '.join(CLIENT_TYPES)}, "
                          f"not {describe(client)}")
    fields = Fields(data, where)
    url, env = fields.text("connectionString", ""), fields.text("connectionStringEnvVar", "")
    if client == "prometheus" and bool(url) == bool(env):
        raise ConfigError(f"{where}: set exactly one of 'connectionString' and 'connectionStringEnvVar'")
    return UsageDBConfig(client, str(url), str(env), _params(data.get("usageParams") or {}, f"{where}.usageParams"))


def _known(data: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in fields:
            raise ConfigError(f"{where}: field {describe(key)} is not known; known fields: {', '.join(fields)}")


def _params(data: Any, where: str) -> UsageParams:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping")
    _known(data, PARAM_FIELDS, where)

    def duration(key: str, default: float) -> float:
        if data.get(key) is None:
            return default
        return _seconds(data[key], f"{where}: field '{key}'")

    half_life = duration("halfLifePeriod", 0.0)
    window_type = data.get("windowType") or "sliding"
    if window_type not in WINDOW_TYPES:
        raise ConfigError(f"{where}: field 'windowType' must be one of {', '.join(WINDOW_TYPES)}, "
                          f"not {describe(window_type)}")
    window = duration("windowSize", WEEK)
    if window <= 0:
        raise ConfigError(f"{where}: field 'windowSize' must be positive")
    start = cron = None
    if window_type == "tumbling":
        start = _timestamp(data.get("tumblingWindowStartTime"), f"{where}: field 'tumblingWindowStartTime'")
    if window_type == "cron":
        cron = cron_schedule(data.get("cronString"), f"{where}: field 'cronString'")
    fetch = duration("fetchInterval", 60.0)
    extra = data.get("extraParams") or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{where}: field 'extraParams' must be a mapping of strings")
    extra = {str(k): str(v) for k, v in extra.items()}
    resolution, timeout = 60.0, 10.0
    resolution = _seconds(extra.get("queryResolution", "1m"), f"{where}: extraParams.queryResolution")
    timeout = _seconds(extra.get("usageQueryTimeout", "10s"), f"{where}: extraParams.usageQueryTimeout")
    if resolution <= 0 or timeout <= 0:
        raise ConfigError(f"{where}: extraParams queryResolution and usageQueryTimeout must be positive")
    return UsageParams(
        half_life=half_life if half_life and half_life > 0 else None, window=window, window_type=window_type,
        tumbling_start=start, cron=cron, resolution=resolution, query_timeout=timeout, fetch_interval=fetch,
        staleness=max(fetch, duration("stalenessPeriod", 300.0)),  # never shorter than the fetch interval
        wait_timeout=duration("waitTimeout", 60.0), extra=extra,
    )


def cron_schedule(value: Any, where: str) -> str:
    """``cronString`` in the field order of the cron library: KAI's cron strings have 5 fields (minute to day of
    week), 6 (and a year) or 7 (a second first, a year last), or are a macro such as ``@daily``."""
    from croniter import croniter

    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: required for cron windows, a cron string (like '0 0 * * 1')")
    fields = value.split()
    if len(fields) == 6:
        fields = [*fields[:5], "0", fields[5]]
    elif len(fields) == 7:
        fields = [*fields[1:6], fields[0], fields[6]]
    schedule = " ".join(fields)
    if len(fields) not in (1, 5, 7) or not croniter.is_valid(schedule):
        raise ConfigError(f"{where}: {describe(value)} is not a cron string (like '0 0 * * 1' or '@weekly')")
    return schedule


def last_reset(schedule: str, now: float) -> float:
    """The latest time of ``schedule`` before ``now`` (KAI's cron window start), ``now`` when there is none."""
    from croniter import CroniterBadDateError, croniter

    try:
        return float(croniter(schedule, now).get_prev(float))
    except CroniterBadDateError:
        return now


def _seconds(value: Any, where: str) -> float:
    """A duration of the usage parameters: from 0 to :data:`MAX_DURATION` seconds."""
    try:
        seconds = parse_duration(value, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not 0 <= seconds <= MAX_DURATION:
        raise ConfigError(f"{where} must be from 0 to {MAX_DURATION:g} seconds, not {describe(value)}")
    return seconds


def _timestamp(value: Any, where: str) -> float:
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{where}: {describe(value)} is not an RFC 3339 time "
                              "(like 2025-01-06T00:00:00Z)") from None
    else:
        raise ConfigError(f"{where}: required for tumbling windows, an RFC 3339 time (like 2025-01-06T00:00:00Z)")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


# --- what a session used ------------------------------------------------------------------------


def min_node_gpu_memory(session: Session) -> float:
    """The smallest GPU memory (MiB) over nodes that report more than the default 100 MiB, else 100: what a
    pending GPU-memory request is measured against in fair share."""
    values = [n.node.gpu_memory_mib for n in session.nodes if n.node.gpu_memory_mib > 100]
    return float(min(values)) if values else 100.0


def max_node_gpu_memory(session: Session) -> float:
    """The largest GPU memory (MiB) over nodes that report more than 100 MiB, else 100: what queue-capacity
    checks measure a pending GPU-memory request against (its smallest possible share of a device)."""
    values = [n.node.gpu_memory_mib for n in session.nodes if n.node.gpu_memory_mib > 100]
    return float(max(values)) if values else 100.0


def memory_base(node: NodeInfo | None, default: float) -> float:
    """GPU memory (MiB) that a GPU-memory request on ``node`` is measured against: the node's devices,
    or ``default`` when the node is unknown or reports none."""
    return float(node.node.gpu_memory_mib) if node is not None and node.node.gpu_memory_mib else default


def cluster_capacity(session: Session) -> list[float]:
    """(CPU, memory, GPU) of ready, schedulable nodes, MIG slices counted as GPUs. A node's amount below zero
    (pods of other schedulers hold more than it has) counts as zero; with ``restrictSchedulingNodes`` the GPUs
    of a node not labelled as a GPU worker do not count. The GPUs of node-local DRA slices count as the node's."""
    if session.snapshot.dra:
        return _capacity(session)
    kept = nodes_as_built(session, CAPACITY[session.plugins.config.restrict_node_scheduling],
                          lambda: _capacity(session))
    return list(kept)  # a copy: the kept value is not to be changed


#: The memo keys of the cluster's capacity without and with ``restrictSchedulingNodes`` (:func:`cluster_capacity`).
CAPACITY: dict[bool, MemoKey[list[float]]] = {restrict: MemoKey(f"cluster-capacity/{restrict}")
                                               for restrict in (False, True)}


def _capacity(session: Session) -> list[float]:
    totals = [0.0, 0.0, 0.0]
    counted: list[str] = []  # the nodes whose GPUs count
    restrict = session.plugins.config.restrict_node_scheduling
    for n in session.nodes:
        node = n.node
        if not node.ready or node.unschedulable:
            continue
        a = node.allocatable
        totals[CPU] += max(a.cpu, 0.0)
        totals[MEMORY] += max(a.memory, 0.0)
        if restrict and names.GPU_WORKER_LABEL not in node.labels:
            continue
        totals[GPU] += max(a.gpu, 0.0) + sum(mig_gpu_slices(k) * v for k, v in a.scalars.items()
                                             if k.startswith(MIG_PREFIX) and v > 0)
        counted.append(n.name)
    dra = session.snapshot.dra
    if dra:
        totals[GPU] += dra.gpu_devices(counted)
    return totals


def queue_allocations(session: Session) -> dict[str, list[float]]:
    """(CPU, memory, GPU quota) each queue and its ancestors hold in allocated tasks, as the session left them."""
    out: dict[str, list[float]] = {}
    gpu_memory = min_node_gpu_memory(session)
    for job in session.jobs.values():
        chain = None
        for task in job.tasks.values():
            if task.status not in ALLOCATED:
                continue
            if chain is None:
                chain = [out.setdefault(q.name, [0.0, 0.0, 0.0]) for q in session.ancestors(job.queue)]
            amounts = (task.request.cpu, task.request.memory,
                       task.request.quota_gpus(memory_base(session.node_by_name.get(task.node), gpu_memory)))
            for held in chain:
                for r in range(3):
                    held[r] += amounts[r]
    return out
