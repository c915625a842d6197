"""How the scheduler has a placed pod bound: by the binder through a BindRequest, or by its own Binding.

``bindMode`` (``kai-scheduler run --bind-mode``, a SchedulingShard's ``args: {bind-mode: ...}``):

* :data:`DIRECT` (the default): a pod that needs no bind-time work (:func:`binder_work`) is bound by the
  scheduler itself -- one ``pods/binding`` write where the BindRequest was created, as kube-scheduler
  binds -- and every other pod goes through a BindRequest;
* :data:`BIND_REQUEST`: every pod goes through a BindRequest and the binder, as KAI does.

A direct Binding carries what the binder's would (the ``received-resource-type`` annotation and the predicted
NUMA placement), and the API server sets ``PodScheduled=True`` with it; the scheduler's ``Scheduled`` event
follows it. What such a pod has not: a BindRequest, the binder's ``PodBound`` condition and ``Bound`` event,
and the binder plugins of a third party acting on it (such a cluster sets ``bindRequest``).
"""

from __future__ import annotations

from kai.api import Task
from kai.framework.shard import BIND_MODES
from kai.scheduler.views import PodView

DIRECT, BIND_REQUEST = BIND_MODES


def binder_work(pod: PodView, task: Task, gpu_groups: tuple[str, ...]) -> str | None:
    """What the binder has to do before ``pod`` (``task``, placed on the shared devices ``gpu_groups``) can be
    bound, for the binder's plugins: None when nothing (a Binding alone binds it)."""
    if task.request.is_shared_gpu or gpu_groups:
        return "shared GPU devices to reserve"
    if task.claim_allocations or task.extended_claim is not None or pod.resource_claims:
        return "ResourceClaims to allocate"
    if pod.claims:
        return "volumes that may need binding"
    return None

