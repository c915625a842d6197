"""Check a scenario's ``expected`` section against a session: the first mismatch, or None."""

from __future__ import annotations

from kai.api import ALLOCATED, Job, TaskStatus
from kai.framework import Session
from kai.sim.numa_facts import AMOUNT_FIELDS
from kai.sim.scenario import job_uid

TOLERANCE = 0.005


def _job(session: Session, name: str) -> Job | None:
    job = session.jobs.get(job_uid(name))
    return job if job is not None else session.snapshot.rejected_jobs.get(job_uid(name))


def _accepted_gpus(session: Session, task) -> float:
    r = task.request
    if task.status not in ALLOCATED and task.status is not TaskStatus.PIPELINED:
        return 0.0
    if r.gpu_memory_mib:
        node = session.node_by_name.get(task.node)
        return r.accepted_gpus(node.node.gpu_memory_mib) if node is not None else 0.0
    return r.gpus_required


def check_result(session: Session, what: str, name: str, tasks, job: Job, want: dict) -> str | None:
    """Mismatch of one ``expected.jobs``/``expected.tasks`` entry, covering ``tasks`` of ``job``."""
    label = f"{what} {name}"
    status = want.get("status")
    for t in tasks:
        if status is not None and t.status.value != status:
            return f"{label}: task {t.name} status expected {status}, got {t.status.value}"
        if "node" in want and want["node"] is not None and t.node != want["node"]:
            return f"{label}: task {t.name} node expected {want['node']}, got {t.node}"
    sums = {
        # KAI compares the pod's GPU requirement, which holds no DRA devices
        "gpus_required": sum(t.request.gpus_required - t.request.dra_gpus for t in tasks),
        "gpus_accepted": sum(_accepted_gpus(session, t) for t in tasks),
        "cpu_millis_required": sum(t.request.cpu for t in tasks),
        "memory_bytes_required": sum(t.request.memory for t in tasks),
    }
    for field, got in sums.items():
        if want.get(field) is not None and abs(float(want[field]) - got) > TOLERANCE * max(1.0, abs(got)):
            return f"{label}: {field} expected {want[field]}, got {round(got, 4)}"
    if want.get("numa_zones") is not None:
        for t in tasks:
            got = numa_zones(session, t)
            if got != sorted(want["numa_zones"]):
                return f"{label}: task {t.name} NUMA zones expected {sorted(want['numa_zones'])}, got {got}"
    if want.get("reserved_nodes") is not None:
        held = job.reservation
        got = sorted(held.nodes) if held is not None and held.active(session.now) else []
        if got != sorted(want["reserved_nodes"]):
            return f"{label}: reserved nodes expected {sorted(want['reserved_nodes'])}, got {got}"
    placed = status in ("Allocated", "Bound", "Binding", "Running")
    if placed and job.last_start is None:
        return f"{label}: expected a last-start time (status {status}), got none"
    older = want.get("last_start_older_than_seconds")
    if older is not None and placed:
        if job.last_start is None or job.last_start > session.now - float(older):
            age = None if job.last_start is None else session.now - job.last_start
            return f"{label}: last start expected older than {older}s, got {age}"
    return None


def numa_zones(session: Session, task) -> list[int]:
    """The sorted indices of the NUMA zones the session placed ``task`` on."""
    node = session.node_by_name.get(task.node)
    topology = node.node.numa if node is not None else None
    if topology is None or not task.numa_placement:
        return []
    return sorted(i for zp in task.numa_placement if (i := topology.zone_index(zp.zone)) is not None)


def check_zones_available(session: Session, name: str, want: dict | None) -> str | None:
    """Mismatch of ``expected.nodes.<name>.numa_zones_available`` (zone index -> amounts), or None."""
    if not want:
        return None
    topology = session.node_by_name[name].node.numa
    if topology is None:
        return f"node {name}: NUMA zones expected, the node has none"
    plugin = session.plugins.plugin("numa")
    zones = plugin.zones_available(name) if plugin is not None else None
    if zones is None:
        zones = [z.available for z in topology.zones]
    for index, amounts in want.items():
        if not 0 <= int(index) < len(zones):
            return f"node {name}: NUMA zone {index} expected, the node has {len(zones)} zones"
        for field, value in (amounts or {}).items():
            got = zones[int(index)].get(AMOUNT_FIELDS[field], 0.0)
            if abs(float(value) - got) > TOLERANCE:
                return f"node {name}: NUMA zone {index} available {field} expected {value}, got {round(got, 4)}"
    return None


def check_expected(expected: dict, session: Session, fit_session: Session | None = None,
                   decisions=None) -> str | None:
    """The first mismatch between ``expected`` and the session (``fit_session`` holds the fit errors)."""
    fit_session = fit_session or session
    for name, want in (expected.get("jobs") or {}).items():
        want = want or {}
        job = _job(session, name)
        if job is None:
            return f"job {name}: expected in the session, not found"
        why = check_result(session, "job", name, list(job.tasks.values()), job, want)
        if why:
            return why
        message = want.get("fit_error_message")
        if message is not None:
            got = fit_session.job_fit_detail(job) if job.uid in fit_session.jobs else ""
            if got.strip() != str(message).strip():
                return f"job {name}: fit_error_message expected {message!r}, got {got!r}"
    for name, want in (expected.get("tasks") or {}).items():
        want = want or {}
        found = [(j, t) for j in session.jobs.values() for t in j.tasks.values() if t.name == name]
        if not found:
            return f"task {name}: expected in the session, not found"
        job, task = found[0]
        why = check_result(session, "task", name, [task], job, want)
        if why:
            return why
    for name, want in (expected.get("nodes") or {}).items():
        want = want or {}
        node = session.node_by_name.get(name)
        if node is None:
            return f"node {name}: expected in the session, not found"
        amounts = {"idle_gpus": node.idle.gpu, "releasing_gpus": node.releasing.gpu}
        for field, value in amounts.items():
            if want.get(field) is not None and abs(float(want[field]) - value) > TOLERANCE:
                return f"node {name}: {field} expected {want[field]}, got {round(value, 4)}"
        why = check_zones_available(session, name, want.get("numa_zones_available"))
        if why:
            return why
    decisions = session.decisions if decisions is None else decisions
    counts = {"max_binds": "bind", "max_evictions": "evict", "max_pipelines": "pipeline"}
    for field, kind in counts.items():
        if expected.get(field) is not None:
            n = sum(1 for d in decisions if d.kind == kind)
            if n > int(expected[field]):
                return f"{field}: expected at most {expected[field]}, got {n}"
    return None
