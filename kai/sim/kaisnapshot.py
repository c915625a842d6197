"""``kai-scheduler simulate --kai-snapshot FILE``: replay a KAI snapshot through the kernel.

The snapshot's raw objects fill a :class:`~kai.scheduler.cache.ClusterCache` (:mod:`kai.scheduler.kaisnapshot`),
so each cycle is built by the live scheduler's own code, of the node pool the snapshot's scheduler served
(``partitionParams``) as a scheduler of that partition reads it; its configuration is KAI's, mapped. Each cycle
runs the actions, and its binds and evictions are fed back into the cache as the live scheduler's committer
assumes them, so the next cycle sees them. Cycles are :data:`~kai.sim.rounds.ROUND_SECONDS` apart from the newest
time the snapshot's objects record (their creation and conditions).

With ``compare``, the BindRequests KAI made for pods it had not bound yet -- what KAI decided in the cycle
before the snapshot was taken -- are taken out of the first cycle's input and set beside its decisions, pod
by pod: the same node, another node, bound here only, bound by KAI only (with the explanation here), and
the pods both left pending (KAI's ``PodScheduled=False``). Pods of which the snapshot shows no decision of
KAI's are counted, not compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kai.api import TaskStatus
from kai.framework import Plugins, Session
from kai.kube.views import timestamp
from kai.scheduler.build import Cycle
from kai.scheduler.cache import ClusterCache
from kai.scheduler.kaisnapshot import KaiSnapshot, Mapped, load_cache, scheduler_config
from kai.sim.rounds import ROUND_SECONDS
from kai.sim.simulate import cycle_report, format_report


def snapshot_time(snapshot: KaiSnapshot) -> float:
    """The newest time the snapshot's pods, PodGroups and BindRequests record (0 when none)."""
    times = [0.0]
    for kind in ("pods", "podGroups", "bindRequests"):
        for obj in snapshot.objects[kind]:
            times.append(timestamp((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0)
            times += [timestamp(c.get("lastTransitionTime")) or 0.0
                      for c in (obj.get("status") or {}).get("conditions") or () if isinstance(c, dict)]
    return max(times)


def kai_decisions(snapshot: KaiSnapshot) -> dict[str, str]:
    """KAI's latest decisions the snapshot shows, pod key -> node: each BindRequest not failed whose pod has
    no node yet; ``""`` for a pod without a node that KAI marked unschedulable (``PodScheduled=False``).
    Of any other pod without a node the snapshot does not tell what KAI decided."""
    decided: dict[str, str] = {}
    unbound = set()
    for p in snapshot.objects["pods"]:
        meta, spec = p.get("metadata") or {}, p.get("spec") or {}
        if spec.get("nodeName"):
            continue
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        unbound.add(key)
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (p.get("status") or {}).get("conditions") or () if isinstance(c, dict)):
            decided[key] = ""
    for br in snapshot.objects["bindRequests"]:
        meta, spec = br.get("metadata") or {}, br.get("spec") or {}
        key = f"{meta.get('namespace')}/{spec.get('podName')}"
        if key in unbound and (br.get("status") or {}).get("phase") != "Failed":
            decided[key] = str(spec.get("selectedNode") or "")
    return decided


def without_binds(snapshot: KaiSnapshot, pods: dict[str, str]) -> KaiSnapshot:
    """``snapshot`` without the BindRequests of the pods ``pods`` names a node for."""
    def kept(br: dict) -> bool:
        key = f"{(br.get('metadata') or {}).get('namespace')}/{(br.get('spec') or {}).get('podName')}"
        return not pods.get(key)

    objects = dict(snapshot.objects, bindRequests=[br for br in snapshot.objects["bindRequests"] if kept(br)])
    return KaiSnapshot(snapshot.config, snapshot.params, objects, snapshot.discovery)


def replay(snapshot: KaiSnapshot, name: str, cycles: int = 1, compare: bool = False,
           mapped: Mapped | None = None, last: Callable[[Session], None] | None = None) -> dict[str, Any]:
    """Run ``cycles`` cycles on the snapshot (of its scheduler's node pool only); the JSON-ready report
    (``simulate``'s, with ``ignored``, ``node_pool`` -- the pool's label selector, "" for the whole cluster --
    and, with ``compare``, ``comparison``). ``last`` is handed the last cycle's session before it closes."""
    mapped = mapped or scheduler_config(snapshot, name)
    kai = kai_decisions(snapshot) if compare else {}
    cache = load_cache(without_binds(snapshot, kai).objects, mapped.scheduler_name, mapped.stuck_after,
                       mapped.config.restrict_node_scheduling, mapped.partition)
    plugins = Plugins(mapped.config)
    actions = [a for a in mapped.config.actions if a in plugins.actions]
    report: dict[str, Any] = {"name": name, "actions": actions, "unbuilt_actions": [], "problems": [],
                              "ignored": list(mapped.ignored), "node_pool": mapped.partition.selector, "cycles": []}
    start = snapshot_time(snapshot)
    for k in range(cycles):
        cycle = cache.snapshot(now=start + k * ROUND_SECONDS)
        session = Session(cycle.snapshot, plugins).open()
        try:
            session.run_actions(actions)
            if k == 0:
                report["problems"] = [str(p) for p in cycle.snapshot.problems]
                if compare:
                    report["comparison"] = comparison(session, kai)
            report["cycles"].append(cycle_report(k + 1, session))
            if last is not None and k == cycles - 1:
                last(session)
            feed_back(cache, session, cycle)
        finally:
            session.close()
    return report


def feed_back(cache: ClusterCache, session: Session, cycle: Cycle) -> None:
    """The session's binds and evictions, assumed by the cache as the live committer has it assume them."""
    for d in session.decisions:
        pod = cycle.pods.get(d.task.uid)
        if pod is None:
            continue
        if d.kind == "bind" and d.node is not None:
            cache.assume_bound(pod, d.node, d.gpu_groups, d.numa_zones, d.task.claim_allocations,
                               d.task.extended_claim)
        elif d.kind == "evict":
            cache.assume_evicted(pod)


def comparison(session: Session, kai: dict[str, str]) -> dict[str, Any]:
    """This cycle's decisions beside KAI's, pod by pod, over the pods waiting in it whose fate in KAI the
    snapshot tells (:func:`kai_decisions`); the others are counted as ``unknown``."""
    here = {d.task.uid: d.node for d in session.decisions if d.kind == "bind"}
    pods: list[dict[str, Any]] = []
    agree = unknown = 0
    for job in session.jobs.values():
        for task in job.tasks.values():
            if task.uid not in here and task.uid not in kai and not _waited(task):
                continue
            if task.uid not in kai:
                unknown += 1
                continue
            ours, theirs = here.get(task.uid), kai[task.uid] or None
            if ours == theirs:
                agree += 1
                outcome = "same node" if ours else "both pending"
            elif ours and theirs:
                outcome = "different node"
            else:
                outcome = "bound here only" if ours else "bound by KAI only"
            entry = {"pod": task.uid, "job": job.name, "outcome": outcome, "here": ours, "kai": theirs}
            if theirs and not ours:
                entry["why_not_here"] = session.task_fit_errors.get(task.uid) or session.job_fit_message(job)
            pods.append(entry)
    return {"pods": pods, "agree": agree, "total": len(pods), "unknown": unknown,
            "evictions_here": [{"pod": d.task.uid, "node": d.node, "reason": d.message}
                               for d in session.decisions if d.kind == "evict"]}


def _waited(task: Any) -> bool:
    """Whether the task waited for a node in the cycle: pending still, or placed by it (pipelined)."""
    return task.status is TaskStatus.PENDING or task.status is TaskStatus.PIPELINED


def format_replay(report: dict[str, Any]) -> str:
    """``simulate``'s text, with what was left out of the configuration and the comparison with KAI."""
    lines = [format_report(report)]
    if report["node_pool"]:
        lines.append(f"   node pool {report['node_pool']}: its nodes, queues, PodGroups and BindRequests only")
    if report["ignored"]:
        lines.append(f"   not taking part here: {', '.join(report['ignored'])}")
    comp = report.get("comparison")
    if comp is not None:
        rate = f"{100 * comp['agree'] / comp['total']:.0f}%" if comp["total"] else "n/a"
        lines.append(f"compared with KAI's next decisions: {comp['agree']} of {comp['total']} pods agree ({rate}); "
                     f"{comp['unknown']} waiting pod(s) with no decision of KAI's in the snapshot")
        for p in comp["pods"]:
            if p["outcome"] in ("same node", "both pending"):
                continue
            lines.append(f"  {p['outcome']:17} {p['pod']}: here {p['here'] or 'pending'}, "
                         f"KAI {p['kai'] or 'pending'}")
            if p.get("why_not_here"):
                lines += [f"{'':20}{line.strip()}" for line in p["why_not_here"].splitlines()]
        for e in comp["evictions_here"]:
            first, *rest = e["reason"].splitlines() or [""]
            lines.append(f"  evicted here      {e['pod']} from {e['node']}: {first}")
            lines += [f"{'':20}{line.strip()}" for line in rest]
    return "\n".join(lines)

