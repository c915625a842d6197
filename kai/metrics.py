"""Prometheus metrics of the scheduler, the binder and the queue controller.

KAI's metric set (v0.17's ``docs/metrics/METRICS.md``) under Prometheus naming: a ``kai_`` prefix
(``--metrics-namespace``), base units (seconds, bytes, cores) and ``_total`` on counters; labels
are KAI's. Every metric lives in a registry owned by one process (:class:`Registry`), never in the
global default registry, so two schedulers in one Python process (tests) do not share series.

The scheduler loop records through :class:`SchedulerMetrics`; it never touches prometheus-client
directly, so the names stay in this one module (``docs/metrics.md`` lists them).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from kai.framework.scenariosearch import SearchLog

DEFAULT_NAMESPACE = "kai"
#: KAI's latency buckets, 5 ms doubling ten times (5 ms ... 2.56 s), in seconds.
LATENCY_BUCKETS = tuple(0.005 * 2**k for k in range(10))
#: KAI's scenario-search buckets, 1 ms doubling sixteen times (1 ms ... 32.768 s).
SEARCH_BUCKETS = tuple(0.001 * 2**k for k in range(16))
#: The ``OnSession`` label of ``plugin_scheduling_latency_seconds`` (KAI's values).
ON_SESSION_OPEN, ON_SESSION_CLOSE = "OnSessionOpen", "OnSessionClose"
#: The labels of the scheduler's per-queue metrics: ``queue_name`` is the display name when the queue
#: has one (KAI's legacy label), ``queue_metadata_name`` always the Queue's name.
QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class Family(NamedTuple):
    """One registered metric: its full name (counters without ``_total``), type and label names."""

    name: str
    type: str
    labels: tuple[str, ...]

    def samples(self) -> tuple[str, ...]:
        """The names its samples have in ``/metrics``."""
        if self.type == "counter":
            return (f"{self.name}_total",)
        if self.type == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


class Registry:
    """The metrics registry of one process, with the namespace every name is prefixed with."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.namespace = namespace
        self.collectors = CollectorRegistry(auto_describe=True)
        #: Every metric registered, in order.
        self.families: list[Family] = []
        self._children: _Children | None = None

    def _add(self, metric, kind: str, labels: tuple[str, ...]):
        self.families.append(Family(metric.describe()[0].name, kind, tuple(labels)))
        return metric

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return self._add(Gauge(name, doc, labels, namespace=self.namespace, registry=self.collectors), "gauge",
                         labels)

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return self._add(Counter(name, doc, labels, namespace=self.namespace, registry=self.collectors), "counter",
                         labels)

    def histogram(self, name: str, doc: str, labels: tuple[str, ...] = (),
                  buckets: tuple[float, ...] = LATENCY_BUCKETS) -> Histogram:
        return self._add(Histogram(name, doc, labels, namespace=self.namespace, registry=self.collectors,
                                   buckets=buckets), "histogram", labels)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The current value of one sample (full name incl. namespace and suffix), None if absent."""
        return self.collectors.get_sample_value(name, dict(labels or {}))

    def labelled(self, label: str, value: str) -> Registry:
        """A registry of its own (one per scheduling shard) whose samples this one serves with ``label="value"``
        added; :meth:`drop` stops serving them."""
        if self._children is None:
            self._children = _Children()
            self.collectors.register(self._children)
        child = Registry(self.namespace)
        self._children.add((label, value), child)
        return child

    def drop(self, child: Registry) -> None:
        if self._children is not None:
            self._children.remove(child)


class _Children:
    """The samples of labelled child registries, one family per name (a collector of the parent's)."""

    def __init__(self) -> None:
        self._children: dict[int, tuple[tuple[str, str], Registry]] = {}

    def add(self, label: tuple[str, str], child: Registry) -> None:
        self._children[id(child)] = (label, child)

    def remove(self, child: Registry) -> None:
        self._children.pop(id(child), None)

    def collect(self) -> list[Metric]:
        merged: dict[str, Metric] = {}
        for (label, value), child in list(self._children.values()):
            for family in child.collectors.collect():
                out = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                            family.unit))
                out.samples.extend(s._replace(labels={**s.labels, label: value}) for s in family.samples)
        return list(merged.values())


@contextlib.contextmanager
def _timer(observe, since: float | None = None) -> Iterator[None]:
    """Observe the seconds from ``since`` (a ``time.perf_counter()`` reading; default: now) to the end."""
    start = time.perf_counter() if since is None else since
    try:
        yield
    finally:
        observe(time.perf_counter() - start)


