"""One dominant reason per pending job, machine-readable, and what would make the job run.

The reason's ``code`` is KAI's unschedulable reason of the job's PodGroup condition (``OverLimit``,
``NonPreemptibleOverQuota``, ``PodSchedulingErrors`` ...); ``details`` says what stands in the way:
``kind`` (``queue-limit``, ``queue-quota``, ``no-node-large-enough``, ``topology``,
``behind-higher-priority``, ``insufficient-resources``, ``not-considered``), the resource, how
much is missing, in which queue or node pool. ``would_run_if`` lists the changes that would admit the
job (:class:`Suggestion`), worked out from the same cycle; :mod:`kai.framework.whatif` checks them with
the kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from kai.api import UNLIMITED, Job, QueueDetails, Task, TaskStatus, names
from kai.framework.fiterrors import DEFAULT_FIT_ERROR_REASON, JobFitError, job_fit_message
from kai.framework.nodes import NodeInfo

#: The resources of KAI's (CPU millicores, memory bytes, GPUs) vectors, in their order.
RESOURCES = ("cpu", "memory", "gpu")
#: How many holders of resources a reason names at most.
MAX_NAMED = 5


@attrs.frozen
class Suggestion:
    """One change that would admit the job: its ``text``, the ``change`` as data (:mod:`kai.framework.whatif`;
    None when it is no single change), and ``verified``: whether the kernel placed the job on a copy of the
    cycle's snapshot with the change (None: not run; a text: why not)."""

    text: str
    change: dict[str, Any] | None = None
    verified: bool | str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "change": self.change, "verified": self.verified}


#: The message of a job the last cycle did not try.
NOT_CONSIDERED = "the scheduler did not try this job in the last cycle"


@attrs.frozen
class Reason:
    """Why a job is pending: KAI's reason ``code``, structured ``details`` (JSON-ready), ``would_run_if``, the
    changes that would admit it, and the job's fit ``errors``, whose :attr:`message` is KAI's, as in its event
    (worked out when asked for)."""

    code: str
    details: dict[str, Any]
    would_run_if: tuple[Suggestion, ...] = ()
    errors: tuple[JobFitError, ...] = ()

    @property
    def message(self) -> str:
        return job_fit_message(list(self.errors)) if self.errors else NOT_CONSIDERED

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details,
                "would_run_if": [w.to_json() for w in self.would_run_if]}


def pending_tasks(job: Job) -> tuple[Task, ...]:
    return tuple(t for t in job.tasks.values() if t.status is TaskStatus.PENDING)


def job_request(tasks: Iterable[Task]) -> tuple[float, float, float]:
    """What ``tasks`` ask for: (CPU millicores, memory bytes, GPUs)."""
    cpu = mem = gpu = 0.0
    for t in tasks:
        cpu += t.request.cpu
        mem += t.request.memory
        gpu += t.request.gpus_required
    return cpu, mem, gpu


def _amount(value: float) -> float:
    return round(value, 3)


