"""Shared GPUs on a node: device groups, their accounting and the choice of devices for a shared task.

A task asking for a fraction (``gpu-fraction``) or an amount of memory (``gpu-memory``) of a device
lands on a *GPU group*: one physical device of one node, named by an id the binder realises with a
reservation pod. Accounting follows KAI:

* a device hosting any shared task is one used GPU of the node (taken from idle when its first
  non-pipelined task lands, given back when its last task leaves), while queues are charged only the
  fraction;
* each group keeps the device memory (MiB) used by all its tasks, allocated by the non-pipelined ones and
  releasing (releasing tasks minus pipelined ones); a device counts as a releasing GPU only when all its
  tasks are releasing, and a pipelined task takes such a device (or a new one) from the releasing GPUs;
* an occupied group holds one pod slot of the node for its reservation pod.

Everything here is called only for shared-GPU tasks, so whole-GPU and CPU tasks never pay for it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from kai.api import DEFAULT_GPU_MEMORY_MIB, ResourceRequest, Task, TaskStatus

if TYPE_CHECKING:
    from kai.framework.nodes import NodeInfo
    from kai.framework.session import Session

#: The candidate entry for "a device nobody shares yet" in ``kai_gpu_scores``.
WHOLE_GPU = None


class GpuGroup:
    """Memory (MiB) of one shared device: used by all its tasks, allocated and releasing as KAI counts them."""

    __slots__ = ("used", "allocated", "releasing", "marked", "slot")

    def __init__(self) -> None:
        self.used = 0
        self.allocated = 0
        self.releasing = 0
        #: The device is counted as a releasing GPU of the node.
        self.marked = False
        #: Where the reservation pod's slot was taken from: "idle" or "rel".
        self.slot = "idle"

    def copy(self) -> GpuGroup:
        other = GpuGroup()
        other.used, other.allocated, other.releasing = self.used, self.allocated, self.releasing
        other.marked, other.slot = self.marked, self.slot
        return other

    def __repr__(self) -> str:
        return f"GpuGroup(used={self.used}, allocated={self.allocated}, releasing={self.releasing})"


def node_gpu_memory(node: NodeInfo) -> int:
    """Memory of each GPU of ``node`` (a NodeInfo) in MiB; KAI's default when the node does not say."""
    return node.node.gpu_memory_mib or DEFAULT_GPU_MEMORY_MIB


def task_gpu_memory(node: NodeInfo, request: ResourceRequest) -> int:
    """MiB one device of ``node`` gives to the shared request (a fraction is truncated, as KAI does)."""
    if request.gpu_memory_mib:
        return request.gpu_memory_mib
    return int(request.gpu_fraction * node_gpu_memory(node))


def valid_portion(node: NodeInfo, request: ResourceRequest) -> bool:
    """A shared request asks for at most one device of this node."""
    if request.gpu_memory_mib:
        return math.ceil(request.gpu_memory_mib / node_gpu_memory(node) * 100 - 1e-9) / 100 <= 1.0
    return request.gpu_fraction <= 1.0


# --- accounting ---------------------------------------------------------------------------------------


def add_shared(node: NodeInfo, request: ResourceRequest, groups: Iterable[str], status: TaskStatus) -> None:
    """Account a shared-GPU request in ``status`` on the devices ``groups`` of ``node``."""
    a, i = node.arrays, node.index
    mib = task_gpu_memory(node, request)
    for gid in groups:
        g = node.gpu_groups.get(gid)
        if g is None:
            g = node.gpu_groups[gid] = GpuGroup()
            g.slot = "rel" if status is TaskStatus.PIPELINED else "idle"
            (a.rel_pods if g.slot == "rel" else a.idle_pods)[i] -= 1
        before, releasing_before = g.used, g.releasing
        g.used += mib
        if status is TaskStatus.RELEASING:
            g.releasing += mib
            g.allocated += mib
            if g.used == g.releasing:
                if not g.marked:
                    a.rel_gpu[i] += 1
                    g.marked = True
                if before == 0:
                    a.idle_gpu[i] -= 1
        elif status is TaskStatus.PIPELINED:
            g.releasing -= mib
            if before == releasing_before:
                a.rel_gpu[i] -= 1
        else:
            g.allocated += mib
            if before == 0:
                a.idle_gpu[i] -= 1
            if g.marked:
                a.rel_gpu[i] -= 1
                g.marked = False


def remove_shared(node: NodeInfo, request: ResourceRequest, groups: Iterable[str], status: TaskStatus) -> None:
    """Undo :func:`add_shared`."""
    a, i = node.arrays, node.index
    mib = task_gpu_memory(node, request)
    for gid in groups:
        g = node.gpu_groups.get(gid)
        if g is None:
            continue
        g.used -= mib
        if status is TaskStatus.RELEASING:
            g.releasing -= mib
            g.allocated -= mib
            if g.used <= 0:
                a.idle_gpu[i] += 1
                if g.marked:
                    a.rel_gpu[i] -= 1
                    g.marked = False
        elif status is TaskStatus.PIPELINED:
            g.releasing += mib
            # The exact inverse of the add: the device went back to the releasing GPUs.
            if g.used == g.releasing:
                a.rel_gpu[i] += 1
        else:
            g.allocated -= mib
            if g.used <= 0:
                a.idle_gpu[i] += 1
            if g.used and g.used == g.releasing and not g.marked:
                a.rel_gpu[i] += 1
                g.marked = True
        if g.used <= 0 and not g.releasing and not g.allocated:
            (a.rel_pods if g.slot == "rel" else a.idle_pods)[i] += 1
            del node.gpu_groups[gid]