def queue_labels(name: str, display_name: str = "") -> tuple[str, str, str]:
    """The values of :data:`QUEUE_LABELS` for queue ``name``."""
    return display_name or name, name, display_name


class SchedulerMetrics:
    """What one scheduling cycle reports (KAI's ``pkg/scheduler/metrics``), in seconds."""

    def __init__(self, registry: Registry) -> None:
        r = registry
        self._e2e = r.gauge("e2e_scheduling_latency_seconds",
                            "Duration of the last whole scheduling cycle, snapshot and session close included")
        self._open = r.gauge("open_session_latency_seconds",
                             "Duration of the last session open, snapshot and plugins included")
        self._close = r.gauge("close_session_latency_seconds", "Duration of the last session close, plugins included")
        self._plugin = r.gauge("plugin_scheduling_latency_seconds",
                               "Duration of one plugin's session open or close in the last cycle",
                               ("plugin", "OnSession"))
        self._action = r.gauge("action_scheduling_latency_seconds", "Duration of one action in the last cycle",
                               ("action",))
        self._task_latency = r.histogram("task_scheduling_latency_seconds",
                                         "From pod creation to the scheduler's decision to bind it")
        self._bind_latency = r.histogram("task_bind_latency_seconds", "Time spent creating one BindRequest")
        self._usage_query = r.histogram("usage_query_latency_seconds", "Duration of one usage database query")
        self._scheduled = r.counter("podgroups_scheduled_by_action", "PodGroups an action scheduled", ("action",))
        self._acted_on = r.counter("podgroups_acted_on_by_action", "PodGroups an action tried", ("action",))
        self._preemptions = r.counter("preemption_attempts", "Successful preempt-action attempts")
        self._evicted = r.counter("pod_group_evicted_pods", "Pods evicted, per PodGroup",
                                  ("podgroup", "namespace", "uid", "nodepool", "action"))
        self._simulated = r.counter("scenarios_simulation_by_action", "Scenarios an action simulated", ("action",))
        self._filtered = r.counter("scenarios_filtered_by_action", "Scenarios rejected before simulation",
                                   ("action",))
        self._search_jobs = r.counter("scenario_search_jobs", "Jobs considered by bounded scenario search",
                                      ("action", "result", "reduced_budget"))
        self._action_budget = r.gauge("scenario_search_action_budget_configured_seconds",
                                      "Configured action scenario search budget (0: unlimited)", ("action",))
        self._job_budget = r.gauge("scenario_search_job_budget_configured_seconds",
                                   "Configured per-job scenario search budget (0: unlimited)")
        self._generator_budget = r.gauge("scenario_search_generator_budget_configured_seconds",
                                         "Configured generator scenario search budget (0: unlimited)", ("generator",))
        self._action_exhausted = r.counter("scenario_search_action_budget_exhausted",
                                           "Action-level scenario search budget exhaustions", ("action",))
        self._search_seconds = r.histogram("scenario_search_duration_seconds",
                                           "Duration of one scenario attempt of a generator (the generator's step "
                                           "and the simulation)", ("action", "generator", "result"),
                                           buckets=SEARCH_BUCKETS)
        self._search_scenarios = r.counter("scenario_search_scenarios", "Bounded-search scenarios by state",
                                           ("action", "generator", "state"))
        self._fair_share_cpu = r.gauge("queue_fair_share_cpu_cores", "Fair share of CPU after division",
                                       QUEUE_LABELS)
        self._fair_share_memory = r.gauge("queue_fair_share_memory_bytes", "Fair share of memory after division",
                                          QUEUE_LABELS)
        self._fair_share_gpu = r.gauge("queue_fair_share_gpu", "Fair share of GPUs after division", QUEUE_LABELS)
        self._usage_cpu = r.gauge("queue_cpu_usage", "Historical CPU usage from the usage database", QUEUE_LABELS)
        self._usage_memory = r.gauge("queue_memory_usage", "Historical memory usage from the usage database",
                                     QUEUE_LABELS)
        self._usage_gpu = r.gauge("queue_gpu_usage", "Historical GPU usage from the usage database", QUEUE_LABELS)
        self._pods = r.gauge("snapshot_pods", "Pods in the last snapshot by status", ("status",))
        self._podgroups = r.gauge("snapshot_podgroups", "PodGroups in the last snapshot")
        self._pending_podgroups = r.gauge("snapshot_pending_podgroups",
                                          "PodGroups with pods waiting to be scheduled in the last snapshot")
        self._cycles = r.counter("scheduler_cycles", "Scheduling cycles run, by whether they decided something",
                                 ("decided",))
        self._cycle_failures = r.counter("scheduler_cycle_failures",
                                         "Scheduling cycles that failed as a whole (retried after a backoff)")
        self._contained = r.counter("scheduler_contained_errors",
                                    "Errors contained to one job, one action or one plugin's session close",
                                    ("action",))

    # durations of the cycle and its parts (context managers; ``since``: a ``time.perf_counter()`` reading)
    def cycle(self, since: float | None = None) -> contextlib.AbstractContextManager[None]:
        return _timer(self._e2e.set, since)

    def open_session(self, since: float | None = None) -> contextlib.AbstractContextManager[None]:
        return _timer(self._open.set, since)

    def close_session(self) -> contextlib.AbstractContextManager[None]:
        return _timer(self._close.set)

    def action(self, action: str) -> contextlib.AbstractContextManager[None]:
        return _timer(self._action.labels(action).set)

    def plugin_seconds(self, plugin: str, on_session: str, seconds: float) -> None:
        """``on_session`` is :data:`ON_SESSION_OPEN` or :data:`ON_SESSION_CLOSE`."""
        self._plugin.labels(plugin, on_session).set(seconds)

    def bind_request(self) -> contextlib.AbstractContextManager[None]:
        return _timer(self._bind_latency.observe)

    def usage_query(self) -> contextlib.AbstractContextManager[None]:
        return _timer(self._usage_query.observe)

    # events
    def task_scheduled(self, seconds_since_creation: float) -> None:
        self._task_latency.observe(max(0.0, seconds_since_creation))

    def podgroup_scheduled(self, action: str) -> None:
        self._scheduled.labels(action).inc()

    def podgroup_acted_on(self, action: str, count: int = 1) -> None:
        self._acted_on.labels(action).inc(count)

    def cycle_ran(self, decided: bool) -> None:
        self._cycles.labels("true" if decided else "false").inc()

    def cycle_failed(self) -> None:
        self._cycle_failures.inc()

    def contained_error(self, action: str) -> None:
        """An error the session contained; ``action`` is the action, or ``session close``."""
        self._contained.labels(action).inc()

    def preemption_attempt(self) -> None:
        self._preemptions.inc()

    def scenario_search(self, log: SearchLog) -> None:
        """What a session's bounded scenario searches did (the session's ``scenario_search``)."""
        for action, seconds in log.action_budgets.items():
            self._action_budget.labels(action).set(seconds)
        if log.job_budget is not None:
            self._job_budget.set(log.job_budget)
        for generator, seconds in log.generator_budgets.items():
            self._generator_budget.labels(generator).set(seconds)
        for (action, result, reduced), count in log.jobs.items():
            self._search_jobs.labels(action, result, "true" if reduced else "false").inc(count)
        for (action, generator, state), count in log.scenarios.items():
            self._search_scenarios.labels(action, generator, state).inc(count)
        for action, generator, result, seconds in log.durations:
            self._search_seconds.labels(action, generator, result).observe(seconds)
        for action, count in log.action_exhausted.items():
            self._action_exhausted.labels(action).inc(count)
        for action, count in log.simulated.items():
            self._simulated.labels(action).inc(count)
        for action, count in log.filtered.items():
            self._filtered.labels(action).inc(count)

    def pods_evicted(self, podgroup: str, namespace: str, uid: str, nodepool: str, action: str,
                     count: int = 1) -> None:
        self._evicted.labels(podgroup, namespace, uid, nodepool, action).inc(count)

    # state after a cycle (KAI replaces every queue's series each cycle: deleted queues must not stay)
    def fair_share(self, queue: str, cpu_millicores: float, memory_bytes: float, gpus: float,
                   display_name: str = "") -> None:
        """The division result of one queue (the proportion plugin's numbers, converted here once)."""
        labels = queue_labels(queue, display_name)
        self._fair_share_cpu.labels(*labels).set(cpu_millicores / 1000.0)
        self._fair_share_memory.labels(*labels).set(memory_bytes)
        self._fair_share_gpu.labels(*labels).set(gpus)

    def fair_shares(self, shares: Mapping[str, tuple[float, float, float]],
                    display_names: Mapping[str, str] | None = None) -> None:
        """Replace every queue's fair share: ``{queue: (cpu_millicores, memory_bytes, gpus)}``."""
        for gauge in (self._fair_share_cpu, self._fair_share_memory, self._fair_share_gpu):
            gauge.clear()
        for queue, (cpu, memory, gpus) in shares.items():
            self.fair_share(queue, cpu, memory, gpus, (display_names or {}).get(queue, ""))

    def queue_usages(self, usage: Mapping[str, tuple[float, float, float]],
                     display_names: Mapping[str, str] | None = None) -> None:
        """Replace every queue's historical usage: ``{queue: (cpu, memory, gpu)}``, as the usage source gives
        it (fractions of the cluster's capacity over the window)."""
        for gauge in (self._usage_cpu, self._usage_memory, self._usage_gpu):
            gauge.clear()
        for queue, (cpu, memory, gpu) in usage.items():
            labels = queue_labels(queue, (display_names or {}).get(queue, ""))
            self._usage_cpu.labels(*labels).set(cpu)
            self._usage_memory.labels(*labels).set(memory)
            self._usage_gpu.labels(*labels).set(gpu)

    def snapshot(self, pods_by_status: Mapping[str, int], podgroups: int, pending_podgroups: int) -> None:
        self._pods.clear()
        for status, count in pods_by_status.items():
            self._pods.labels(status).set(count)
        self._podgroups.set(podgroups)
        self._pending_podgroups.set(pending_podgroups)


