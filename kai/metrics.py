"""Prometheus metrics of the scheduler, the binder, the queue controller and the controllers' work queues.

KAI's metric set (v0.17's ``docs/metrics/METRICS.md``) under KAI's names, types, labels and units, with
the ``kai_`` prefix (``--metrics-namespace``): latencies in milliseconds, fair-share memory in GB, and
counters named as KAI's Go client exposes them, some with ``_total`` and some without. The controllers'
work queues and reconciles carry client-go's and controller-runtime's names (``workqueue_*``,
``controller_runtime_*``), and ``kai-scheduler run`` adds the process metrics (``process_*``). Every
metric lives in a registry owned by one process (:class:`Registry`), never in the global default
registry, so two schedulers in one Python process (tests) do not share series; :func:`exposition` renders
it in the text format of KAI's Go client.

The scheduler loop records through :class:`SchedulerMetrics`; it never touches prometheus-client
directly, so the names stay in this one module (``docs/metrics.md`` lists them).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from kai.framework.scenariosearch import SearchLog

DEFAULT_NAMESPACE = "kai"
#: KAI's latency buckets in milliseconds: 5 ms doubling ten times (5 ... 2560).
LATENCY_BUCKETS = tuple(5.0 * 2**k for k in range(10))
#: The same in seconds, for this project's binder latency.
BIND_BUCKETS = tuple(ms / 1000.0 for ms in LATENCY_BUCKETS)
#: KAI's scenario-search buckets in seconds: 1 ms doubling sixteen times (0.001 ... 32.768).
SEARCH_BUCKETS = tuple(0.001 * 2**k for k in range(16))
#: client-go's work-queue buckets in seconds: 10 ns times ten, twelve times (1e-8 ... 1e3).
WORKQUEUE_BUCKETS = tuple(1e-8 * 10**k for k in range(12))
#: controller-runtime's reconcile-time buckets in seconds.
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
                     1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60)
#: KAI's fair-share memory unit: GB of 10^9 bytes.
BYTES_PER_GB = 1e9
#: The ``OnSession`` label of ``plugin_scheduling_latency_milliseconds`` (KAI's values).
ON_SESSION_OPEN, ON_SESSION_CLOSE = "OnSessionOpen", "OnSessionClose"
#: The labels of the scheduler's per-queue metrics: ``queue_name`` is the display name when the queue
#: has one (KAI's legacy label), ``queue_metadata_name`` always the Queue's name.
QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary"}


class Family(NamedTuple):
    """One registered metric: its full name, type and label names."""

    name: str
    type: str
    labels: tuple[str, ...]

    def samples(self) -> tuple[str, ...]:
        """The names its samples have in ``/metrics``."""
        if self.type == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


class _ExactCounter:
    """A prometheus-client counter exported under exactly ``name``: prometheus-client would add ``_total``
    to names without it, KAI's Go client does not."""

    def __init__(self, counter: Counter, name: str, doc: str) -> None:
        self._counter, self._name, self._doc = counter, name, doc

    def describe(self) -> list[Metric]:
        return [Metric(self._name, self._doc, "counter")]

    def collect(self) -> list[Metric]:
        (family,) = self._counter.collect()
        out = Metric(self._name, self._doc, "counter")
        out.samples = [s._replace(name=self._name) for s in family.samples if s.name.endswith("_total")]
        return [out]


