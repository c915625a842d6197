"""``minruntime``: a job that started recently is protected from preemption and reclaim.

A victim job is protected while ``last_start + min runtime`` is still ahead of the session's
clock. The min runtime comes from the queue tree:

* preempt: the victim's leaf queue's ``preempt_min_runtime``, else the nearest ancestor's, else
  the plugin's ``defaultPreemptMinRuntime``;
* reclaim, ``reclaimResolveMethod: lca`` (default): from the reclaimer's and victim's lowest
  common ancestor, one step down towards the victim, then up to the root, the first
  ``reclaim_min_runtime`` set (victim in another top-level tree: its top-level queue's value),
  else ``defaultReclaimMinRuntime``; ``queue``: like preempt, with ``reclaim_min_runtime``.

Non-elastic protected victims are vetoed outright (:func:`kai_victim_filter`). Elastic ones pass
the filter and a scenario is vetoed only when it takes a protected job's pod set below its
``min_available`` (:func:`kai_scenario_validator`).
"""

from __future__ import annotations

from collections import Counter

from kai.sdk import ACTIVE_USED, Reject, format_duration, hookimpl, parse_duration

PREEMPT, RECLAIM = "preempt", "reclaim"
METHODS = ("lca", "queue")


class MinRuntime:
    name = "minruntime"

    def __init__(self, default_preempt: float = 0.0, default_reclaim: float = 0.0, method: str = "lca"):
        self.default_preempt = default_preempt
        self.default_reclaim = default_reclaim
        self.method = method
        self.runtimes: dict[tuple, float] = {}

    @hookimpl
    def kai_session_open(self, session):
        self.runtimes = {}

    @hookimpl
    def kai_session_close(self, session):
        self.runtimes = {}

    @hookimpl
    def kai_victim_filter(self, session, action, preemptor, victim):
        if action not in (PREEMPT, RECLAIM) or is_elastic(victim):
            return None
        left = self.protected_for(session, action, preemptor, victim)
        if left <= 0:
            return None
        runtime = self.min_runtime(session, action, preemptor, victim)
        return Reject(self.name, f"job {victim.name} is protected from {action} for {format_duration(left)} more "
                                 f"(minimum runtime {format_duration(runtime)})")

    @hookimpl
    def kai_scenario_validator(self, session, action, scenario):
        if action not in (PREEMPT, RECLAIM):
            return None
        lost: dict[str, Counter] = {}
        for task in scenario.victims:
            lost.setdefault(task.job, Counter())[task.pod_set] += 1
        for job_uid, per_pod_set in lost.items():
            job = session.jobs.get(job_uid)
            if job is None or not is_elastic(job):
                continue
            if self.protected_for(session, action, scenario.preemptor, job) <= 0:
                continue
            for name, count in per_pod_set.items():
                pod_set = job.pod_sets.get(name)
                active = job.count(name, ACTIVE_USED)
                if pod_set is not None and pod_set.min_available > active - count:
                    return Reject(self.name, (
                        f"job {job.name} is within its minimum runtime: {action} may only take pods above "
                        f"min_available ({pod_set.min_available}) of pod set {name}, not {count} of {active}"))
        return None

    def protected_for(self, session, action, preemptor, victim) -> float:
        """Seconds ``victim`` stays protected from ``preemptor`` in ``action`` (0 or less: not protected)."""
        if victim.last_start is None:
            return 0.0
        return victim.last_start + self.min_runtime(session, action, preemptor, victim) - session.now

    def min_runtime(self, session, action, preemptor, victim) -> float:
        """The min runtime that applies to ``victim`` (seconds), resolved once per queue pair and session."""
        if action == PREEMPT:
            key: tuple[str, ...] = (PREEMPT, victim.queue)
        else:
            key = (RECLAIM, preemptor.queue, victim.queue)
        value = self.runtimes.get(key)
        if value is None:
            value = self.runtimes[key] = self._resolve(session, action, preemptor.queue, victim.queue)
        return value

    def _resolve(self, session, action, preemptor_queue: str, victim_queue: str) -> float:
        victim_path = [q for q in reversed(session.ancestors(victim_queue))]  # root first
        if action == PREEMPT:
            return _first_set(reversed(victim_path), "preempt_min_runtime", self.default_preempt)
        if self.method == "queue" or not victim_path:
            return _first_set(reversed(victim_path), "reclaim_min_runtime", self.default_reclaim)
        preemptor_path = [q.name for q in reversed(session.ancestors(preemptor_queue))]
        if not preemptor_path:
            return self.default_reclaim
        if preemptor_path[0] != victim_path[0].name:
            # Different top-level trees: siblings under an implicit root, the victim's top-level queue decides.
            return _first_set(victim_path[:1], "reclaim_min_runtime", self.default_reclaim)
        lca = 0
        while lca + 1 < min(len(preemptor_path), len(victim_path)) and \
                preemptor_path[lca + 1] == victim_path[lca + 1].name:
            lca += 1
        start = min(lca + 1, len(victim_path) - 1)
        return _first_set(reversed(victim_path[:start + 1]), "reclaim_min_runtime", self.default_reclaim)


def _first_set(queues, field: str, default: float) -> float:
    for q in queues:
        value = getattr(q, field)
        if value is not None:
            return value
    return default


def is_elastic(job) -> bool:
    """Some pod set of ``job`` has more pods than its ``min_available``."""
    return any(ps.min_available < len(job.tasks_of(name)) for name, ps in job.pod_sets.items())


def _duration(arguments: dict, key: str) -> float:
    value = parse_duration(arguments.get(key, 0), key)
    if value < 0:
        raise ValueError(f"{key} must not be negative, got {arguments[key]!r}")
    return value


def build(arguments):
    method = arguments.get("reclaimResolveMethod") or "lca"
    if method not in METHODS:
        raise ValueError(f"reclaimResolveMethod must be one of {', '.join(METHODS)}, got {method!r}")
    return MinRuntime(_duration(arguments, "defaultPreemptMinRuntime"),
                      _duration(arguments, "defaultReclaimMinRuntime"), method)
