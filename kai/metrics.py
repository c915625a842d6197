"""Prometheus metrics of the scheduler, the binder and the queue controller.

KAI's metric set under Prometheus naming: a ``kai_`` prefix (``--metrics-namespace``), base units
(seconds, bytes, cores) and ``_total`` on counters. Every metric lives in a registry owned by one
process (:class:`Registry`), never in the global default registry, so two schedulers in one Python
process (tests) do not share series.

The scheduler loop records through :class:`SchedulerMetrics`; it never touches prometheus-client
directly, so the names stay in this one module (``docs/metrics.md`` lists them).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DEFAULT_NAMESPACE = "kai"
#: KAI's latency buckets, 5 ms doubling ten times (5 ms ... 2.56 s), in seconds.
LATENCY_BUCKETS = tuple(0.005 * 2**k for k in range(10))


class Registry:
    """The metrics registry of one process, with the namespace every name is prefixed with."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.namespace = namespace
        self.collectors = CollectorRegistry(auto_describe=True)

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, doc, labels, namespace=self.namespace, registry=self.collectors)

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, doc, labels, namespace=self.namespace, registry=self.collectors)

    def histogram(self, name: str, doc: str, labels: tuple[str, ...] = (),
                  buckets: tuple[float, ...] = LATENCY_BUCKETS) -> Histogram:
        return Histogram(name, doc, labels, namespace=self.namespace, registry=self.collectors, buckets=buckets)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The current value of one sample (full name incl. namespace and suffix), None if absent."""
        return self.collectors.get_sample_value(name, dict(labels or {}))


@contextlib.contextmanager
def _timer(observe) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        observe(time.perf_counter() - start)


class SchedulerMetrics:
    """What one scheduling cycle reports (KAI's ``pkg/scheduler/metrics``), in seconds."""

    def __init__(self, registry: Registry) -> None:
        r = registry
        self._e2e = r.gauge("e2e_scheduling_latency_seconds", "Duration of the last whole scheduling cycle")
        self._open = r.gauge("open_session_latency_seconds", "Duration of the last session open, plugins included")
        self._close = r.gauge("close_session_latency_seconds", "Duration of the last session close")
        self._plugin = r.gauge("plugin_scheduling_latency_seconds",
                               "Duration of one plugin's session open or close in the last cycle",
                               ("plugin", "on_session"))
        self._action = r.gauge("action_scheduling_latency_seconds", "Duration of one action in the last cycle",
                               ("action",))
        self._task_latency = r.histogram("task_scheduling_latency_seconds",
                                         "From pod creation to the scheduler's decision to bind it")
        self._bind_latency = r.histogram("task_bind_latency_seconds", "Time spent creating one BindRequest")
        self._usage_query = r.histogram("usage_query_latency_seconds", "Duration of one usage database query")
        self._scheduled = r.counter("podgroups_scheduled_by_action", "PodGroups an action scheduled", ("action",))
        self._acted_on = r.counter("podgroups_acted_on_by_action", "PodGroups an action tried", ("action",))
        self._simulated = r.counter("scenarios_simulation_by_action", "Scenarios an action simulated", ("action",))
        self._filtered = r.counter("scenarios_filtered_by_action", "Scenarios rejected before simulation",
                                   ("action",))
        self._preemptions = r.counter("preemption_attempts", "Successful preempt-action attempts")
        self._evicted = r.counter("pod_group_evicted_pods", "Pods evicted, per PodGroup",
                                  ("podgroup", "namespace", "uid", "nodepool", "action"))
        self._fair_share_cpu = r.gauge("queue_fair_share_cpu_cores", "Fair share of CPU after division",
                                       ("queue_name",))
        self._fair_share_memory = r.gauge("queue_fair_share_memory_bytes", "Fair share of memory after division",
                                          ("queue_name",))
        self._fair_share_gpu = r.gauge("queue_fair_share_gpu", "Fair share of GPUs after division", ("queue_name",))
        self._usage_cpu = r.gauge("queue_cpu_usage", "Historical CPU usage from the usage database", ("queue_name",))
        self._usage_memory = r.gauge("queue_memory_usage", "Historical memory usage from the usage database",
                                     ("queue_name",))
        self._usage_gpu = r.gauge("queue_gpu_usage", "Historical GPU usage from the usage database", ("queue_name",))
        self._pods = r.gauge("snapshot_pods", "Pods in the last snapshot by status", ("status",))
        self._podgroups = r.gauge("snapshot_podgroups", "PodGroups in the last snapshot")
        self._pending_podgroups = r.gauge("snapshot_pending_podgroups",
                                          "PodGroups with pods waiting to be scheduled in the last snapshot")
        self._cycle_failures = r.counter("scheduler_cycle_failures",
                                         "Scheduling cycles that failed as a whole (retried after a backoff)")
        self._contained = r.counter("scheduler_contained_errors",
                                    "Errors contained to one job, one action or one plugin's session close",
                                    ("action",))

    # durations of the cycle and its parts (context managers)
    def cycle(self):
        return _timer(self._e2e.set)

    def open_session(self):
        return _timer(self._open.set)

    def close_session(self):
        return _timer(self._close.set)

    def action(self, action: str):
        return _timer(self._action.labels(action).set)

    def plugin(self, plugin: str, on_session: str):
        """``on_session`` is ``open`` or ``close``."""
        return _timer(self._plugin.labels(plugin, on_session).set)

    def bind_request(self):
        return _timer(self._bind_latency.observe)

    def usage_query(self):
        return _timer(self._usage_query.observe)

    # events
    def task_scheduled(self, seconds_since_creation: float) -> None:
        self._task_latency.observe(max(0.0, seconds_since_creation))

    def podgroup_scheduled(self, action: str) -> None:
        self._scheduled.labels(action).inc()

    def podgroup_acted_on(self, action: str) -> None:
        self._acted_on.labels(action).inc()

    def scenarios_simulated(self, action: str, count: int = 1) -> None:
        self._simulated.labels(action).inc(count)

    def scenarios_filtered(self, action: str, count: int = 1) -> None:
        self._filtered.labels(action).inc(count)

    def cycle_failed(self) -> None:
        self._cycle_failures.inc()

    def contained_error(self, action: str) -> None:
        """An error the session contained; ``action`` is the action, or ``session close``."""
        self._contained.labels(action).inc()

    def preemption_attempt(self) -> None:
        self._preemptions.inc()

    def pods_evicted(self, podgroup: str, namespace: str, uid: str, nodepool: str, action: str,
                     count: int = 1) -> None:
        self._evicted.labels(podgroup, namespace, uid, nodepool, action).inc(count)

    # state after a cycle
    def fair_share(self, queue: str, cpu_millicores: float, memory_bytes: float, gpus: float) -> None:
        """The division result of one queue (the proportion plugin's numbers, converted here once)."""
        self._fair_share_cpu.labels(queue).set(cpu_millicores / 1000.0)
        self._fair_share_memory.labels(queue).set(memory_bytes)
        self._fair_share_gpu.labels(queue).set(gpus)

    def fair_shares(self, shares: Mapping[str, tuple[float, float, float]]) -> None:
        """Replace every queue's fair share: ``{queue: (cpu_millicores, memory_bytes, gpus)}``."""
        for gauge in (self._fair_share_cpu, self._fair_share_memory, self._fair_share_gpu):
            gauge.clear()  # deleted queues must not keep their last share
        for queue, (cpu, memory, gpus) in shares.items():
            self.fair_share(queue, cpu, memory, gpus)

    def queue_usage(self, queue: str, cpu: float, memory: float, gpu: float) -> None:
        self._usage_cpu.labels(queue).set(cpu)
        self._usage_memory.labels(queue).set(memory)
        self._usage_gpu.labels(queue).set(gpu)

    def snapshot(self, pods_by_status: Mapping[str, int], podgroups: int, pending_podgroups: int) -> None:
        self._pods.clear()
        for status, count in pods_by_status.items():
            self._pods.labels(status).set(count)
        self._podgroups.set(podgroups)
        self._pending_podgroups.set(pending_podgroups)


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

    ``label_map`` maps a queue label key to an extra metric label (``--queue-label-to-metric-label``);
    a queue without that label gets ``label_defaults[key]`` or "".
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
        self._label_keys = sorted(label_map or {})
        self._label_defaults = dict(label_defaults or {})
        labels = ("queue_name", *((label_map or {})[k] for k in self._label_keys))
        self._gauges = {name: registry.gauge(name, doc, labels) for name, doc in self.FAMILIES}
        self._series: dict[str, tuple[str, ...]] = {}

    def set_queue(self, name: str, labels: Mapping[str, str], values: Mapping[str, float]) -> None:
        """Replace the series of queue ``name``; ``values`` maps each family name to its value."""
        series = (name, *(labels.get(k, self._label_defaults.get(k, "")) for k in self._label_keys))
        self.remove_queue(name)
        for family, gauge in self._gauges.items():
            gauge.labels(*series).set(1.0 if family == "queue_info" else values.get(family, 0.0))
        self._series[name] = series

    def remove_queue(self, name: str) -> None:
        series = self._series.pop(name, None)
        if series is not None:
            for gauge in self._gauges.values():
                gauge.remove(*series)
