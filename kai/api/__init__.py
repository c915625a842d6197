"""The domain model: resources, statuses, nodes, tasks (pods), jobs (PodGroups), queues.

``kai.api`` imports nothing else of ``kai``.
"""

from kai.api.model import (
    UNLIMITED,
    Job,
    LabelRequirement,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodSet,
    Queue,
    QuotaSpec,
    Reject,
    SubGroup,
    Taint,
    Task,
    Toleration,
    Topology,
    TopologyConstraint,
)
from kai.api.resources import EPSILON, GPU, MIG_PREFIX, ResourceRequest, Resources, mig_gpu_slices
from kai.api.status import ACTIVE_ALLOCATED, ACTIVE_USED, ALIVE, ALLOCATED, TaskStatus

__all__ = [
    "ACTIVE_ALLOCATED", "ACTIVE_USED", "ALIVE", "ALLOCATED", "EPSILON", "GPU", "MIG_PREFIX", "UNLIMITED",
    "Job", "LabelRequirement", "LabelSelector", "Node", "PodAffinityTerm", "PodSet", "Queue", "QuotaSpec",
    "Reject", "ResourceRequest", "Resources", "SubGroup", "Taint", "Task", "TaskStatus", "Toleration",
    "Topology", "TopologyConstraint", "mig_gpu_slices",
]
