"""The scheduler component: a scheduling cycle on the live cluster, every period and after changes.

Each cycle takes a snapshot from the :class:`~kai.scheduler.cache.ClusterCache`, runs the configured
actions in one kernel :class:`~kai.framework.Session` -- the same entry points as the simulator,
no scheduling logic here -- and hands the outcome to the :class:`~kai.scheduler.commit.Committer`.
A cycle starts ``period`` seconds after the previous one (KAI's ``--schedule-period``, 1 s), or
``debounce`` seconds after a watch brings a change that can let a cycle decide something new (new
work, freed room, a placement withdrawn: :func:`~kai.scheduler.cache.wakes`), whichever comes first;
but never sooner after the previous cycle ended than that cycle took (at most a period), so that under
a stream of changes a large cluster's scheduler does not take all the CPU. The other changes -- pods
turning Running, BindRequests made or succeeding, the scheduler's own records on pods and PodGroups
written back -- wait for the periodic cycle: once every pod is placed, the scheduler runs one cycle a
period while the binder catches up, not one after another. A cycle that decided something is
followed by the next one a period after it started, changes or not: while pods stream in, each cycle
places a period's arrivals (a cycle's cost grows with the cluster, not with the pods it places), and
the first pod after a quiet spell is still taken up within the debounce. Nor does a cycle start while the
writes of the decisions before it are still under way (for at most :data:`WRITES_WAIT`): under a backlog of
writes a cycle would only add to it and take the CPU the writes need; the next one takes all that arrived
meanwhile. Faults of one job or one action are
contained in the session (:mod:`kai.framework.faults`); a cycle that fails as a whole is logged,
counted, and retried after a backoff that doubles with each failure in a row (a period first, at most
:data:`MAX_BACKOFF`), changes or not -- never a tight loop of failing cycles.

The scheduler serves one ``partition`` of the cluster (:mod:`kai.scheduler.partition`; every node by
default); :mod:`kai.scheduler.shards` runs one per SchedulingShard. With a ``shard`` name the scheduler
watches KAI's ``Config kai-config`` and that ``SchedulingShard`` (:mod:`kai.kube.kaiconfig`) and takes
their settings up at the start of the next cycle: the plugin set and actions (rebuilt only when they
changed), historical usage, the period and the bind mode (:mod:`kai.scheduler.bindmode`); while the Config's
``scheduler.service.enabled`` is false no cycle runs (KAI's operator removes its scheduler then). Without the
objects the ``config`` given stays in force; a change that cannot be applied leaves the previous settings.

On stop the loop ends within :data:`STOP_POLL` seconds when idle, or after the cycle under way;
the committer then finishes the decisions that cycle submitted, for at most ``stop_timeout``
seconds (:meth:`~kai.scheduler.commit.Committer.close`), and the watches stop.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import attrs

from kai.api import names
from kai.common.yamlfile import one_line
from kai.framework import DEFAULT_CONFIG, Decision, Plugins, SchedulerConfig, Session
from kai.framework.asbuilt import pending_jobs, task_statuses
from kai.kube.access import Access
from kai.kube.client import Kube
from kai.kube.kaiconfig import KaiObjects
from kai.logs import fields
from kai.metrics import ON_SESSION_CLOSE, ON_SESSION_OPEN, SchedulerMetrics
from kai.scheduler.bindmode import DIRECT
from kai.scheduler.cache import ClusterCache
from kai.scheduler.commit import Committer
from kai.scheduler.convert import STUCK_IN_RELEASING_THRESHOLD
from kai.scheduler.partition import EVERYTHING, Partition
from kai.scheduler.probe import SessionProbe
from kai.scheduler.settings import Settings, settings_builder
from kai.usagedb import make_usage_source

if TYPE_CHECKING:
    from kai.scheduler.shadow import ShadowCommitter

log = logging.getLogger(__name__)

#: KAI's ``OnSession`` label of each session hook.
ON_SESSION = {"kai_session_open": ON_SESSION_OPEN, "kai_session_close": ON_SESSION_CLOSE}
#: KAI's ``--schedule-period`` default, seconds.
DEFAULT_PERIOD = 1.0
DEFAULT_DEBOUNCE = 0.1
#: How often waits between cycles (and for the first lists) look at the stop event, seconds.
STOP_POLL = 0.1
#: How long, at most, the next cycle waits for the writes of the decisions before it, seconds.
WRITES_WAIT = 30.0
#: How long a stopping scheduler waits for the decisions it submitted, seconds.
STOP_TIMEOUT = 3.0
#: The longest wait, in seconds, before retrying after failed cycles (unless the period is longer).
MAX_BACKOFF = 30.0
#: How long a starting scheduler waits for its SchedulingShard and Config to be listed, seconds.
SETTINGS_WAIT = 5.0
#: Allocations between two collections of the youngest generation while the scheduler runs (Python's default: 700).
GC_YOUNG_THRESHOLD = 10_000
#: Collections of the youngest generation between two of the middle one while the scheduler runs (default: 10).
GC_MIDDLE_THRESHOLD = 50
#: How many cycles a scheduler keeps the summaries of (:attr:`Scheduler.recent`).
RECENT_CYCLES = 60

#: Every API call of the scheduler (its cache watches the cluster, its committer writes decisions).
API_ACCESS = (
    Access("", "pods", ("list", "watch", "patch")),
    Access("", "pods/eviction", ("create",)),
    Access("", "pods/binding", ("create",)),
    Access("", "pods/status", ("patch",)),
    Access("", "nodes", ("list", "watch")),
    Access("", "configmaps", ("list", "watch")),
    Access("", "persistentvolumeclaims", ("list", "watch")),
    Access("", "persistentvolumes", ("list", "watch")),
    Access(names.STORAGECLASSES[0], names.STORAGECLASSES[2], ("list", "watch")),
    Access(names.CSISTORAGECAPACITIES[0], names.CSISTORAGECAPACITIES[2], ("list", "watch")),
    Access(names.CSIDRIVERS[0], names.CSIDRIVERS[2], ("list", "watch")),
    Access(names.PODDISRUPTIONBUDGETS[0], names.PODDISRUPTIONBUDGETS[2], ("list", "watch")),
    Access("", "events", ("create",)),
    Access(names.PRIORITYCLASSES[0], names.PRIORITYCLASSES[2], ("list", "watch")),
    Access(names.QUEUES[0], names.QUEUES[2], ("list", "watch")),
    Access(names.PODGROUPS[0], names.PODGROUPS[2], ("list", "watch", "patch")),
    Access(names.PODGROUPS[0], f"{names.PODGROUPS[2]}/status", ("patch",)),
    Access(names.BINDREQUESTS[0], names.BINDREQUESTS[2], ("list", "watch", "create", "delete")),
    Access(names.TOPOLOGIES[0], names.TOPOLOGIES[2], ("list", "watch")),
    Access(names.SCHEDULINGSHARDS[0], names.SCHEDULINGSHARDS[2], ("get", "list", "watch")),
    Access(names.SCHEDULINGSHARDS[0], f"{names.SCHEDULINGSHARDS[2]}/status", ("patch",)),
    Access(names.CONFIGS[0], names.CONFIGS[2], ("get", "list", "watch")),
    Access(names.NODERESOURCETOPOLOGIES[0], names.NODERESOURCETOPOLOGIES[2], ("list", "watch")),
    *(Access(coords[0], coords[2], ("list", "watch")) for coords in (
        names.DEVICECLASSES, names.RESOURCESLICES, names.RESOURCECLAIMS, names.RESOURCECLAIMTEMPLATES)),
)


@attrs.frozen
class CycleSummary:
    """One cycle in brief: its number (None for a cycle that failed, with its ``error``), when it started (seconds
    since the epoch), how long it took, the jobs and nodes it saw and the pods it bound, pipelined and evicted."""

    cycle: int | None
    started: float
    seconds: float
    jobs: int = 0
    nodes: int = 0
    binds: int = 0
    pipelined: int = 0
    evictions: int = 0
    error: str = ""


class Scheduler:
    """``run(stop)`` schedules until ``stop`` is set; ``run_once()`` is one cycle (tests, tools)."""

    name = "scheduler"

    def __init__(self, kube: Kube, config: SchedulerConfig = DEFAULT_CONFIG, *, period: float = DEFAULT_PERIOD,
                 debounce: float = DEFAULT_DEBOUNCE, scheduler_name: str = names.SCHEDULER_NAME, workers: int = 16,
                 metrics: SchedulerMetrics | None = None, sync_timeout: float = 120.0,
                 stop_timeout: float = STOP_TIMEOUT, shard: str | None = None, partition: Partition = EVERYTHING,
                 stuck_in_releasing_threshold: float = STUCK_IN_RELEASING_THRESHOLD,
                 reservation_app: str = names.RESERVATION_APP[1], bind_mode: str = DIRECT) -> None:
        self.plugins = Plugins(config)
        self.cache = ClusterCache(kube, scheduler_name, stuck_in_releasing_threshold, partition)
        self.cache.reservation_app = reservation_app
        self.committer: Committer | ShadowCommitter = Committer(kube, self.cache, workers=workers, metrics=metrics,
                                                                bind_mode=bind_mode)
        self.period = period
        self.debounce = debounce
        self.metrics = metrics
        #: Plugin session timings and the jobs each eviction action tries (with metrics only).
        self.probe = SessionProbe(self.plugins) if metrics is not None else None
        self.sync_timeout = sync_timeout
        self.stop_timeout = stop_timeout
        self.cycles = 0
        #: Cycles failed in a row (0 after a cycle that succeeded).
        self.failures = 0
        #: Historical queue usage for time-based fair share (None unless ``usageDBConfig`` is set).
        self.usage = make_usage_source(config.usage_db, query_timer=metrics.usage_query if metrics else None)
        #: The SchedulingShard and Config watched for settings (None: ``config`` and ``period`` only).
        self.objects: KaiObjects[Settings] | None = None
        if shard is not None:
            self.objects = KaiObjects(
                kube, settings_builder(config, period, lambda: self.objects.value,  # type: ignore[union-attr]
                                       query_timer=metrics.usage_query if metrics else None,
                                       reservation_app=reservation_app, bind_mode=bind_mode),
                Settings(self.plugins, self.usage, period, reservation_app, bind_mode=bind_mode),
                component=names.SOURCE_SCHEDULER,
                shard=shard)
        self._settings_version = 0
        #: False while Config kai-config disables the scheduler (``scheduler.service.enabled``): no cycles run.
        self.enabled = True
        #: Called with each cycle's session after its actions, before it closes (the visibility API's view).
        self.observer: Callable[[Session], None] | None = None
        #: The last :data:`RECENT_CYCLES` cycles, oldest first; replaced, never changed, so readers need no lock.
        self.recent: tuple[CycleSummary, ...] = ()

    def ready(self) -> tuple[bool, str]:
        """Readiness: every informer has listed once."""
        missing = [name for name, inf in self.cache.informers.items() if not inf.synced.is_set()]
        return (not missing, f"waiting for the first list of {', '.join(missing)}" if missing else "synced")

    def run(self, stop: threading.Event) -> None:
        self.cache.start()
        if self.objects is not None:
            self.objects.start()
        if self.usage is not None:
            self.usage.start()
        thresholds = gc.get_threshold()
        try:
            if not self._wait_synced(stop):
                return
            gc.freeze()  # the listed cluster lives on: the collector need not walk it again and again
            # A cycle allocates objects by the hundred thousand; collecting the young ones every 700 allocations
            # made the collector a tenth or more of a cycle's CPU, and most of what a cycle keeps lives until the
            # next one, so a collection of the middle generation every ten of the youngest walked it again and
            # again (the setting is the process's, until the stop).
            gc.set_threshold(GC_YOUNG_THRESHOLD, GC_MIDDLE_THRESHOLD, thresholds[2])
            if self.objects is not None and not self.objects.wait_applied(SETTINGS_WAIT):
                log.warning("SchedulingShard and Config not listed yet; scheduling with the configuration given")
            log.info("scheduler started", **fields(actions=",".join(self.plugins.config.actions),
                                                   period_seconds=self.period))
            while not stop.is_set():
                started = time.monotonic()
                self.cache.changed.clear()
                try:
                    self.reconfigure()
                    if not self.enabled:
                        stop.wait(self.period)
                        continue
                    session = self.run_once()
                except Exception as exc:  # noqa: BLE001 - one bad cycle must not stop scheduling
                    self._remember(CycleSummary(None, time.time() - (time.monotonic() - started),
                                                time.monotonic() - started, error=one_line(str(exc) or repr(exc))))
                    stop.wait(self._cycle_failed(exc))
                    continue
                self.failures = 0
                self._wait_next(stop, started, decided=bool(session.decisions))
        finally:
            gc.set_threshold(*thresholds)
            self.committer.close(self.stop_timeout)
            if self.usage is not None:
                self.usage.close()
            if self.objects is not None:
                self.objects.stop()
            self.cache.stop()
            log.info("scheduler stopped", **fields(cycles=self.cycles))

    def reconfigure(self) -> bool:
        """Take up the settings of the watched objects if they changed since the last cycle; whether they did."""
        if self.objects is None or self.objects.version == self._settings_version:
            return False
        self._settings_version = self.objects.version
        settings = self.objects.value
        if settings.plugins is not self.plugins:
            self.plugins = settings.plugins
            if self.metrics is not None:
                self.probe = SessionProbe(self.plugins)
        if settings.usage is not self.usage:
            if self.usage is not None:
                self.usage.close()
            self.usage = settings.usage
            if self.usage is not None:
                self.usage.start()
        self.period = settings.period
        self.cache.reservation_app = settings.reservation_app
        self.enabled = settings.enabled
        if isinstance(self.committer, Committer):
            self.committer.bind_mode = settings.bind_mode
        log.info("scheduler configuration applied", **fields(
            enabled=self.enabled, bind_mode=settings.bind_mode, actions=",".join(self.plugins.config.actions),
            plugins=",".join(p.name for p in self.plugins.config.plugins),
            period_seconds=self.period, objects=self.objects.describe()))
        return True

    @staticmethod
    def _observe(record: Callable[..., object], *args: object) -> None:
        """Bookkeeping after the session (metrics, usage history): a failure is logged, and the cycle's
        decisions are still committed."""
        try:
            record(*args)
        except Exception:  # noqa: BLE001
            log.exception("cycle bookkeeping failed; the decisions are committed", **fields(step=record.__name__))

    def _observe_session(self, session: Session) -> None:
        if self.observer is not None:
            self._observe(self.observer, session)

    def _remember(self, summary: CycleSummary) -> None:
        self.recent = (*self.recent[1 - RECENT_CYCLES:], summary)

    def _cycle_failed(self, exc: Exception) -> float:
        """Log and count a failed cycle; the seconds to wait before the next attempt."""
        self.failures += 1
        delay = backoff(self.failures, self.period)
        if self.metrics is not None:
            self.metrics.cycle_failed()
        log.error("scheduling cycle failed", exc_info=exc,
                  **fields(failures_in_a_row=self.failures, retry_in_seconds=delay))
        return delay

    def _wait_synced(self, stop: threading.Event) -> bool:
        deadline = time.monotonic() + self.sync_timeout
        warn_at = time.monotonic() + 5.0
        while not stop.is_set():
            missing = self.cache.wait_synced(min(STOP_POLL, max(0.0, deadline - time.monotonic())))
            if not missing:
                return True
            if time.monotonic() >= warn_at:
                warn_at += 5.0
                log.warning("waiting for the first list", **fields(resources=",".join(missing)))
            if time.monotonic() > deadline:
                # A missing CRD must not keep the scheduler from running: go on with empty stores.
                log.error("resources not listed; scheduling without them", **fields(resources=",".join(missing)))
                return True
        return False

    def _wait_next(self, stop: threading.Event, started: float, decided: bool = False) -> None:
        ended = time.monotonic()
        self._wait_written(stop, ended + WRITES_WAIT)
        # A long cycle earns a pause as long (up to a period): a busy scheduler leaves half the CPU to
        # the API server and the binder, whose work its decisions just created.
        earliest = ended + min(ended - started, self.period)
        due = max(started + self.period, earliest)
        if decided:  # in a stream of arrivals: the next cycle takes a whole period's, as KAI's does
            earliest = due
        while not stop.is_set():
            remaining = due - time.monotonic()
            if remaining <= 0:
                return
            if self.cache.changed.wait(min(remaining, STOP_POLL)):
                now = time.monotonic()  # gather the burst of events a change usually brings
                stop.wait(min(due, max(now + self.debounce, earliest)) - now)
                return

    def _wait_written(self, stop: threading.Event, deadline: float) -> None:
        """Until the decisions' writes are done, ``stop`` is set or it is ``deadline``."""
        if not isinstance(self.committer, Committer):
            return
        while not stop.is_set() and not self.committer.wait_decided(min(STOP_POLL, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                return

    def run_once(self) -> Session:
        """One cycle: snapshot, session (open, actions, close), commit."""
        started = time.perf_counter()
        wall = time.time()
        self.cache.restrict_node_scheduling = self.plugins.config.restrict_node_scheduling
        self.cache.full_hierarchy_fairness = self.plugins.config.full_hierarchy_fairness
        cycle = self.cache.snapshot()
        if self.usage is not None:
            cycle.snapshot.usage = self.usage.usage(cycle.snapshot.now)
        snapshot_seconds = time.perf_counter() - started
        session = Session(cycle.snapshot, self.plugins)
        if self.metrics is None or self.probe is None:  # the probe comes with the metrics
            session.open()
            session.run_actions()
            self._observe_session(session)
            session.close()
        else:
            self._run_measured(session, self.metrics, self.probe, started)
        if self.usage is not None:
            self._observe(self.usage.record, session)
        self.committer.commit(session, cycle)
        self.cycles += 1
        if self.metrics is not None:
            self.metrics.cycle_ran(bool(session.decisions))
        kinds = Counter(d.kind for d in session.decisions)
        seconds = time.perf_counter() - started
        self._remember(CycleSummary(self.cycles, wall, seconds, len(session.jobs), len(session.nodes), kinds["bind"],
                                    kinds["pipeline"], kinds["evict"]))
        if session.decisions or log.isEnabledFor(logging.DEBUG):
            log.info("cycle", **fields(cycle=self.cycles, jobs=len(session.jobs), nodes=len(session.nodes),
                                       binds=kinds["bind"], evictions=kinds["evict"], pipelined=kinds["pipeline"],
                                       snapshot_ms=round(snapshot_seconds * 1000, 1),
                                       total_ms=round(seconds * 1000, 1)))
        return session

    def _run_measured(self, session: Session, metrics: SchedulerMetrics, probe: SessionProbe, started: float) -> None:
        """The session with KAI's metrics: the cycle, its session's open and close and each action timed, what
        each action did counted, then the fair shares, the plugins' times and the snapshot recorded."""
        with metrics.cycle(since=started):  # KAI's cycle and session open include the snapshot
            with metrics.open_session(since=started):
                session.open()
            for action in self.plugins.config.actions:
                before = len(session.decisions)
                probe.tried.clear()
                with metrics.action(action):
                    session.run_actions([action])
                self._observe(record_decisions, metrics, session, action, session.decisions[before:],
                              probe.tried, self.committer.node_pool)
            self._observe(_record_shares, metrics, session)
            self._observe_session(session)
            with metrics.close_session():
                session.close()
        self._observe(_record_session, metrics, session)


def _record_shares(metrics: SchedulerMetrics, session: Session) -> None:
    shares = fair_shares(session)
    display_names = {q.name: q.display_name for q in session.queues.values()}
    metrics.fair_shares(shares, display_names)
    metrics.queue_usages({q: session.snapshot.usage.get(q, (0.0, 0.0, 0.0)) for q in shares}, display_names)


def _record_session(metrics: SchedulerMetrics, session: Session) -> None:
    for (plugin, hook), seconds in session.plugin_seconds.items():
        metrics.plugin_seconds(plugin, ON_SESSION[hook], seconds)
    by_status = Counter({status.value: n for status, n in task_statuses(session).items()})
    metrics.snapshot(by_status, len(session.jobs), pending_jobs(session))
    metrics.scenario_search(session.scenario_search)
    for error in session.errors:
        metrics.contained_error(error.action)


def backoff(failures: int, period: float) -> float:
    """Seconds to wait after ``failures`` failed cycles in a row: a period, doubling with each failure, at
    most :data:`MAX_BACKOFF` (or the period, when that is longer)."""
    return min(period * 2.0 ** min(failures - 1, 32), max(MAX_BACKOFF, period))


def fair_shares(session: Session) -> dict[str, tuple[float, float, float]]:
    """Each queue's fair share (CPU millicores, memory bytes, GPUs) as the session's plugins divided it
    (``kai_queue_resources``); queues no plugin reports on are left out. Call before the session closes."""
    shares = {}
    for queue in session.queues.values():
        found = session.hook.kai_queue_resources(session=session, queue=queue)
        if found is not None:
            share = found[2]
            shares[queue.name] = (share.cpu, share.memory, share.gpu)
    return shares


def record_decisions(metrics: SchedulerMetrics, session: Session, action: str, decisions: Sequence[Decision],
                     tried: Collection[str] = (), node_pool: str = "") -> None:
    """Count what one action did: the jobs it tried through the job solver (``tried``, job uids), the
    PodGroups it placed (bind or pipeline; of an action that tried jobs, only those: the victims it moved
    are not scheduled by it; for ``preempt`` each is also a preemption attempt) and the pods it evicted per
    PodGroup (in ``node_pool``)."""
    placed = {d.task.job for d in decisions if d.kind in ("bind", "pipeline")}
    if tried:
        metrics.podgroup_acted_on(action, len(tried))
        placed &= set(tried)
    for _ in placed:
        metrics.podgroup_scheduled(action)
        if action == "preempt":
            metrics.preemption_attempt()
    for d in decisions:
        if d.kind == "evict":
            job = session.jobs.get(d.task.job)
            if job is not None:
                metrics.pods_evicted(job.name, job.namespace, job.uid, node_pool, action)