def count_api_requests(registry: Registry, kube) -> None:
    """Counts every request ``kube`` (a :class:`kai.kube.client.Kube`) sends, by verb: ``api_requests_total``."""
    requests = registry.counter("api_requests", "Requests sent to the API server by verb (a watch counts once)",
                                ("verb",))
    kube.on_request = lambda verb: requests.labels(verb).inc()


class BinderMetrics:
    """Bind attempts and their duration."""

    def __init__(self, registry: Registry) -> None:
        self._attempts = registry.counter("binder_bind_attempts", "Bind attempts by result", ("result",))
        self._latency = registry.histogram("binder_bind_latency_seconds", "Duration of one bind attempt")
        self._stale = registry.counter("binder_stale_bind_requests_deleted",
                                       "BindRequests deleted because their pod is gone or bound elsewhere")

    def attempt(self):
        return _timer(self._latency.observe)

    def result(self, result: str) -> None:
        """``succeeded``, ``failed`` or ``already_bound``."""
        self._attempts.labels(result).inc()

    def stale_deleted(self) -> None:
        self._stale.inc()


class QueueMetrics:
    """KAI's queue-controller metrics: quota and allocation per queue.

    Labels: ``queue_name`` and ``queue_metadata_name`` (both the Queue's name), ``queue_display_name``
    (``spec.displayName``, or ""), then one label per entry of ``label_map``, which maps a queue label key to
    a metric label (``--queue-label-to-metric-label``); a queue without that label gets
    ``label_defaults[key]`` or "". ValueError names the flag when a metric label is not a valid name or
    repeats another.
    """

    FAMILIES = (
        ("queue_info", "Queue exists (always 1)"),
        ("queue_deserved_gpus", "Deserved GPUs (spec.resources.gpu.quota)"),
        ("queue_quota_cpu_cores", "CPU quota in cores (-1: unlimited)"),
        ("queue_quota_memory_bytes", "Memory quota in bytes (-1: unlimited)"),
        ("queue_allocated_gpus", "GPUs allocated to the queue's workloads"),
        ("queue_allocated_cpu_cores", "CPU cores allocated to the queue's workloads"),
        ("queue_allocated_memory_bytes", "Memory bytes allocated to the queue's workloads"),
    )

    def __init__(self, registry: Registry, label_map: Mapping[str, str] | None = None,
                 label_defaults: Mapping[str, str] | None = None) -> None:
        label_map = dict(label_map or {})
        self._label_keys = sorted(label_map)
        self._label_defaults = dict(label_defaults or {})
        labels = (*QUEUE_LABELS, *(label_map[k] for k in self._label_keys))
        for key in self._label_keys:
            label = label_map[key]
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"--queue-label-to-metric-label: {key}={label}: {label!r} is not a metric label name")
            if labels.count(label) > 1:
                raise ValueError(f"--queue-label-to-metric-label: {key}={label}: label {label!r} is used twice")
        self._gauges = {name: registry.gauge(name, doc, labels) for name, doc in self.FAMILIES}
        self._series: dict[str, tuple[str, ...]] = {}

    def set_queue(self, name: str, labels: Mapping[str, str], values: Mapping[str, float],
                  display_name: str = "") -> None:
        """Replace the series of queue ``name``; ``values`` maps each family name to its value."""
        extra = (labels.get(k, self._label_defaults.get(k, "")) for k in self._label_keys)
        series = (name, name, display_name, *extra)
        self.remove_queue(name)
        for family, gauge in self._gauges.items():
            gauge.labels(*series).set(1.0 if family == "queue_info" else values.get(family, 0.0))
        self._series[name] = series

    def remove_queue(self, name: str) -> None:
        series = self._series.pop(name, None)
        if series is not None:
            for gauge in self._gauges.values():
                gauge.remove(*series)
