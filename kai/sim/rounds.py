"""Scheduling rounds on in-memory facts: run the kernel, then feed its decisions back.

One round builds a fresh snapshot from the facts, runs the configured actions in one Session and
applies KAI's integration-test feedback (:func:`settle`): bound tasks start running, pipelined
reservations are dropped, evicted tasks wait again (unless their job is being deleted), a NUMA
placement stays recorded on the task that holds it. The facts
are either a conformance :class:`Scenario` (:func:`feed_back`) or the domain objects themselves
(:func:`feed_back_jobs`).
"""

from __future__ import annotations

from collections.abc import Iterable

from kai.api import Job, TaskStatus
from kai.framework import Plugins, Session, run_session
from kai.sim.dra_facts import claim_statuses
from kai.sim.numa_facts import placement_data
from kai.sim.scenario import NAMESPACE, NOW, Scenario, job_uid

ROUND_SECONDS = 1.0


def run_round(scenario: Scenario, plugins: Plugins, actions=None, now: float = NOW) -> Session:
    """Build the facts' snapshot and run ``actions`` (default: the configured ones) in one session."""
    return run_session(scenario.build(now), plugins, actions)


def settle(status: TaskStatus, node: str | None, deleting: bool = False) -> tuple[TaskStatus, str | None]:
    """A task's (status, node) for the next round, given its (status, node) at the end of this one."""
    if status is TaskStatus.BINDING:
        return TaskStatus.RUNNING, node
    if status is TaskStatus.PIPELINED or (status is TaskStatus.RELEASING and not deleting):
        return TaskStatus.PENDING, None
    return status, node


def feed_back(scenario: Scenario, session: Session) -> None:
    """Write the session's outcome into the scenario's facts for the next round (also the claims' allocations
    and consumers, as KAI's harness copies them from the session's DRA state)."""
    placed: dict[str, tuple[str, ...]] = {}
    for jd in scenario.data.get("jobs") or []:
        job = session.jobs.get(job_uid(jd["name"]))
        if job is None:
            continue
        deleting = bool(jd.get("deleting"))
        held = job.reservation
        if held is None:
            jd.pop("reservation", None)
        else:  # as the next round, a round later, sees it
            left = held.until - session.now - ROUND_SECONDS
            jd["reservation"] = {"nodes": list(held.nodes), "expires_in_seconds": left}
        for i, td in enumerate(jd.get("tasks") or []):
            task = job.tasks.get(td.get("name") or f"{jd['name']}-{i}")
            if task is None:
                continue
            status, node = settle(task.status, task.node, deleting)
            placed[task.name] = tuple(c.claim for c in task.resource_claims) if node is not None else ()
            td["state"] = status.value
            if node is None:
                td.pop("node", None)
            else:
                td["node"] = node
            if task.gpu_groups:
                td["gpu_groups"] = list(task.gpu_groups)
            if node is None:
                td.pop("numa_placement", None)
            elif task.numa_placement:  # the binder records it on the pod; the node confirms it
                td["numa_placement"] = placement_data(task.numa_placement)
    if scenario.data.get("resource_claims"):
        dra = session.plugins.plugin("dynamicresources")
        claim_statuses(scenario.data, placed,
                       lambda name: dra.allocation(NAMESPACE, name) if dra is not None else None)


def feed_back_jobs(jobs: Iterable[Job]) -> None:
    """Settle the tasks of jobs a session has decided on, in place, for the next round's snapshot."""
    for job in jobs:
        for task in job.tasks.values():
            task.status, task.node = settle(task.status, task.node)
            if task.node is None:
                task.numa_recorded = task.numa_placement = ()
            elif task.numa_placement:
                task.numa_recorded = task.numa_placement
