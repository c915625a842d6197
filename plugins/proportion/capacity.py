"""Queue capacity: nothing over a limit at any level; non-preemptible jobs only within deserved quota."""

from __future__ import annotations

from kai.sdk import UNLIMITED, QueueDetails, Reject, names

from .shares import CPU, GPU, MEMORY

_UNITS = {GPU: ("GPUs", "GPUs", 1.0), CPU: ("CPU cores", "cores", 1000.0), MEMORY: ("memory", "GB", 1e9)}


def _h(value: float, divisor: float) -> str:
    return f"{round(value / divisor, 3):g}"


def check(plugin, session, job, request: list[float], in_core: list[float]) -> Reject | None:
    """Reject when ``request`` (CPU, memory, GPU) of ``job`` breaks a limit, or its part ``in_core`` that is
    non-preemptible (:mod:`.core`) the non-preemptible quota."""
    chain = plugin.chain(session, job.queue)
    for qs in chain:
        for r in (CPU, MEMORY, GPU):
            limit = qs.limit[r]
            if limit != UNLIMITED and request[r] > 0 and limit < qs.allocated[r] + request[r] - 1e-9:
                title, unit, div = _UNITS[r]
                return Reject("proportion", (
                    f"{_label(qs)} quota has reached the allowable limit of {title}. Limit is {_h(limit, div)} {unit}, "
                    f"currently {_h(qs.allocated[r], div)} {unit} allocated and workload requested "
                    f"{_h(request[r], div)} {unit}"), names.UNSCHEDULABLE_OVER_LIMIT, _details(qs, request))
    if job.preemptible and not (job.semi_preemptible and any(in_core)):
        return None
    for qs in chain:
        for r in (CPU, MEMORY, GPU):
            deserved = qs.deserved[r]
            if deserved != UNLIMITED and deserved < qs.allocated_np[r] + in_core[r] - 1e-9:
                return Reject("proportion", "Non-preemptible workload is over quota. " + _np_details(qs, r, in_core)
                              + " Use a preemptible workload to go over quota.",
                              names.UNSCHEDULABLE_NON_PREEMPTIBLE_OVER_QUOTA, _details(qs, request))
    return None


def _label(qs) -> str:
    """How messages name a queue: its display name when it has one (as KAI)."""
    return qs.queue.display_name or qs.name


def _details(qs, request: list[float]) -> QueueDetails:
    """KAI's ``queueDetails`` of a veto by queue ``qs``."""
    cpu, memory, gpus = request
    return QueueDetails(qs.name, tuple(qs.request), tuple(qs.deserved), tuple(qs.allocated), tuple(qs.allocated_np),
                        tuple(qs.limit), (cpu, memory, gpus))


def _np_details(qs, r: int, request: list[float]) -> str:
    if r == GPU:
        return (f"Workload requested {_h(request[r], 1)} GPUs, but {_label(qs)} quota is {_h(qs.deserved[r], 1)} GPUs, "
                f"while {_h(qs.allocated_np[r], 1)} GPUs are already allocated for non-preemptible pods.")
    if r == CPU:
        return (f"Workload requested {_h(request[r], 1000)} CPU cores, but {_label(qs)} quota is "
                f"{_h(qs.deserved[r], 1000)} cores, while {_h(qs.allocated_np[r], 1000)} cores are already "
                f"allocated for non-preemptible pods.")
    return (f"Workload requested {_h(request[r], 1e9)} GB memory, but {_label(qs)} quota is "
            f"{_h(qs.deserved[r], 1e9)} GB, while {_h(qs.allocated_np[r], 1e9)} GB are already allocated for "
            f"non-preemptible pods.")
