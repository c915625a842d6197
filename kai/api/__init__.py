"""The domain model: resources, statuses, nodes, tasks (pods), jobs (PodGroups), queues.

``kai.api`` imports nothing else of ``kai``.
"""

from kai.api.disruption import DisruptionBudget
from kai.api.dra import DynamicResources, PodResourceClaim
from kai.api.dranodes import back_extended_gpus
from kai.api.model import (
    ANY_IP,
    MAX_RESOURCE_TYPES,
    UNLIMITED,
    HostPort,
    Job,
    Member,
    Node,
    PodAffinityTerm,
    PodSet,
    Queue,
    QueueDetails,
    QuotaSpec,
    Reject,
    Reservation,
    ResourceTypeQuota,
    SubGroup,
    Taint,
    Task,
    Toleration,
    Topology,
    TopologyConstraint,
    WeightedPodAffinityTerm,
    selectors_overlap,
)
from kai.api.names import GPU, GPU_FRACTION, GPU_FRACTION_NUM_DEVICES, GPU_MEMORY, GPU_MEMORY_LABEL, MIG_PREFIX
from kai.api.numa import ContainerRequest, NumaTopology, NumaZone, ZonePlacement
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
from kai.api.selectors import LabelRequirement, LabelSelector
from kai.api.status import ACTIVE_ALLOCATED, ACTIVE_USED, ALIVE, ALLOCATED, TaskStatus
from kai.api.storage import PodClaim, Storage

__all__ = [
    "ACTIVE_ALLOCATED", "ACTIVE_USED", "ALIVE", "ALLOCATED", "ANY_IP", "DEFAULT_GPU_MEMORY_MIB", "EPSILON", "GPU",
    "GPU_FRACTION", "GPU_FRACTION_NUM_DEVICES", "GPU_MEMORY", "GPU_MEMORY_LABEL", "MAX_RESOURCE_TYPES", "MIG_PREFIX",
    "UNLIMITED",
    "ContainerRequest", "DisruptionBudget", "DynamicResources", "GpuRequestError", "HostPort", "Job",
    "LabelRequirement", "LabelSelector",
    "Member", "Node", "NumaTopology", "NumaZone", "PodAffinityTerm", "PodClaim", "PodResourceClaim", "PodSet", "Queue",
    "QueueDetails", "QuotaSpec", "Reject", "Reservation", "ResourceTypeQuota",
    "ResourceRequest", "Resources", "Storage", "SubGroup", "Taint", "Task", "TaskStatus", "Toleration", "Topology",
    "TopologyConstraint", "WeightedPodAffinityTerm", "ZonePlacement", "back_extended_gpus", "gpu_memory_from_label",
    "is_mig_resource",
    "mig_gpu_slices", "parse_gpu_sharing", "selectors_overlap",
]
