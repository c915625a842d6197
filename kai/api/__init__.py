"""The domain model: resources, statuses, nodes, tasks (pods), jobs (PodGroups), queues.

``kai.api`` imports nothing else of ``kai``.
"""

from kai.api.model import (
    ANY_IP,
    UNLIMITED,
    HostPort,
    Job,
    LabelRequirement,
    LabelSelector,
    Member,
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
    WeightedPodAffinityTerm,
)
from kai.api.names import GPU, GPU_FRACTION, GPU_FRACTION_NUM_DEVICES, GPU_MEMORY, GPU_MEMORY_LABEL, MIG_PREFIX
from kai.api.resources import (
    DEFAULT_GPU_MEMORY_MIB,
    EPSILON,
    GpuRequestError,
    ResourceRequest,
    Resources,
    gpu_memory_from_label,
    is_mig_resource,
    mig_gpu_slices,
    parse_gpu_sharing,
)
from kai.api.status import ACTIVE_ALLOCATED, ACTIVE_USED, ALIVE, ALLOCATED, TaskStatus

__all__ = [
    "ACTIVE_ALLOCATED", "ACTIVE_USED", "ANY_IP", "HostPort", "WeightedPodAffinityTerm",
    "ALIVE", "ALLOCATED", "DEFAULT_GPU_MEMORY_MIB", "EPSILON", "GPU", "GPU_FRACTION",
    "GPU_FRACTION_NUM_DEVICES", "GPU_MEMORY", "GPU_MEMORY_LABEL", "MIG_PREFIX", "UNLIMITED", "GpuRequestError",
    "Job", "LabelRequirement", "LabelSelector", "Member", "Node", "PodAffinityTerm", "PodSet", "Queue", "QuotaSpec",
    "Reject", "ResourceRequest", "Resources", "SubGroup", "Taint", "Task", "TaskStatus", "Toleration",
    "Topology", "TopologyConstraint", "gpu_memory_from_label", "is_mig_resource", "mig_gpu_slices",
    "parse_gpu_sharing",
]
