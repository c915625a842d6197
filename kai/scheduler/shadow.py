"""Shadow mode (``kai-scheduler run --shadow``): the scheduler beside a running KAI, deciding but writing nothing.

:class:`ShadowCommitter` stands in for the :class:`~kai.scheduler.commit.Committer`: it carries out no decision
(no BindRequest, eviction, status, annotation or event) and assumes none in the cache, so every cycle sees the
cluster as KAI leaves it. It sets each cycle's decisions beside what KAI does with the same pods:

* a pod waiting in a cycle here gets this scheduler's latest verdict -- the node it would bind it to, or pending
  with the explanation here; when KAI places the pod (a BindRequest, or the pod bound) the two are compared:
  ``same node``, ``different node`` or ``bound by KAI only``; a pod this scheduler would bind that KAI leaves
  pending for ``settle`` seconds is ``bound here only`` (when KAI places it later, that is taken back out of the
  report -- not the metric -- and the pod compared, so a KAI slower than ``settle`` does not crowd the report);
* a pod this scheduler would evict is ``evicted by both`` when KAI deletes it within ``settle`` seconds, else
  ``evicted here only``; a running pod that starts to be deleted without an eviction here is
  ``deleted, not evicted here`` (KAI's eviction, or anyone's deletion).

Each outcome counts in ``shadow_decisions_total{outcome}``; the divergences (every outcome but ``same node``,
``evicted by both``) go to a rolling report of the last ``keep``, served as JSON (:meth:`ShadowCommitter.report`),
written to a file when one is given, and listed by the visibility API (:meth:`ShadowCommitter.entries`). Each
entry has both explanations where there is one: here, the dominant reason of a pod it would leave pending
(:mod:`kai.framework.reasons`) or the message of its eviction; KAI's, what KAI last wrote on the pod and its
PodGroup (:func:`kai_explanation`), read from the cluster. A dominant reason is worked out only when a
divergence or a request (:meth:`ShadowCommitter.about`) needs it, from the last cycle that left the pod
pending (:class:`Reasons`): a cycle keeps that of the cycle before, which the visibility API's view keeps anyway.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import attrs

from kai.api import Task, TaskStatus, names
from kai.framework import Session
from kai.framework.reasons import Explainer
from kai.kube.access import Access
from kai.kube.views import PodGroupView
from kai.metrics import Registry
from kai.scheduler import loop
from kai.scheduler.build import Cycle
from kai.scheduler.cache import ClusterCache
from kai.scheduler.views import PodView

#: The verbs shadow mode uses: it reads.
READ_VERBS = ("get", "list", "watch")
#: Shadow mode's API calls: the scheduler's reads, without the SchedulingShard and Config (not watched).
API_ACCESS = tuple(
    Access(a.group, a.resource, tuple(v for v in a.verbs if v in READ_VERBS)) for a in loop.API_ACCESS
    if "/" not in a.resource and a.resource not in (names.SCHEDULINGSHARDS[2], names.CONFIGS[2])
    and any(v in READ_VERBS for v in a.verbs))
#: Outcomes that are not divergences.
AGREED = ("same node", "evicted by both")
#: Seconds KAI is given to act on a pod before the verdict here counts as one KAI did not share.
SETTLE = 10.0
#: Divergences the rolling report keeps.
KEEP = 1000


@attrs.define
class Verdict:
    """This scheduler's latest decision about a pod: the node it would bind it to (None: pending), since when
    (``time.time()``) it has said so, the pod's PodGroup (name and uid), and the last cycle that left it pending;
    ``why`` it would not bind it (its job's dominant reason, as JSON) is worked out when asked for."""

    node: str | None
    since: float
    group: str
    job: str
    cycle: int
    why: dict[str, Any] | None = None
    reported: bool = False


class Reasons:
    """The dominant reasons (as JSON) of the jobs a cycle left pending, each worked out when first asked for, as
    the visibility API's view does: from what the session alone owns and each job's pending tasks, taken in the
    cycle (:meth:`wait`)."""

    def __init__(self, session: Session, cycle: int, node_pool: str) -> None:
        self.cycle, self.node_pool = cycle, node_pool
        self._nodes, self._jobs, self._errors = session.nodes, dict(session.jobs), session.job_fit_errors
        self._pending: dict[str, list[Task]] = {}
        self._explainer: Explainer | None = None
        self._found: dict[str, dict[str, Any]] = {}

    def wait(self, task: Task) -> None:
        """``task`` was left pending."""
        self._pending.setdefault(task.job, []).append(task)

    def of(self, job: str) -> dict[str, Any]:
        found = self._found.get(job)
        if found is None:
            if self._explainer is None:
                self._explainer = Explainer(self._nodes, self._jobs, self._errors, self.node_pool)
            found = self._explainer.reason(self._jobs[job], self._pending.get(job, ())).to_json()
            self._found[job] = found
        return found


def kai_explanation(pod: PodView, group: PodGroupView | None) -> dict[str, Any] | None:
    """What KAI last wrote about ``pod``: the message of its ``PodScheduled=False`` condition, and its PodGroup's
    latest scheduling condition (reason, message, node pool, KAI's unschedulable explanations, when) -- KAI's
    ``Unschedulable`` events on the two carry the same messages; None when it wrote neither."""
    condition = group.conditions[-1] if group is not None and group.conditions else None
    if pod.unschedulable_message is None and condition is None:
        return None
    return {"pod": pod.unschedulable_message,
            "podgroup": None if condition is None else {
                "reason": condition.get("reason"), "message": condition.get("message"),
                "node_pool": condition.get("nodePool"), "reasons": condition.get("reasons") or [],
                "time": condition.get("lastTransitionTime")}}


class ShadowCommitter:
    """Writes nothing; compares each cycle's decisions with KAI's (see the module docstring)."""

    node_pool = "default"

    def __init__(self, cache: ClusterCache, registry: Registry | None = None, report_file: str | None = None,
                 settle: float = SETTLE, keep: int = KEEP) -> None:
        self.cache, self.report_file, self.settle = cache, report_file, settle
        self.verdicts: dict[str, Verdict] = {}
        #: Pod key -> (since when, the message) of each eviction here KAI has not made yet.
        self.evictions: dict[str, tuple[float, str]] = {}
        #: Pod key -> PodGroup of the pods running in the last cycle.
        self.running: dict[str, str] = {}
        self.divergences: deque[dict[str, Any]] = deque(maxlen=keep)
        self.counts: dict[str, int] = {}
        self.cycles = 0
        #: The last cycle's reasons, which the verdicts of that cycle's pending pods are explained by.
        self._reasons: Reasons | None = None
        self._lock = threading.Lock()
        self._outcomes = registry.counter("shadow_decisions_total", "Decisions of shadow mode beside KAI's, by "
                                          "outcome", ("outcome",)) if registry is not None else None

    # --- the Committer's interface -----------------------------------------------------------------

    def commit(self, session: Session, cycle: Cycle) -> None:
        now = time.time()
        placed = self._kai_placements(cycle)
        pods = cycle.pods
        with self._lock:
            self.cycles += 1
            for key, verdict in list(self.verdicts.items()):
                pod = pods.get(key)
                if pod is None or pod.deleting:
                    del self.verdicts[key]
                elif key in placed:
                    del self.verdicts[key]
                    if verdict.reported:  # KAI placed it late: the verdict is compared, not left unshared
                        self._withdraw(key, "bound here only")
                    self._compare(key, verdict, placed[key], self._kai_why(cycle, pod), now)
                elif verdict.node is not None and not verdict.reported and now - verdict.since >= self.settle:
                    verdict.reported = True
                    self._outcome(now, key, verdict.group, "bound here only", verdict.node, None, None,
                                  self._kai_why(cycle, pod))
            binds = {d.task.uid: d.node for d in session.decisions if d.kind in ("bind", "pipeline")}
            reasons = Reasons(session, self.cycles, self.node_pool)
            for job in session.jobs.values():
                for task in job.tasks.values():
                    if task.uid in placed or task.uid not in binds and task.status is not TaskStatus.PENDING:
                        continue  # placed by KAI since the cycle was built, or not waiting in it
                    node = binds.get(task.uid)
                    if node is None:
                        reasons.wait(task)
                    old = self.verdicts.get(task.uid)
                    if old is None or old.node != node:
                        self.verdicts[task.uid] = Verdict(node, now, job.name, job.uid, self.cycles,
                                                          reported=self._still_reported(task.uid, old, node))
                    else:
                        old.cycle, old.why = self.cycles, None
            for verdict in self.verdicts.values():  # pending in the last cycle but not in this one
                self._why(verdict)
            self._reasons = reasons
            self._evictions(session, cycle, now)
        self._write()

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 0.0) -> bool:
        self._write()
        return True

    # --- comparing ---------------------------------------------------------------------------------

    def _kai_placements(self, cycle: Cycle) -> dict[str, str]:
        """Pod key -> node of every pod KAI placed: bound, or with a BindRequest that has not failed."""
        placed = {key: pod.node_name for key, pod in cycle.pods.items() if pod.node_name}
        for br in self.cache.informers["bindrequests"].list():
            key = f"{br.namespace}/{br.pod_name}"
            if not br.failed and key not in placed:
                placed[key] = br.node
        return placed

    def _why(self, verdict: Verdict) -> dict[str, Any] | None:
        """Why this scheduler would leave the verdict's pod pending, worked out from the last cycle's reasons
        while they are those of the last cycle that left it pending."""
        last = self._reasons
        if verdict.node is None and verdict.why is None and last is not None and verdict.cycle == last.cycle:
            verdict.why = last.of(verdict.job)
        return verdict.why

    def _kai_why(self, cycle: Cycle, pod: PodView) -> dict[str, Any] | None:
        return kai_explanation(pod, cycle.podgroups.get(f"{pod.namespace}/{pod.pod_group}"))

    def _compare(self, key: str, verdict: Verdict, kai_node: str, kai_why: dict[str, Any] | None,
                 now: float) -> None:
        if verdict.node == kai_node:
            self._outcome(now, key, verdict.group, "same node", verdict.node, kai_node, None, None)
        elif verdict.node is None:
            self._outcome(now, key, verdict.group, "bound by KAI only", None, kai_node, self._why(verdict), None)
        else:
            self._outcome(now, key, verdict.group, "different node", verdict.node, kai_node, None, kai_why)

    def _evictions(self, session: Session, cycle: Cycle, now: float) -> None:
        pods = cycle.pods
        gone = {key for key in self.running if key not in pods or pods[key].deleting or pods[key].terminated}
        for key in [k for k in self.evictions if k in gone]:
            del self.evictions[key]
            self._outcome(now, key, self.running[key], "evicted by both", None, None, None, None)
        for key in gone - set(self.evictions):
            if key in pods and pods[key].terminated and not pods[key].deleting:
                continue  # finished on its own
            self._outcome(now, key, self.running[key], "deleted, not evicted here", None, None, None, None)
        for key, (since, message) in list(self.evictions.items()):
            if now - since >= self.settle:
                del self.evictions[key]
                self._outcome(now, key, self.running.get(key, ""), "evicted here only", None, None,
                              {"message": message}, None)
        for d in session.decisions:
            if d.kind == "evict":
                self.evictions.setdefault(d.task.uid, (now, d.message))
        self.running = {key: pod.pod_group for key, pod in pods.items()
                        if pod.node_name and not pod.deleting and not pod.terminated}

    def _outcome(self, now: float, pod: str, group: str, outcome: str, here: str | None, kai: str | None,
                 why_here: dict[str, Any] | None, why_kai: dict[str, Any] | None) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self._outcomes is not None:
            self._outcomes.labels(outcome).inc()
        if outcome not in AGREED:
            self.divergences.append({"time": round(now, 3), "pod": pod, "podgroup": group, "outcome": outcome,
                                     "here": here, "kai": kai, "why_here": why_here, "why_kai": why_kai})

    def _still_reported(self, pod: str, old: Verdict | None, node: str | None) -> bool:
        """Whether a new verdict on ``pod`` (``node``) carries on the ``bound here only`` of the ``old`` one: it does
        while this scheduler would still bind the pod; one that would leave it pending takes it back."""
        if old is None or not old.reported:
            return False
        if node is None:
            self._withdraw(pod, "bound here only")
        return node is not None

    def _withdraw(self, pod: str, outcome: str) -> None:
        """Take ``pod``'s ``outcome`` back out of the report (the metric, a counter, keeps it)."""
        self.counts[outcome] -= 1
        if not self.counts[outcome]:
            del self.counts[outcome]
        kept = [d for d in self.divergences if d["pod"] != pod or d["outcome"] != outcome]
        self.divergences = deque(kept, maxlen=self.divergences.maxlen)

    # --- the report --------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """The rolling report: outcome counts, the pods awaiting KAI, and the latest divergences."""
        with self._lock:
            return {"cycles": self.cycles, "outcomes": dict(sorted(self.counts.items())),
                    "awaiting_kai": len(self.verdicts) + len(self.evictions),
                    "divergences": list(self.divergences)}

    def entries(self, offset: int, limit: int, outcome: str | None = None) -> dict[str, Any]:
        """The visibility API's page of the divergences (those of ``outcome`` only, when given), newest first,
        with the outcome counts."""
        with self._lock:
            rows = [d for d in reversed(self.divergences) if outcome is None or d["outcome"] == outcome]
            return {"outcomes": dict(sorted(self.counts.items())), "total": len(rows), "offset": offset,
                    "items": rows[offset:offset + limit]}

    def about(self, namespace: str, name: str) -> dict[str, Any]:
        """What shadow mode has to say about the pod or PodGroup ``namespace/name``: the verdicts here on its pods
        KAI has not placed yet, and their divergences in the rolling report."""
        def mine(pod: str, group: str) -> bool:
            return pod == f"{namespace}/{name}" or group == name and pod.startswith(f"{namespace}/")

        with self._lock:
            return {"awaiting_kai": [{"pod": key, "here": v.node, "why_here": self._why(v), "since": round(v.since, 3)}
                                     for key, v in self.verdicts.items() if mine(key, v.group)],
                    "divergences": [d for d in self.divergences if mine(d["pod"], d["podgroup"])]}

    def _write(self) -> None:
        if self.report_file is None:
            return
        path = Path(self.report_file)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.report(), indent=1))
        os.replace(tmp, path)

    def route(self) -> tuple[bytes, str, dict[str, str]]:
        """The report as served at ``/shadow-report``."""
        return json.dumps(self.report(), indent=1).encode(), "application/json", {}
