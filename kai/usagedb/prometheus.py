"""Queue usage from Prometheus, with KAI's queries, and a lister that polls it in the background.

Per resource, KAI divides the windowed sum of the queue-controller's per-queue allocation metric
(label ``queue_name``) by the windowed sum of the cluster's capacity:

* sliding window: ``sum_over_time((M)[WINDOW:RESOLUTION])`` at the current time;
* tumbling and cron windows: the same over the span since the window's last reset (KAI issues a range query
  here, whose matrix answer its own parser rejects; an instant subquery gives the intended sum);
* half-life: ``M`` becomes ``((M) * (0.5^((NOW - time()) / HALF_LIFE_SECONDS)))``.

Metric names and the resolution come from ``extraParams`` (``gpuAllocationMetric``,
``cpuCapacityMetric``, ``queryResolution``, ``usageQueryTimeout``, ...) with KAI's defaults.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import cast

from kai.api.names import GPU
from kai.common.durations import format_duration
from kai.framework.usage import Usage, UsageParams

log = logging.getLogger("kai.usage")

#: (resource, allocation metric parameter and default, capacity metric parameter and default), in (CPU, memory, GPU).
METRICS = (
    ("cpu", "cpuAllocationMetric", "kai_queue_allocated_cpu_cores",
     "cpuCapacityMetric", 'sum(kube_node_status_capacity{resource="cpu"})'),
    ("memory", "memoryAllocationMetric", "kai_queue_allocated_memory_bytes",
     "memoryCapacityMetric", 'sum(kube_node_status_capacity{resource="memory"})'),
    (GPU, "gpuAllocationMetric", "kai_queue_allocated_gpus",
     "gpuCapacityMetric", 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})'),
)
QUEUE_LABEL = "queue_name"


class UsageError(Exception):
    """Usage could not be fetched or understood; the message says which query and why."""


class PrometheusClient:
    """Fetches every queue's normalised usage from a Prometheus server over its HTTP API."""

    def __init__(self, url: str, params: UsageParams):
        self.url = url.rstrip("/")
        self.params = params
        extra = params.extra
        self.timeout, self.resolution = params.query_timeout, params.resolution
        self.metrics = [(res, extra.get(a, a_default), extra.get(c, c_default))
                        for res, a, a_default, c, c_default in METRICS]

    def query_text(self, metric: str, now: float) -> str:
        """The PromQL KAI sends for ``metric`` at ``now``."""
        if self.params.half_life is not None:
            metric = f"(({metric}) * (0.5^(({int(now)} - time()) / {self.params.half_life:.6f})))"
        span = now - self.params.window_start(now) if self.params.window_type != "sliding" else self.params.window
        span = max(span, self.resolution)
        return f"sum_over_time(({metric})[{format_duration(span)}:{format_duration(self.resolution)}])"

    def fetch(self, now: float | None = None) -> Usage:
        """Every queue's (CPU, memory, GPU) usage; raises :class:`UsageError`."""
        now = time.time() if now is None else now
        out: dict[str, list[float]] = {}
        for r, (resource, allocation, capacity_metric) in enumerate(self.metrics):
            capacity_query = self.query_text(capacity_metric, now)
            samples = self._query(capacity_query, now)
            if not samples:
                raise UsageError(f"no data for the {resource} capacity: {capacity_query}")
            capacity = samples[0][1]
            for queue, value in self._query(self.query_text(allocation, now), now):
                if queue:
                    out.setdefault(queue, [0.0, 0.0, 0.0])[r] = value / capacity if capacity > 0 else 0.0
        return cast(Usage, {q: tuple(v) for q, v in out.items()})

    def _query(self, query: str, now: float) -> list[tuple[str, float]]:
        """(queue label, value) of each sample of an instant query's vector."""
        body = urllib.parse.urlencode({"query": query, "time": f"{now:.3f}"}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=body, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise UsageError(f"Prometheus answered {exc.code} ({_error_text(exc)}) to: {query}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise UsageError(f"cannot reach Prometheus at {self.url} ({exc}) for: {query}") from None
        except ValueError:
            raise UsageError(f"Prometheus sent a reply that is not JSON for: {query}") from None
        if not isinstance(reply, dict) or reply.get("status") != "success":
            raise UsageError(f"Prometheus query failed ({reply.get('error') if isinstance(reply, dict) else reply}): "
                             f"{query}")
        data = reply.get("data") or {}
        if data.get("resultType") != "vector":
            raise UsageError(f"unexpected result type {data.get('resultType')!r}, expected vector: {query}")
        out = []
        try:
            for sample in data.get("result") or []:
                out.append(((sample.get("metric") or {}).get(QUEUE_LABEL, ""), float(sample["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError):
            raise UsageError(f"malformed sample in Prometheus' reply to: {query}") from None
        return out


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error") or exc.reason)
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


class UsageLister:
    """Serves the last usage a client fetched; a thread refreshes it every fetch interval.

    A failed fetch is logged and the last data stays in use; data older than the staleness period
    is still used, with an error logged at most once per fetch interval. ``query_timer`` (e.g.
    ``SchedulerMetrics.usage_query``) returns a context manager that times each successful fetch.
    """

    def __init__(self, client, params: UsageParams, clock=time.time, query_timer=None):
        self.client, self.params, self.clock = client, params, clock
        self.query_timer = query_timer or contextlib.nullcontext
        self.data: Usage = {}
        self.fetched_at: float | None = None
        self.stale_logged_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Fetch in the background; wait up to the wait timeout for the first data."""
        self._thread = threading.Thread(target=self._loop, name="kai-usage-lister", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.params.wait_timeout
        while self.fetched_at is None and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        if self.fetched_at is None:
            log.warning("usage DB: no usage data after %s; scheduling without it until it arrives",
                        format_duration(self.params.wait_timeout))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.params.fetch_interval)

    def refresh(self) -> bool:
        """Fetch once; on failure log why and keep the last data."""
        try:
            with self.query_timer():
                data = self.client.fetch()
        except UsageError as exc:
            log.error("usage DB: fetching queue usage failed, keeping the last data: %s", exc)
            return False
        with self._lock:
            self.data, self.fetched_at = data, self.clock()
        return True

    def record(self, session) -> None:
        """Nothing to record: Prometheus learns usage from the queue controller's metrics."""

    def usage(self, now: float) -> Usage:
        with self._lock:
            data, fetched = self.data, self.fetched_at
        if fetched is None and self._thread is None:  # not started (one-off runs): fetch now
            self.refresh()
            with self._lock:
                data, fetched = self.data, self.fetched_at
        clock = self.clock()
        if fetched is not None and clock - fetched > self.params.staleness and \
                clock - self.stale_logged_at >= self.params.fetch_interval:
            self.stale_logged_at = clock
            log.error("usage DB: usage data is stale (fetched %s ago, staleness period %s); still using it",
                      format_duration(int(clock - fetched)), format_duration(self.params.staleness))
        return data