class Explainer:
    """Dominant reasons of a cycle's pending jobs, from the cycle's ``nodes`` (the session's own copies),
    ``jobs`` and fit errors (``errors``, job uid -> its errors); node facts are gathered once."""

    def __init__(self, nodes: list[NodeInfo], jobs: dict[str, Job], errors: dict[str, list[JobFitError]],
                 node_pool: str = "default") -> None:
        self.jobs = jobs
        self.errors = errors
        self.nodes = nodes
        self.node_pool = node_pool
        self.largest_gpus = max((n.allocatable.gpu for n in nodes), default=0.0)
        largest = max(nodes, key=lambda n: n.idle_gpu_sum(), default=None)
        self.largest_free_node = largest.name if largest is not None else ""
        self.largest_free = largest.idle_gpu_sum() if largest is not None else 0.0
        self.free_gpus = sum(n.idle_gpu_sum() for n in nodes)
        self._holders: list[tuple[float, Job]] | None = None
        self._by_priority: dict[int, list[tuple[float, Job]]] = {}

    def reason(self, job: Job, pending: Sequence[Task]) -> Reason:
        """The dominant reason of ``job`` whose ``pending`` tasks were not placed."""
        errors = self.errors.get(job.uid, [])
        vetoes = [e for e in errors if e.details is not None]
        if vetoes:
            return self._queue_reason(job, vetoes[0], errors)
        request = job_request(pending)
        per_pod = max((t.request.gpus_required for t in pending), default=0.0)
        code = errors[0].reason if len(errors) == 1 else (DEFAULT_FIT_ERROR_REASON if errors else "NotConsidered")
        if not errors:
            return Reason(code, {"kind": "not-considered"},
                          (Suggestion("the next cycle reaches it (queue depth per action, or a newer job)"),))
        if per_pod > self.largest_gpus:
            return Reason(code, {
                "kind": "no-node-large-enough", "resource": "gpu", "requested_per_pod": _amount(per_pod),
                "largest_node": _amount(self.largest_gpus), "missing": _amount(per_pod - self.largest_gpus),
                "node_pool": self.node_pool},
                (Suggestion(f"a node with {per_pod:g} GPUs joins node pool {self.node_pool}",
                            {"add_node_gpus": per_pod}),
                 Suggestion(f"each pod asks for at most {self.largest_gpus:g} GPUs")), tuple(errors))
        topology = _topology(job, errors)
        if topology is not None:
            name, level = topology
            return Reason(code, {
                "kind": "topology", "topology": name, "required_level": level, "resource": "gpu",
                "requested": _amount(request[2]), "node_pool": self.node_pool},
                (Suggestion(f"the job's {level} requirement of topology {name} is made a preference",
                            {"relax_topology": True}),
                 Suggestion(f"one {level or 'domain'} of topology {name} has room for all the job's pods "
                            f"({request[2]:g} GPUs)")), tuple(errors))
        return self._resource_reason(job, code, errors, request, per_pod)

    def _queue_reason(self, job: Job, veto: JobFitError, errors: list[JobFitError]) -> Reason:
        d: QueueDetails = veto.details  # type: ignore[assignment]
        code = veto.reason
        over_limit = code == names.UNSCHEDULABLE_OVER_LIMIT
        bound = d.limits if over_limit else d.deserved
        held = d.allocated if over_limit else d.allocated_non_preemptible
        r = next((r for r in (2, 0, 1) if bound[r] != UNLIMITED and held[r] + d.job_requested[r] > bound[r] + 1e-9), 2)
        needed = held[r] + d.job_requested[r]
        missing = needed - bound[r]
        details = {"kind": "queue-limit" if over_limit else "queue-quota", "queue": d.name, "resource": RESOURCES[r],
                   "limit" if over_limit else "deserved": _amount(bound[r]), "allocated": _amount(held[r]),
                   "requested": _amount(d.job_requested[r]), "missing": _amount(missing)}
        what = "limit" if over_limit else "deserved quota"
        hints = [Suggestion(f"queue {d.name}'s {RESOURCES[r]} {what} is raised to {needed:g}",
                            {"queue": d.name, "resource": RESOURCES[r], "limit" if over_limit else "deserved": needed})]
        ending = self._queue_jobs_freeing(d.name, r, missing, non_preemptible_only=not over_limit)
        if ending:
            hints.append(Suggestion(f"job {' and '.join(ending)} in queue {d.name} ends (frees the {missing:g} GPUs "
                                    "missing)", {"end_jobs": ending}))
        if not over_limit:
            hints.append(Suggestion("the job is made preemptible", {"preemptible": True}))
        return Reason(code, details, tuple(hints), tuple(errors))

    def _resource_reason(self, job: Job, code: str, errors: list[JobFitError], request: tuple[float, float, float],
                         per_pod: float) -> Reason:
        gpus = request[2]
        missing = max(gpus - self.free_gpus, per_pod - self.largest_free, 0.0)
        details = {"kind": "insufficient-resources", "resource": "gpu", "requested": _amount(gpus),
                   "free": _amount(self.free_gpus), "largest_free": _amount(self.largest_free),
                   "largest_free_node": self.largest_free_node, "missing": _amount(missing),
                   "node_pool": self.node_pool}
        higher = self._higher(job.priority)
        hints = [Suggestion(f"{missing:g} more GPUs are free in node pool {self.node_pool}")] if missing > 0 else []
        if higher:
            details["kind"] = "behind-higher-priority"
            details["held_by"] = [{"job": f"{j.namespace}/{j.name}", "queue": j.queue, "priority": j.priority,
                                   "preemptible": j.preemptible} for _, j in higher]
            ending = self._freeing(higher, missing)
            if ending:
                hints.append(Suggestion(f"higher-priority job {' and '.join(ending)} ends (frees the {missing:g} GPUs "
                                        "missing)", {"end_jobs": ending}))
        elif missing > 0 and (ending := self._freeing(self._held(), missing)):
            hints.append(Suggestion(f"job {' and '.join(ending)} ends (frees the {missing:g} GPUs missing)",
                                    {"end_jobs": ending}))
        return Reason(code, details, tuple(hints), tuple(errors))

    def _higher(self, priority: int) -> list[tuple[float, Job]]:
        """The first :data:`MAX_NAMED` jobs of :meth:`_held` of a priority above ``priority``."""
        found = self._by_priority.get(priority)
        if found is None:
            found = self._by_priority[priority] = list(
                itertools.islice((p for p in self._held() if p[1].priority > priority), MAX_NAMED))
        return found

    def _held(self) -> list[tuple[float, Job]]:
        """(GPUs held, job) of the jobs holding GPUs on the nodes, most GPUs first."""
        if self._holders is None:
            held: dict[str, float] = {}
            for n in self.nodes:
                for t in n.tasks.values():
                    held[t.job] = held.get(t.job, 0.0) + t.request.gpus_required
            self._holders = sorted(((g, self.jobs[uid]) for uid, g in held.items() if g > 0 and uid in self.jobs),
                                   key=lambda p: (-p[0], p[1].name))
        return self._holders

    def _queue_jobs_freeing(self, queue: str, r: int, missing: float, non_preemptible_only: bool) -> list[str]:
        if r != 2:
            return []
        return self._freeing([p for p in self._held() if p[1].queue == queue
                              and not (non_preemptible_only and p[1].preemptible)], missing)

    @staticmethod
    def _freeing(held: list[tuple[float, Job]], missing: float) -> list[str]:
        """The fewest of the first :data:`MAX_NAMED` of ``held`` (largest first) that together hold ``missing``
        GPUs, or none."""
        names_, freed = [], 0.0
        for g, j in held[:MAX_NAMED]:
            names_.append(f"{j.namespace}/{j.name}")
            freed += g
            if freed >= missing - 1e-9:
                return names_
        return []


def _topology(job: Job, errors: list[JobFitError]) -> tuple[str, str | None] | None:
    """(topology, required level) when the job's topology constraint stood in the way."""
    constraints = [job.topology] + [s.topology for s in job.subgroups.values()] \
        + [p.topology for p in job.pod_sets.values()]
    c = next((c for c in constraints if c is not None and c.topology), None)
    if c is None or not any("topology" in m for e in errors for m in e.messages):
        return None
    return c.topology, c.required_level