# --- fit and choice -------------------------------------------------------------------------------------


def group_fits(node: NodeInfo, g: GpuGroup, mib: int) -> bool:
    """The task fits on this occupied device once its releasing tasks are gone (and not all of it is releasing)."""
    return g.used != 0 and node_gpu_memory(node) - g.allocated + g.releasing - mib >= 0 and g.allocated != g.releasing


def group_fits_idle(node: NodeInfo, g: GpuGroup, mib: int) -> bool:
    """The task fits this device's memory that is free now (a device held only by pipelined tasks is not free)."""
    return g.allocated > 0 and node_gpu_memory(node) - g.allocated - mib >= 0


def fitting_groups(node: NodeInfo, request: ResourceRequest) -> list[str]:
    """Ids of the node's occupied devices the shared request fits on, in the order they were opened."""
    mib = task_gpu_memory(node, request)
    return [gid for gid, g in node.gpu_groups.items() if group_fits(node, g, mib)]


def device_count_fits(node: NodeInfo, request: ResourceRequest, releasing_too: bool) -> bool:
    """KAI's node-level check: free whole devices plus fitting shared devices cover the request's devices."""
    a, i = node.arrays, node.index
    whole = a.idle_gpu[i] + (a.rel_gpu[i] if releasing_too else 0.0)
    need = request.gpu_devices - math.floor(whole + 1e-9)
    if need <= 0:
        return True
    return len(fitting_groups(node, request)) >= need


def ordered_devices(session: Session, task: Task, node: NodeInfo) -> list[str | None]:
    """Devices of ``node`` the task could share, best first: existing group ids and WHOLE_GPU per free device.

    The order is the sum of the ``kai_gpu_scores`` vectors (higher first); ties keep the existing groups
    first, in the order they were opened.
    """
    a, i = node.arrays, node.index
    candidates = cast("list[str | None]", fitting_groups(node, task.request))
    whole = int(a.idle_gpu[i] + 1e-9) + int(a.rel_gpu[i] + 1e-9)
    if whole > 0:
        candidates.append(WHOLE_GPU)
    if len(candidates) > 1 and session.calls.kai_gpu_scores:
        total = [0.0] * len(candidates)
        for fn in session.calls.kai_gpu_scores:
            scores = fn(session, task, node, candidates)
            if scores is not None:
                for k, s in enumerate(scores):
                    total[k] += s
        order = sorted(range(len(candidates)), key=lambda k: -total[k])
        candidates = [candidates[k] for k in order]
    out: list[str | None] = []
    for c in candidates:
        out.extend([WHOLE_GPU] * whole if c is WHOLE_GPU else [c])
    return out


def new_groups_needed(session: Session, task: Task, node: NodeInfo) -> int:
    """How many new devices (reservation pods) the preferred choice of devices opens."""
    chosen = ordered_devices(session, task, node)[: task.request.gpu_devices]
    return sum(1 for c in chosen if c is WHOLE_GPU)


def choose_devices(session: Session, task: Task, node: NodeInfo, fits_idle: bool,
                   pipeline_only: bool) -> tuple[tuple[str, ...], bool] | None:
    """``(group ids, pipelined)`` for the shared task on ``node``, or None when too few devices fit.

    New devices get fresh ids. The placement must be pipelined when the caller says so, when the task
    does not fit the node's idle resources, or when a chosen device lacks free memory now.
    """
    devices = task.request.gpu_devices
    chosen = ordered_devices(session, task, node)[:devices]
    if len(chosen) < devices:
        return None
    mib = task_gpu_memory(node, task.request)
    pipelined = pipeline_only or not fits_idle
    groups: list[str] = []
    for c in chosen:
        if c is WHOLE_GPU:
            groups.append(str(uuid.uuid4()))
        else:
            pipelined = pipelined or not group_fits_idle(node, node.gpu_groups[c], mib)
            groups.append(c)
    return tuple(groups), pipelined


def _portion(node: NodeInfo, mib: int) -> float:
    return math.ceil(mib / node_gpu_memory(node) * 100 - 1e-9) / 100


def shared_free_gpus(node: NodeInfo) -> float:
    """GPU portions still free on the node's shared devices (KAI rounds each up to 0.01 of a device)."""
    return sum(1.0 - _portion(node, g.allocated) for g in node.gpu_groups.values() if g.allocated > 0)


def shared_releasing_gpus(node: NodeInfo) -> float:
    """GPU portions being released on shared devices that are not releasing as a whole."""
    return sum(_portion(node, g.releasing) for g in node.gpu_groups.values()
               if g.releasing > 0 and g.releasing != g.used)


def used_portion(node: NodeInfo, gid: str) -> float:
    """Share of the device's memory its tasks use (0 for an unknown group)."""
    g = node.gpu_groups.get(gid)
    return g.used / node_gpu_memory(node) if g is not None else 0.0
