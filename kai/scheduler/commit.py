"""Carry out a session's decisions and explain the rest, on the API server.

:class:`Committer` turns one cycle's outcome into writes, on a bounded thread pool:

* ``bind`` -> a ``scheduling.run.ai/v1alpha2`` BindRequest named after the pod (KAI's shape,
  :mod:`kai.scheduler.writes`: owner reference to the pod, label ``selected-node``, received GPU
  type/count/portion, the allocations of the pod's ResourceClaims as ``resourceClaimAllocations``, its
  implicit claim for DRA-backed ``nvidia.com/gpu`` as ``extendedResourceClaimAllocation``), then event
  ``Scheduled``; the cache assumes the binding at once, so the next cycle does not place the pod
  again. An existing BindRequest of the same name (409) means the pod is already being bound.
  A pod that needs no bind-time work is bound here instead, in bind mode ``direct``
  (:mod:`kai.scheduler.bindmode`): ``pods/<name>/binding`` with the pod's UID and the binder's annotations,
  then event ``Scheduled``. A Binding refused with 409 (bound already, or another pod of that name) keeps the
  assumption until the watch shows the pod; one without an answer (lost connection, server error) reads the
  pod to learn whether it landed (for a few seconds while the API server does not answer); a pod gone (404)
  or a Binding refused otherwise drops the assumption (and gets event ``FailedBinding``), so a pod still
  pending is placed again. The API server binds a pod once.
* ``evict`` -> the pod is evicted through the Eviction API (UID precondition), so PodDisruptionBudgets
  hold; the PodGroup gets event ``Evict`` with KAI's message, or ``EvictionBlocked`` (Warning) naming the
  budget when the API server refuses (429; the session counted the budgets, so only a budget that changed
  since the snapshot refuses); ``pipeline`` -> event ``Pipelined`` on the pod.
* every job with pods still waiting: ``NotReady`` when it has fewer pods than its gang needs, else
  events ``Unschedulable`` on the PodGroup and on each waiting pod, the pod condition
  ``PodScheduled=False`` (unless ``markUnschedulable: false``) and the PodGroup scheduling condition
  ``UnschedulableOnNodePool`` (not while some of its pods run); jobs the snapshot rejected (unknown
  queue ...) likewise, with the problem as reason.
* every job whose scheduling raised in the session (contained there): event
  ``InternalSchedulingError`` (Warning) on the PodGroup, and the reason ``InternalSchedulingError``
  in its scheduling condition;
* problems of the cluster's objects are logged once; a pod on (or being bound to) a node that does
  not exist gets event ``NodeNotFound``, a node with a problem (over-committed, unreadable) an event
  with the problem's reason;
* last-start and stale timestamps as PodGroup annotations; stale BindRequests deleted.

Only the jobs the session changed, those with pods waiting as the snapshot built them and those with an
internal error are looked at (:mod:`kai.framework.asbuilt`): any other job has no pod to explain and its times
are its PodGroup's, so nothing to write. Explanations are written when they change, not every cycle. A failed
write is logged naming the object and is retried in a later cycle; an exception while handling one decision or
one job is logged and the others go on; nothing here raises into the scheduling loop.

Explanations and reports wait in a bounded queue: beyond ``REPORT_LIMIT`` queued, a new one is dropped, logged
(the first, then every thousandth) and counted, as client-go's event broadcaster drops events when its queue is full;
what a dropped explanation said is written again by a later cycle that still finds it true. Decisions are never dropped.

On stop (:meth:`Committer.close`) the explanations not yet started are dropped -- the next leader
writes them again -- and the decisions already submitted are finished, for at most a few seconds,
so a gang's BindRequests go out together. Those not started by then are dropped: the next leader
sees the gang's pods that have a BindRequest as Binding and places the rest (or, if they no longer
fit, evicts the stale gang). A write still running then may land after another leader has
started; it cannot decide twice: a BindRequest is named after its pod (a second one is a 409) and
an eviction carries the pod's UID.

Each write takes what it needs from the decision, the task and the job (the BindRequest's body, the
node, the message) when it is queued, in :meth:`Committer.commit`: the queued writes read none of the
session's objects, which the next cycle rewinds and takes again (:mod:`kai.scheduler.reuse`) while
they may still wait for their turn.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from kai.actions.allocate import not_ready_message
from kai.api import ACTIVE_ALLOCATED, Job, Task, TaskStatus, ZonePlacement, names
from kai.common.durations import format_duration
from kai.framework import Decision, Problem, Session
from kai.framework.asbuilt import JobsKey, changed_jobs, flagged_as_built
from kai.framework.faults import INTERNAL_ERROR_REASON
from kai.framework.reasons import Explainer, pending_tasks
from kai.framework.snapshot import NODE_NOT_FOUND
from kai.kube import dra
from kai.kube.client import STRATEGIC_MERGE_PATCH, ApiError, Kube, object_path
from kai.kube.events import NORMAL, WARNING, record_event
from kai.kube.views import JsonObject, PodGroupView, podgroup_view, reservation_annotation
from kai.logs import fields
from kai.metrics import SchedulerMetrics
from kai.scheduler.bindmode import DIRECT, binder_work
from kai.scheduler.build import Cycle
from kai.scheduler.cache import ClusterCache
from kai.scheduler.views import BindRequestView, PodView
from kai.scheduler.writes import (
    bind_request,
    binding,
    condition_reason,
    eviction,
    eviction_refusal,
    node_ref,
    pending_reason,
    pod_ref,
    podgroup_ref,
    rfc3339,
)

log = logging.getLogger(__name__)

#: How long a Binding without an answer is looked for on its pod before the pod may be placed again, seconds.
UNANSWERED_WAIT = 10.0
#: How many explanations and reports may wait to be written before new ones are dropped.
REPORT_LIMIT = 10_000

#: The snapshot memo of the jobs with pods waiting (pending or gated) as built (:mod:`kai.framework.asbuilt`).
WAITING_MEMO = JobsKey("commit-waiting")
DEFAULT_POD_MESSAGE = "Unable to schedule pod"


class Committer:
    """Writes on two bounded pools: decisions (BindRequests, Bindings, evictions, and the PodGroups' times that
    later cycles read: last start, staleness, last eviction, reservation) never wait behind explanations, and while
    some are queued or running the explanations and reports (events, conditions, the pending reason) go out one at
    a time, so the decisions get the API server's time first (as kube-scheduler's events trail its bindings)."""

    def __init__(self, kube: Kube, cache: ClusterCache, workers: int = 16,
                 metrics: SchedulerMetrics | None = None, bind_mode: str = DIRECT,
                 report_limit: int = REPORT_LIMIT) -> None:
        self.kube = kube
        self.cache = cache
        #: How placed pods are bound (:mod:`kai.scheduler.bindmode`); the loop sets it from its settings.
        self.bind_mode = bind_mode
        #: KAI's node pool of the cache's partition, named in events and scheduling conditions.
        self.node_pool = cache.partition.node_pool
        self.metrics = metrics
        self.decisions = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="commit-decision")
        self.status = ThreadPoolExecutor(max_workers=max(1, workers // 2), thread_name_prefix="commit-status")
        self._lock = threading.Lock()
        #: What was last written per (object, what), with the object's uid (a new object of the same name is
        #: written to): skips writing the same explanation again.
        self._written: dict[tuple[str, str], str] = {}
        self._in_flight: set[str] = set()
        self._logged_problems: set[str] = set()
        self._pending: set[Future[None]] = set()
        self.report_limit = report_limit
        #: Explanations and reports submitted and not finished.
        self._reports = 0
        #: Explanations and reports dropped because ``report_limit`` of them were waiting.
        self.dropped = 0
        #: Decision writes submitted and not finished; while there are some, other writes take turns on ``_trailing``.
        self._deciding = 0
        self._trailing = threading.Lock()
        self._none_deciding = threading.Condition(self._lock)
        #: The dominant reasons of the cycle being committed (worked out for the explanations written).
        self._explainer: Explainer | None = None

    def flush(self, timeout: float | None = None) -> bool:
        """Waits for every write submitted so far, and for those they submit in turn (the event after a
        BindRequest); False if some are still running after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = {f for f in self._pending if not f.done()}
            if not pending:
                return True
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if wait(pending, left).not_done:
                return False

    def wait_decided(self, timeout: float) -> bool:
        """Waits, at most ``timeout`` seconds, until no decision write is queued or running; whether none is."""
        with self._none_deciding:
            return self._none_deciding.wait_for(lambda: self._deciding == 0, timeout)

    def close(self, timeout: float = 3.0) -> bool:
        """Stops writing (see the module docstring): finishes the decisions submitted, within ``timeout``
        seconds, and drops the explanations queued. False if some decisions were dropped or still run."""
        self.status.shutdown(wait=False, cancel_futures=True)
        self.decisions.shutdown(wait=False)  # what is queued still runs, nothing new is taken
        finished = self.flush(timeout)
        if not finished:
            with self._lock:
                left = len(self._pending)
            self.decisions.shutdown(wait=False, cancel_futures=True)
            log.warning("stopped with writes unfinished; the next leader redoes what is missing",
                        **fields(writes=left, timeout_seconds=timeout))
        return finished

    # --- plumbing -----------------------------------------------------------------------------------

    def _submit(self, what: str, obj: str, fn: Callable[[], object], on_error: Callable[[ApiError], bool] | None = None,
                dedupe: tuple[tuple[str, str], str] | None = None, decision: bool = False) -> bool:
        """Run ``fn`` on a pool; an ApiError is logged (unless ``on_error`` handles it) and forgets ``dedupe``.

        Returns False when ``dedupe`` says the same was written already.
        """
        with self._lock:
            if dedupe is not None:
                key, value = dedupe
                if self._written.get(key) == value:
                    return False
            if not decision and self._reports >= self.report_limit:
                self.dropped += 1
                dropped = self.dropped
            else:
                dropped = 0
                self._reports += not decision
                if dedupe is not None:
                    self._written[key] = value
        if dropped:
            if dropped == 1 or dropped % 1000 == 0:
                log.warning("report dropped", **fields(write=what, object=obj, dropped=dropped,
                                                       reason=f"{self.report_limit} reports waiting"))
            return False

        def run() -> None:
            try:
                fn()
            except ApiError as exc:
                if on_error is not None and on_error(exc):
                    return
                log.warning("%s failed", what, **fields(object=obj, error=str(exc)))
                if dedupe is not None:
                    with self._lock:
                        if self._written.get(dedupe[0]) == dedupe[1]:
                            del self._written[dedupe[0]]
            except Exception:  # noqa: BLE001 - a bug in one write must not stop the others
                log.exception("%s failed", what, **fields(object=obj))

        def trail() -> None:
            with self._lock:
                deciding = self._deciding > 0
            if not deciding:
                run()
                return
            with self._trailing:
                run()

        with self._lock:
            self._deciding += decision
        try:
            future = self.decisions.submit(run) if decision else self.status.submit(trail)
        except RuntimeError:  # closed: an event following a decision written while stopping is dropped
            with self._lock:
                self._deciding -= decision
                self._reports -= not decision
                self._none_deciding.notify_all()
            return False
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._decided if decision else self._finished)
        return True

    def _written_already(self, dedupe: tuple[tuple[str, str], str]) -> bool:
        key, value = dedupe
        with self._lock:
            return self._written.get(key) == value

    def _finished(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)
            self._reports -= 1

    def _decided(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)
            self._deciding -= 1
            if not self._deciding:
                self._none_deciding.notify_all()

    def _event(self, ref: JsonObject, event_type: str, reason: str, message: str, once: bool = True,
               note: Callable[[], str] | None = None) -> bool:
        """An event about ``ref``, unless (``once``) the last one of this reason said the same; ``note`` gives its
        ``kai.scheduler/pending-reason`` annotation (asked only when the event is written)."""
        meta = ref["metadata"]
        obj = f"{ref['kind']} {meta['namespace']}/{meta['name']}" if meta.get("namespace") else \
            f"{ref['kind']} {meta['name']}"
        dedupe = ((obj, f"event {reason}"), f"{meta.get('uid', '')} {message}") if once else None
        if dedupe is not None and self._written_already(dedupe):
            return False
        annotations = {names.PENDING_REASON_ANNOTATION: note()} if note is not None else None
        return self._submit(f"event {reason}", obj,
                            lambda: record_event(self.kube, ref, event_type, reason, message, names.SOURCE_SCHEDULER,
                                                 annotations),
                            dedupe=dedupe)

    # --- one cycle ----------------------------------------------------------------------------------

    def commit(self, session: Session, cycle: Cycle) -> None:
        for br in cycle.stale_bind_requests:
            self._delete_bind_request(br)
        for decision in session.decisions:
            try:
                self._decision(session, cycle, decision)
            except Exception:  # noqa: BLE001 - one bad decision must not keep the others from the cluster
                log.exception("decision failed", **fields(pod=decision.task.uid, decision=decision.kind))
        self._log_problems(cycle)
        self._forget_gone(cycle)
        rejected = {p.name: p for p in cycle.snapshot.problems if p.kind == "job"}
        internal: dict[str, list[str]] = {}
        for error in session.errors:
            if error.job is not None:
                internal.setdefault(error.job, []).append(error.fit_error())
        touched = changed_jobs(session)
        waiting = flagged_as_built(session, WAITING_MEMO, _has_waiting, touched)
        self._explainer = None
        # the others are as built: no pod waits and their times are their PodGroups', so there is nothing to write
        for uid in session.snapshot.in_order(touched | waiting | internal.keys()):
            job = session.jobs[uid]
            pg = cycle.podgroups.get(uid)
            if pg is None:
                continue
            try:
                for message in internal.get(job.uid, ()):
                    self._event(podgroup_ref(pg), WARNING, INTERNAL_ERROR_REASON,
                                f"{message} (the scheduler's log has the details)")
                self._annotate(job, pg)
                self._runtime_limit(session, job, pg)
                self._explain(session, job, pg, cycle)
            except Exception:  # noqa: BLE001 - one job's explanation must not keep the others'
                log.exception("explaining a podgroup failed", **fields(podgroup=job.uid))
        self._explainer = None
        for job in cycle.snapshot.rejected_jobs.values():
            pg = cycle.podgroups.get(job.uid)
            problem = rejected.get(job.name)
            if pg is not None and problem is not None:
                self._explain_rejected(job, pg, problem.reason, problem.message, cycle)

    def _decision(self, session: Session, cycle: Cycle, decision: Decision) -> None:
        pod = cycle.pods.get(decision.task.uid)
        if pod is None:
            log.error("decision for an unknown pod", **fields(pod=decision.task.uid, decision=decision.kind))
        elif decision.kind == "bind" and decision.node is not None:  # a bind always names its node
            self._bind(pod, decision.task, decision.node, decision.gpu_groups, session, decision.numa_zones)
        elif decision.kind == "evict":
            self._evict(pod, decision.task, decision.message, cycle)
        elif decision.kind == "pipeline":
            log.info("pipelined", **fields(pod=pod.key, node=decision.node))
            self._event(pod_ref(pod), NORMAL, names.REASON_PIPELINED,
                        f"Pod {pod.namespace}/{pod.name} was pipelined to node {decision.node}")

    # --- decisions ----------------------------------------------------------------------------------

    def _bind(self, pod: PodView, task: Task, node: str, gpu_groups: tuple[str, ...], session: Session,
              numa_zones: tuple[ZonePlacement, ...] = ()) -> None:
        info = session.node_by_name.get(node)
        labels = self.cache.partition.labels
        gpu_memory_mib = info.node.gpu_memory_mib if info is not None else 0
        direct = self.bind_mode == DIRECT and binder_work(pod, task, gpu_groups) is None
        if direct:
            path = object_path("", "v1", "pods", pod.namespace, pod.name, "binding")
            body = binding(pod, task, node, gpu_memory_mib, numa_zones)
        else:
            path = object_path(*names.BINDREQUESTS, pod.namespace)
            body = bind_request(pod, task, node, gpu_groups, gpu_memory_mib, numa_zones, labels)
        relabel = {k: v for k, v in labels.items() if pod.labels.get(k) != v}
        self.cache.assume_bound(pod, node, gpu_groups, numa_zones, task.claim_allocations, task.extended_claim)
        log.info("bind", **fields(pod=pod.key, node=node, podgroup=task.job, direct=direct))
        if self.metrics is not None:
            self.metrics.task_scheduled(session.now - pod.created)

        def create() -> None:
            if self.metrics is not None:
                with self.metrics.bind_request():
                    self.kube.post(path, body)
            else:
                self.kube.post(path, body)
            self.cache.confirm(pod)
            if relabel:
                self._label(pod, relabel)
            self._event(pod_ref(pod), NORMAL, names.REASON_SCHEDULED,
                        f"Successfully assigned pod {pod.namespace}/{pod.name} "
                        f"to node {node} at node-pool {self.node_pool}", once=False)

        def failed(exc: ApiError) -> bool:
            if exc.status == 409:  # a BindRequest exists, or the pod is bound already or was replaced: the watch
                log.info("pod being bound or bound already", **fields(pod=pod.key, node=node, error=str(exc)))
                self.cache.confirm(pod)  # shows where; meanwhile it is not placed again
                return True
            if direct and (exc.status == 0 or exc.status >= 500) and self._landed(pod):
                self.cache.confirm(pod)
                return True
            self.cache.forget(pod)  # the watch alone tells where the pod is; if pending still, it is placed again
            if direct and exc.status == 404:  # the pod is gone
                return True
            message = f"Failed to bind pod {pod.namespace}/{pod.name} to node {node}. {exc}"
            log.warning("bind failed", **fields(pod=pod.key, node=node, error=str(exc)))
            self._event(pod_ref(pod), WARNING, names.REASON_FAILED_BINDING, message, once=False)
            return True

        self._submit("bind", pod.key, create, on_error=failed, decision=True)

    def _landed(self, pod: PodView) -> bool:
        """Whether ``pod``, whose Binding got no answer (a lost connection, a server error), is bound: read from
        the API server, again while it does not answer, for at most :data:`UNANSWERED_WAIT` seconds; False when
        the pod is gone, has no node, or cannot be read by then (the watch tells, and a second Binding of a pod
        bound meanwhile is refused)."""
        deadline, delay = time.monotonic() + UNANSWERED_WAIT, 0.5
        while True:
            try:
                current = self.kube.get(object_path(*names.PODS, pod.namespace, pod.name))
            except ApiError as exc:
                if exc.status == 404 or time.monotonic() + delay > deadline:
                    return False
                time.sleep(delay)
                delay = min(2 * delay, 2.0)
                continue
            return bool((current.get("spec") or {}).get("nodeName"))

    def _label(self, pod: PodView, labels: dict[str, str]) -> None:
        """The pod bound joins the partition that bound it (KAI's ``nodePoolLabelsChange``); a failure is logged."""
        try:
            self.kube.patch(object_path(*names.PODS, pod.namespace, pod.name), {"metadata": {"labels": labels}})
        except ApiError as exc:
            log.warning("cannot label the pod with its node pool", **fields(pod=pod.key, error=str(exc)))

    def _evict(self, pod: PodView, task: Task, message: str, cycle: Cycle) -> None:
        self.cache.assume_evicted(pod)
        log.info("evict", **fields(pod=pod.key, node=task.node, podgroup=task.job, reason=message))
        pg = cycle.podgroups.get(task.job)

        def evict() -> None:
            path = object_path(*names.PODS, pod.namespace, pod.name, subresource="eviction")
            self.kube.post(path, eviction(pod))
            self.cache.confirm(pod)
            if pg is not None:
                self._event(podgroup_ref(pg), NORMAL, names.REASON_EVICT, message, once=False)

        def failed(exc: ApiError) -> bool:
            if exc.status in (404, 409):  # gone already, or replaced by another pod of the same name
                return True
            self.cache.forget(pod)
            if exc.status != 429:
                return False
            refusal = eviction_refusal(exc.body)
            log.info("eviction refused", **fields(pod=pod.key, reason=refusal))
            if pg is not None:
                self._event(podgroup_ref(pg), WARNING, names.REASON_EVICTION_BLOCKED,
                            f"Eviction of pod {pod.namespace}/{pod.name} was refused: {refusal}", once=False)
            return True

        self._submit("evict", pod.key, evict, on_error=failed, decision=True)

    def _delete_bind_request(self, br: BindRequestView) -> None:
        with self._lock:
            if br.key in self._in_flight:
                return
            self._in_flight.add(br.key)
        log.info("deleting stale BindRequest", **fields(bindrequest=br.key, node=br.node, phase=br.phase or None))

        def delete() -> None:
            try:
                self.kube.delete(object_path(*names.BINDREQUESTS, br.namespace, br.name))
            except ApiError as exc:
                if exc.status != 404:
                    raise
            finally:
                with self._lock:
                    self._in_flight.discard(br.key)

        self._submit("delete BindRequest", br.key, delete, decision=True)

    # --- explanations -------------------------------------------------------------------------------

    def _log_problems(self, cycle: Cycle) -> None:
        """Log each problem when it appears; report a node's problems and a pod's missing node as events."""
        current = {str(p) for p in cycle.snapshot.problems}
        for problem in cycle.snapshot.problems:
            if str(problem) not in self._logged_problems:
                log.warning(problem.message, **fields(kind=problem.kind, object=problem.name, reason=problem.reason))
            self._problem_event(problem, cycle)
        self._logged_problems = current

    def _problem_event(self, problem: Problem, cycle: Cycle) -> None:
        if problem.kind == "node":
            self._event(node_ref(problem.name), WARNING, problem.reason, f"Node {problem.name}: {problem.message}")
        elif problem.reason == NODE_NOT_FOUND and (pod := cycle.pods.get(problem.name)) is not None:
            self._event(pod_ref(pod), WARNING, problem.reason, problem.message)
        elif problem.kind == "job" and (pg := cycle.podgroups.get(problem.name)) is not None:
            self._event(podgroup_ref(pg), WARNING, problem.reason, problem.message)
        elif problem.kind in dra.KINDS:
            self._event(dra.object_ref(problem.kind, problem.name), WARNING, problem.reason, problem.message)

    def _forget_gone(self, cycle: Cycle) -> None:
        """Drops what was written about objects that no longer exist (the record would only grow)."""
        nodes = [p.name for p in cycle.snapshot.problems if p.kind == "node"]
        with self._lock:  # a record no larger than the objects there are needs no look (the usual case)
            if len(self._written) <= len(cycle.pods) + len(cycle.podgroups) + len(nodes):
                return
        present = {f"Pod {k}" for k in cycle.pods} | {f"PodGroup {k}" for k in cycle.podgroups} | {
            f"Node {name}" for name in nodes}
        with self._lock:
            if len(self._written) > len(present):
                self._written = {k: v for k, v in self._written.items() if k[0] in present}

    def _annotate(self, job: Job, pg: PodGroupView) -> None:
        patch: dict[str, str | None] = {}
        if _changed(job.last_start, pg.last_start):
            patch[names.LAST_START_ANNOTATION] = None if job.last_start is None else rfc3339(job.last_start)
        if _changed(job.stale_since, pg.stale_since):
            patch[names.STALE_ANNOTATION] = None if job.stale_since is None else rfc3339(job.stale_since)
        if job.last_eviction is not None and _changed(job.last_eviction, pg.last_eviction):
            patch[names.LAST_EVICTION_ANNOTATION] = rfc3339(job.last_eviction)
        if pg.pending_reason and not _has_waiting(job):  # placed: no longer pending
            patch[names.PENDING_REASON_ANNOTATION] = None
            with self._lock:  # pending again later: written again
                self._written.pop((f"PodGroup {pg.key}", "pending reason"), None)
        if _reservation_changed(job, pg):
            held = job.reservation
            patch[names.RESERVATION_ANNOTATION] = None if held is None else reservation_annotation(held)
            ref = podgroup_ref(pg)
            if held is not None and held.nodes and (pg.reservation is None or pg.reservation.nodes != held.nodes):
                self._event(ref, NORMAL, names.REASON_NODES_RESERVED,
                            f"Reserved nodes {', '.join(held.nodes)} until {rfc3339(held.until)}")
            elif held is None and pg.reservation is not None:
                self._event(ref, NORMAL, names.REASON_RESERVATION_RELEASED,
                            f"Released the reservation of nodes {', '.join(pg.reservation.nodes)}")
        if patch:
            path = object_path(*names.PODGROUPS, pg.namespace, pg.name)
            body = {"metadata": {"annotations": patch}}

            def write() -> None:  # the next cycles read the records as written, before the watch shows them
                self.cache.annotated(podgroup_view(self.kube.patch(path, body)))

            self._submit("annotate PodGroup", pg.key, write,
                         dedupe=((f"PodGroup {pg.key}", "annotations"), f"{pg.uid} {sorted(patch.items())!r}"),
                         decision=True)  # the times the next cycles read (minimum and maximum runtime): not behind

    def _runtime_limit(self, session: Session, job: Job, pg: PodGroupView) -> None:
        """An event and the PodGroup's condition when the job's pods were evicted at its maximum runtime."""
        end = job.runtime_end()
        if end is None or end > session.now or not any(t.uid in session.evicted for t in job.tasks.values()):
            return
        limit = format_duration(job.max_runtime or 0.0)
        message = f"Workload exceeded its maximum runtime ({limit}); its pods are evicted"
        self._event(podgroup_ref(pg), WARNING, names.REASON_RUNTIME_LIMIT_EXCEEDED, message)
        previous = [c for c in pg.conditions if c.get("nodePool") != self.node_pool]
        condition = {"type": names.REASON_RUNTIME_LIMIT_EXCEEDED, "nodePool": self.node_pool,
                     "reason": names.REASON_RUNTIME_LIMIT_EXCEEDED, "message": message, "status": "True",
                     "reasons": [{"reason": names.REASON_RUNTIME_LIMIT_EXCEEDED, "message": message}],
                     "transitionID": str(_transition(pg)), "lastTransitionTime": rfc3339(time.time())}
        path = object_path(*names.PODGROUPS, pg.namespace, pg.name)
        self._submit("PodGroup condition", pg.key,
                     lambda: self.kube.patch(path, {"status": {"schedulingConditions": [*previous, condition]}},
                                             subresource="status"),
                     dedupe=((f"PodGroup {pg.key}", "condition"), f"{pg.uid} {message} {end}"))

    def _explain(self, session: Session, job: Job, pg: PodGroupView, cycle: Cycle) -> None:
        """Explain a job with pods still waiting: events, pod conditions and the PodGroup's condition."""
        waiting = [t for t in job.tasks.values() if t.status in (TaskStatus.PENDING, TaskStatus.GATED)]
        if not waiting:
            return
        if not job.is_ready():
            self._event(podgroup_ref(pg), NORMAL, names.REASON_NOT_READY, not_ready_message(job))
            return
        errors = session.job_fit_errors.get(job.uid, [])
        job_message = session.job_fit_message(job)
        note = functools.cache(lambda: self._pending_reason(session, job))
        for task in waiting:
            if task.status is not TaskStatus.PENDING:
                continue
            message = session.task_fit_errors.get(task.uid) or (job_message if errors else DEFAULT_POD_MESSAGE)
            self._pod_unschedulable(cycle.pods[task.uid], message, pg.mark_unschedulable, note)
        reasons = [condition_reason(*explanation) for explanation in dict.fromkeys(e.explanation() for e in errors)]
        self._podgroup_unschedulable(job, pg, job_message, reasons, note)

    def _pending_reason(self, session: Session, job: Job) -> str:
        """The job's dominant reason as annotation ``kai.scheduler/pending-reason`` carries it: the visibility API's
        (:class:`~kai.framework.reasons.Explainer` on the same session), worked out only for what is written."""
        if self._explainer is None:
            self._explainer = Explainer(session.nodes, session.jobs, session.job_fit_errors, self.node_pool)
        return pending_reason(self._explainer.reason(job, pending_tasks(job)))

    def _explain_rejected(self, job: Job, pg: PodGroupView, reason: str, message: str, cycle: Cycle) -> None:
        for task in job.tasks.values():
            if task.status is TaskStatus.PENDING:
                self._pod_unschedulable(cycle.pods[task.uid], message, pg.mark_unschedulable)
        self._podgroup_unschedulable(job, pg, message, [{"reason": reason, "message": message}])

    def _pod_unschedulable(self, pod: PodView, message: str, mark: bool, note: Callable[[], str] | None = None) -> None:
        if self._event(pod_ref(pod), WARNING, names.REASON_UNSCHEDULABLE, message, note=note) and pod.invalid:
            log.warning("pod cannot be scheduled as defined", **fields(pod=pod.key, reason=pod.invalid))
        if mark and pod.unschedulable_message != message:
            condition = {"type": "PodScheduled", "status": "False", "reason": names.REASON_UNSCHEDULABLE,
                         "message": message, "lastTransitionTime": rfc3339(time.time())}
            path = object_path("", "v1", "pods", pod.namespace, pod.name, "status")
            self._submit(
                "pod condition", pod.key,
                lambda: self.kube.request("PATCH", path, body={"status": {"conditions": [condition]}},
                                          content_type=STRATEGIC_MERGE_PATCH),
                on_error=lambda exc: exc.status == 404,
                dedupe=((f"Pod {pod.key}", "condition"), f"{pod.uid} {message}"))

    def _podgroup_unschedulable(self, job: Job, pg: PodGroupView, message: str, reasons: list[JsonObject],
                                note: Callable[[], str] | None = None) -> None:
        self._event(podgroup_ref(pg), NORMAL, names.REASON_UNSCHEDULABLE, message, note=note)
        if any(t.status in ACTIVE_ALLOCATED for t in job.tasks.values()):
            return  # as KAI: the condition is not updated while some of the group's pods are placed
        last = pg.conditions[-1] if pg.conditions else {}
        wanted = {"type": names.UNSCHEDULABLE_ON_NODE_POOL, "nodePool": self.node_pool,
                  "reason": names.REASON_UNSCHEDULABLE, "message": message, "status": "True"}
        written = all(last.get(k) == v for k, v in wanted.items())
        if note is not None and not (written and pg.pending_reason):
            self._note_reason(pg, message, note)
        if written:
            return
        previous = [c for c in pg.conditions if c.get("nodePool") != self.node_pool]
        condition = {**wanted, "reasons": reasons, "transitionID": str(_transition(pg)),
                     "lastTransitionTime": rfc3339(time.time())}
        path = object_path(*names.PODGROUPS, pg.namespace, pg.name)
        self._submit("PodGroup condition", pg.key,
                     lambda: self.kube.patch(path, {"status": {"schedulingConditions": [*previous, condition]}},
                                             subresource="status"),
                     dedupe=((f"PodGroup {pg.key}", "condition"), f"{pg.uid} {message}"))

    def _note_reason(self, pg: PodGroupView, message: str, note: Callable[[], str]) -> None:
        """The PodGroup's ``kai.scheduler/pending-reason`` annotation, written with its scheduling condition (the
        condition's schema has no room for it, and a write of the status subresource changes no annotation)."""
        dedupe = ((f"PodGroup {pg.key}", "pending reason"), f"{pg.uid} {message}")
        if self._written_already(dedupe):
            return
        path = object_path(*names.PODGROUPS, pg.namespace, pg.name)
        body = {"metadata": {"annotations": {names.PENDING_REASON_ANNOTATION: note()}}}
        self._submit("annotate PodGroup", pg.key, lambda: self.kube.patch(path, body), dedupe=dedupe)


def _transition(pg: PodGroupView) -> int:
    """The transition id of the PodGroup's next condition: one more than its last one's."""
    last = pg.conditions[-1] if pg.conditions else {}
    try:
        return int(last.get("transitionID", -1)) + 1
    except (TypeError, ValueError):
        return 0


def _reservation_changed(job: Job, pg: PodGroupView) -> bool:
    """Whether the job's reservation differs from its PodGroup's annotation (its expected start by a minute)."""
    new, old = job.reservation, pg.reservation
    if new is None or old is None:
        return new is not old
    if new.nodes != old.nodes or _changed(new.since, old.since) or _changed(new.until, old.until):
        return True
    if new.start is None or old.start is None:
        return new.start is not old.start
    return abs(new.start - old.start) >= 60.0


def _has_waiting(job: Job) -> bool:
    return any(t.status in (TaskStatus.PENDING, TaskStatus.GATED) for t in job.tasks.values())


def _changed(new: float | None, old: float | None) -> bool:
    if new is None or old is None:
        return new is not old
    return abs(new - old) >= 1.0  # the annotation keeps whole seconds