class Registry:
    """The metrics registry of one process, with the namespace every KAI name is prefixed with."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.namespace = namespace
        self.collectors = CollectorRegistry(auto_describe=True)
        #: Every metric registered, in order.
        self.families: list[Family] = []
        self._children: _Children | None = None

    def _name(self, name: str, prefixed: bool) -> str:
        return f"{self.namespace}_{name}" if prefixed and self.namespace else name

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = (), prefixed: bool = True) -> Gauge:
        """``prefixed``: the name takes the namespace (KAI's metrics), else it is used as it is."""
        full = self._name(name, prefixed)
        gauge = Gauge(full, doc, labels, registry=self.collectors)
        self.families.append(Family(full, "gauge", tuple(labels)))
        return gauge

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = (), prefixed: bool = True) -> Counter:
        """A counter whose samples are named exactly ``name`` (with the namespace), as KAI's Go client names
        them: with ``_total`` only when the name ends in it."""
        full = self._name(name, prefixed)
        counter = Counter(full, doc, labels, registry=None)
        self.collectors.register(_ExactCounter(counter, full, doc))
        self.families.append(Family(full, "counter", tuple(labels)))
        return counter

    def histogram(self, name: str, doc: str, labels: tuple[str, ...] = (),
                  buckets: tuple[float, ...] = LATENCY_BUCKETS, prefixed: bool = True) -> Histogram:
        full = self._name(name, prefixed)
        histogram = Histogram(full, doc, labels, registry=self.collectors, buckets=buckets)
        self.families.append(Family(full, "histogram", tuple(labels)))
        return histogram

    def add_process_metrics(self) -> None:
        """The ``process_*`` metrics of this process (CPU seconds, memory, open files, start time)."""
        ProcessCollector(registry=self.collectors)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The current value of one sample (its full name, as in ``/metrics``), None if absent."""
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


def exposition(registry: Registry) -> bytes:
    """``/metrics`` in the Prometheus text format as KAI's Go client writes it: a family is named as its
    samples are (a counter with or without ``_total``), without ``_created`` samples, and families without
    samples are left out."""
    lines: list[str] = []
    for family in registry.collectors.collect():
        samples = [s for s in family.samples if s.name != f"{family.name}_created"]
        if not samples:
            continue
        name = samples[0].name if family.type == "counter" else family.name
        lines.append(f"# HELP {name} {_escape(family.documentation, quotes=False)}")
        lines.append(f"# TYPE {name} {_TYPES.get(family.type, 'untyped')}")
        for sample in samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            lines.append(f"{sample.name}{{{labels}}} {floatToGoString(sample.value)}" if labels
                         else f"{sample.name} {floatToGoString(sample.value)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _escape(value: str, quotes: bool = True) -> str:
    """Backslashes and line feeds escaped, and double quotes too in a label value (not in HELP)."""
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quotes else value


@contextlib.contextmanager
def _timer(observe, since: float | None = None) -> Iterator[None]:
    """Observe the seconds from ``since`` (a ``time.perf_counter()`` reading; default: now) to the end."""
    start = time.perf_counter() if since is None else since
    try:
        yield
    finally:
        observe(time.perf_counter() - start)


def _in_ms(record: Callable[[float], None]) -> Callable[[float], None]:
    """``record`` of a value in seconds, given it in milliseconds."""
    return lambda seconds: record(seconds * 1000.0)


def queue_labels(name: str, display_name: str = "") -> tuple[str, str, str]:
    """The values of :data:`QUEUE_LABELS` for queue ``name``."""
    return display_name or name, name, display_name


class SchedulerMetrics:
    """What one scheduling cycle reports (KAI's ``pkg/scheduler/metrics``). Its methods take seconds and
    bytes; KAI's latencies are exported in milliseconds (with their fractions; KAI rounds down) and its
    fair-share memory in GB."""

    def __init__(self, registry: Registry) -> None:
        r = registry
        self._e2e = r.gauge("e2e_scheduling_latency_milliseconds",
                            "Duration of the last whole scheduling cycle, snapshot and session close included")
        self._open = r.gauge("open_session_latency_milliseconds",
                             "Duration of the last session open, snapshot and plugins included")
        self._close = r.gauge("close_session_latency_milliseconds",
                              "Duration of the last session close, plugins included")
        self._plugin = r.gauge("plugin_scheduling_latency_milliseconds",
                               "Duration of one plugin's session open or close in the last cycle",
                               ("plugin", "OnSession"))
        self._action = r.gauge("action_scheduling_latency_milliseconds", "Duration of one action in the last cycle",
                               ("action",))
        self._task_latency = r.histogram("task_scheduling_latency_milliseconds",
                                         "From pod creation to the scheduler's decision to bind it")
        self._bind_latency = r.histogram("task_bind_latency_milliseconds", "Time spent creating one BindRequest")
        self._usage_query = r.histogram("usage_query_latency_milliseconds", "Duration of one usage database query")
        self._scheduled = r.counter("podgroups_scheduled_by_action", "PodGroups an action scheduled", ("action",))
        self._acted_on = r.counter("podgroups_acted_on_by_action", "PodGroups an action tried", ("action",))
        self._preemptions = r.counter("total_preemption_attempts", "Successful preempt-action attempts")
        self._evicted = r.counter("pod_group_evicted_pods_total", "Pods evicted, per PodGroup",
                                  ("podgroup", "namespace", "uid", "nodepool", "action"))
        self._simulated = r.counter("scenarios_simulation_by_action", "Scenarios an action simulated", ("action",))
        self._filtered = r.counter("scenarios_filtered_by_action", "Scenarios rejected before simulation",
                                   ("action",))
        self._search_jobs = r.counter("scenario_search_jobs_total", "Jobs considered by bounded scenario search",
                                      ("action", "result", "reduced_budget"))
        self._action_budget = r.gauge("scenario_search_action_budget_configured_seconds",
                                      "Configured action scenario search budget (0: unlimited)", ("action",))
        self._job_budget = r.gauge("scenario_search_job_budget_configured_seconds",
                                   "Configured per-job scenario search budget (0: unlimited)")
        self._generator_budget = r.gauge("scenario_search_generator_budget_configured_seconds",
                                         "Configured generator scenario search budget (0: unlimited)", ("generator",))
        self._action_exhausted = r.counter("scenario_search_action_budget_exhausted_total",
                                           "Action-level scenario search budget exhaustions", ("action",))
        self._search_seconds = r.histogram("scenario_search_duration_seconds",
                                           "Duration of one scenario attempt of a generator (the generator's step "
                                           "and the simulation)", ("action", "generator", "result"),
                                           buckets=SEARCH_BUCKETS)
        self._search_scenarios = r.counter("scenario_search_scenarios_total", "Bounded-search scenarios by state",
                                           ("action", "generator", "state"))
        self._fair_share_cpu = r.gauge("queue_fair_share_cpu_cores", "Fair share of CPU after division",
                                       QUEUE_LABELS)
        self._fair_share_memory = r.gauge("queue_fair_share_memory_gb", "Fair share of memory after division, in GB",
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
        self._cycles = r.counter("scheduler_cycles_total", "Scheduling cycles run, by whether they decided something",
                                 ("decided",))
        self._cycle_failures = r.counter("scheduler_cycle_failures_total",
                                         "Scheduling cycles that failed as a whole (retried after a backoff)")
        self._contained = r.counter("scheduler_contained_errors_total",
                                    "Errors contained to one job, one action or one plugin's session close",
                                    ("action",))

    # durations of the cycle and its parts (context managers; ``since``: a ``time.perf_counter()`` reading)
    def cycle(self, since: float | None = None) -> contextlib.AbstractContextManager[None]:
        return _timer(_in_ms(self._e2e.set), since)

    def open_session(self, since: float | None = None) -> contextlib.AbstractContextManager[None]:
        return _timer(_in_ms(self._open.set), since)

    def close_session(self) -> contextlib.AbstractContextManager[None]:
        return _timer(_in_ms(self._close.set))

    def action(self, action: str) -> contextlib.AbstractContextManager[None]:
        return _timer(_in_ms(self._action.labels(action).set))

    def plugin_seconds(self, plugin: str, on_session: str, seconds: float) -> None:
        """``on_session`` is :data:`ON_SESSION_OPEN` or :data:`ON_SESSION_CLOSE`."""
        self._plugin.labels(plugin, on_session).set(seconds * 1000.0)

    def bind_request(self) -> contextlib.AbstractContextManager[None]:
        return _timer(_in_ms(self._bind_latency.observe))

    def usage_query(self) -> contextlib.AbstractContextManager[None]:
        return _timer(_in_ms(self._usage_query.observe))

    # events
    def task_scheduled(self, seconds_since_creation: float) -> None:
        self._task_latency.observe(max(0.0, seconds_since_creation) * 1000.0)

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
        self._fair_share_memory.labels(*labels).set(memory_bytes / BYTES_PER_GB)
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
    """Counts every request ``kube`` (a :class:`kai.kube.client.Kube`) sends, by verb and resource (with its
    subresource, as ``pods/binding``): ``api_requests_total``."""
    requests = registry.counter("api_requests_total",
                                "Requests sent to the API server by verb and resource (a watch counts once)",
                                ("verb", "resource"))
    kube.on_request = lambda verb, resource: requests.labels(verb, resource).inc()


class BinderMetrics:
    """Bind attempts and their duration."""

    def __init__(self, registry: Registry) -> None:
        self._attempts = registry.counter("binder_bind_attempts_total", "Bind attempts by result", ("result",))
        self._latency = registry.histogram("binder_bind_latency_seconds", "Duration of one bind attempt",
                                           buckets=BIND_BUCKETS)
        self._stale = registry.counter("binder_stale_bind_requests_deleted_total",
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


class ControllerMetrics:
    """The work-queue metrics of client-go (``workqueue_*``) and the reconcile metrics of controller-runtime
    (``controller_runtime_*``), as KAI's controllers export them; one set per process, a series per
    controller. Their names take no namespace. A work queue's ``name`` and ``controller`` labels are both
    the controller's name, as controller-runtime sets them, and its depth has controller-runtime's
    ``priority`` label, empty for a queue without priorities."""

    def __init__(self, registry: Registry) -> None:
        r, by_queue = registry, ("name", "controller")
        self.depth = r.gauge("workqueue_depth", "Current depth of workqueue", (*by_queue, "priority"), prefixed=False)
        self.adds = r.counter("workqueue_adds_total", "Total number of adds handled by workqueue", by_queue,
                              prefixed=False)
        self.queue_duration = r.histogram(
            "workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested",
            by_queue, buckets=WORKQUEUE_BUCKETS, prefixed=False)
        self.work_duration = r.histogram(
            "workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes",
            by_queue, buckets=WORKQUEUE_BUCKETS, prefixed=False)
        self.unfinished = r.gauge("workqueue_unfinished_work_seconds",
                                  "How many seconds of work has been done that is in progress and hasn't been "
                                  "observed by work_duration", by_queue, prefixed=False)
        self.longest = r.gauge("workqueue_longest_running_processor_seconds",
                               "How many seconds has the longest running processor for workqueue been running",
                               by_queue, prefixed=False)
        self.retries = r.counter("workqueue_retries_total", "Total number of retries handled by workqueue", by_queue,
                                 prefixed=False)
        self.reconciles = r.counter("controller_runtime_reconcile_total", "Total number of reconciliations per "
                                    "controller", ("controller", "result"), prefixed=False)
        self.errors = r.counter("controller_runtime_reconcile_errors_total",
                                "Total number of reconciliation errors per controller", ("controller",), prefixed=False)
        self.reconcile_time = r.histogram("controller_runtime_reconcile_time_seconds",
                                          "Length of time per reconciliation per controller", ("controller",),
                                          buckets=RECONCILE_BUCKETS, prefixed=False)
        self.max_workers = r.gauge("controller_runtime_max_concurrent_reconciles",
                                   "Maximum number of concurrent reconciles per controller", ("controller",),
                                   prefixed=False)
        self.active_workers = r.gauge("controller_runtime_active_workers",
                                      "Number of currently used workers per controller", ("controller",),
                                      prefixed=False)

    def queue(self, name: str) -> WorkQueueMetrics:
        return WorkQueueMetrics(self, name)

    def reconciler(self, controller: str, workers: int) -> ReconcileMetrics:
        return ReconcileMetrics(self, controller, workers)


class WorkQueueMetrics:
    """One work queue's ``workqueue_*`` series; the queue calls these as client-go's queue does (a key added
    while waiting is not added again; every delayed add is a retry)."""

    def __init__(self, families: ControllerMetrics, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._depth = families.depth.labels(name, name, "")
        self._adds = families.adds.labels(name, name)
        self._queue_duration = families.queue_duration.labels(name, name)
        self._work_duration = families.work_duration.labels(name, name)
        self._retries = families.retries.labels(name, name)
        self._clock = clock
        self._lock = threading.Lock()
        self._added: dict[Hashable, float] = {}  # key -> when it was added, until taken
        self._started: dict[Hashable, float] = {}  # key -> when a worker took it, until done
        families.unfinished.labels(name, name).set_function(lambda: sum(self._running(), 0.0))
        families.longest.labels(name, name).set_function(lambda: max(self._running(), default=0.0))

    def added(self, key: Hashable) -> None:
        self._adds.inc()
        self._depth.inc()
        with self._lock:
            self._added.setdefault(key, self._clock())

    def taken(self, key: Hashable) -> None:
        self._depth.dec()
        now = self._clock()
        with self._lock:
            self._started[key] = now
            added = self._added.pop(key, None)
        if added is not None:
            self._queue_duration.observe(now - added)

    def done(self, key: Hashable) -> None:
        with self._lock:
            started = self._started.pop(key, None)
        if started is not None:
            self._work_duration.observe(self._clock() - started)

    def retried(self) -> None:
        self._retries.inc()

    def _running(self) -> list[float]:
        """How long each key in hand has been handled, seconds."""
        now = self._clock()
        with self._lock:
            return [now - started for started in self._started.values()]


class ReconcileMetrics:
    """One controller's ``controller_runtime_*`` series. A reconcile's ``result`` is ``success``,
    ``requeue_after`` (handled again after a delay) or ``error`` (it raised)."""

    def __init__(self, families: ControllerMetrics, controller: str, workers: int) -> None:
        self._families, self._controller = families, controller
        self._active = families.active_workers.labels(controller)
        self._time = families.reconcile_time.labels(controller)
        families.max_workers.labels(controller).set(workers)
        self._active.set(0)
        for result in ("success", "error", "requeue", "requeue_after"):  # controller-runtime starts every one at 0
            families.reconciles.labels(controller, result)
        families.errors.labels(controller)

    def began(self) -> None:
        self._active.inc()

    def ended(self, result: str, seconds: float) -> None:
        self._time.observe(seconds)
        self._active.dec()
        self._families.reconciles.labels(self._controller, result).inc()
        if result == "error":
            self._families.errors.labels(self._controller).inc()
