"""KAI's names, defined once: API coordinates, the scheduler name, labels, annotations, event reasons.

Every component, plugin and podgrouper takes these from here, so a cluster running KAI's manifests
sees the same names from this scheduler. API coordinates are ``(group, version, plural)`` tuples,
ready for :func:`kai.kube.client.object_path`.
"""

from __future__ import annotations

SCHEDULER_NAME = "kai-scheduler"

# --- API coordinates: (group, version, plural) --------------------------------------------------
QUEUES = ("scheduling.run.ai", "v2", "queues")
PODGROUPS = ("scheduling.run.ai", "v2alpha2", "podgroups")
BINDREQUESTS = ("scheduling.run.ai", "v1alpha2", "bindrequests")
TOPOLOGIES = ("kai.scheduler", "v1alpha1", "topologies")
SCHEDULINGSHARDS = ("kai.scheduler", "v1", "schedulingshards")
CONFIGS = ("kai.scheduler", "v1", "configs")
PRIORITYCLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
PODS = ("", "v1", "pods")
#: NodeResourceTopology (NUMA zones of a node, published by a node exporter; optional CRD).
NODERESOURCETOPOLOGIES = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
NODES = ("", "v1", "nodes")
CONFIGMAPS = ("", "v1", "configmaps")
PERSISTENTVOLUMECLAIMS = ("", "v1", "persistentvolumeclaims")
PERSISTENTVOLUMES = ("", "v1", "persistentvolumes")
STORAGECLASSES = ("storage.k8s.io", "v1", "storageclasses")
CSISTORAGECAPACITIES = ("storage.k8s.io", "v1", "csistoragecapacities")
CSIDRIVERS = ("storage.k8s.io", "v1", "csidrivers")
PODDISRUPTIONBUDGETS = ("policy", "v1", "poddisruptionbudgets")
#: The Eviction API: the ``eviction`` subresource of a pod takes a ``policy/v1`` Eviction.
EVICTION_API_VERSION = "policy/v1"
#: Dynamic Resource Allocation (GA in Kubernetes 1.34).
DEVICECLASSES = ("resource.k8s.io", "v1", "deviceclasses")
RESOURCESLICES = ("resource.k8s.io", "v1", "resourceslices")
RESOURCECLAIMS = ("resource.k8s.io", "v1", "resourceclaims")
RESOURCECLAIMTEMPLATES = ("resource.k8s.io", "v1", "resourceclaimtemplates")
PODGROUP_API_VERSION = "/".join(PODGROUPS[:2])
#: KAI's operator objects: the one Config, and the SchedulingShard a scheduler without a partition reads.
KAI_CONFIG_NAME = "kai-config"
DEFAULT_SHARD = "default"
BINDREQUEST_API_VERSION = "/".join(BINDREQUESTS[:2])

# --- labels -------------------------------------------------------------------------------------
QUEUE_LABEL = "kai.scheduler/queue"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
PROJECT_LABEL = "project"
USER_LABEL = "user"
PRIORITY_CLASS_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
#: A reservation pod's GPU group, and a shared-GPU pod's groups (``runai-gpu-group`` and ``...-<i>``).
GPU_GROUP_LABEL = "runai-gpu-group"
#: The label (key, value) of GPU reservation pods.
RESERVATION_APP = ("app", "kai-resource-reservation")
#: Node label with the memory of each GPU device (MiB; bytes on some GPU-feature-discovery versions).
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
#: Node roles of KAI's ``--restrict-node-scheduling``: GPU pods go to GPU workers, the others to CPU workers.
GPU_WORKER_LABEL = "node-role.kubernetes.io/gpu-worker"
CPU_WORKER_LABEL = "node-role.kubernetes.io/cpu-worker"

# --- annotations --------------------------------------------------------------------------------
POD_GROUP_ANNOTATION = "pod-group-name"
TOP_OWNER_METADATA_ANNOTATION = "kai.scheduler/top-owner-metadata"
TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
TOPOLOGY_REQUIRED_ANNOTATION = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED_ANNOTATION = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE_ANNOTATION = "kai.scheduler/segment-size"
SEGMENT_REQUIRED_ANNOTATION = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED_ANNOTATION = "kai.scheduler/segment-topology-preferred-placement"
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
STALE_ANNOTATION = "kai.scheduler/stale-podgroup-timestamp"
LAST_EVICTION_ANNOTATION = "kai.scheduler/last-eviction-timestamp"
#: Not KAI's: a pending PodGroup's dominant reason, ``{"code", "details"}`` as compact JSON, on the PodGroup (written
#: with its scheduling condition) and on the Unschedulable events about it and its pods.
PENDING_REASON_ANNOTATION = "kai.scheduler/pending-reason"
#: On a PodGroup (or its top owner, whose annotations the podgrouper copies): the job's maximum runtime, a Go duration.
MAX_RUNTIME_ANNOTATION = "kai.scheduler/max-runtime"
#: On a PodGroup, written by the scheduler: the nodes its gang reserved, as JSON ``{"nodes", "since", "until",
#: "start"}`` (RFC 3339 times; ``start`` null when unknown).
RESERVATION_ANNOTATION = "kai.scheduler/reservation"
#: A pod's NUMA placement: as the node observed it, and as the scheduler predicted it (written by the binder).
NUMA_PLACEMENT_OBSERVED_ANNOTATION = "kai.scheduler/numa-placement-observed"
NUMA_PLACEMENT_PREDICTED_ANNOTATION = "kai.scheduler/numa-placement-predicted"
#: Shared-GPU requests on a pod.
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
GPU_FRACTION_NUM_DEVICES = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER = "gpu-fraction-container-name"
#: Set by the binder: how the pod received its GPUs (``Fraction`` for shared GPUs).
RECEIVED_RESOURCE_TYPE = "received-resource-type"
SHARED_GPU_CONFIGMAP = "runai/shared-gpu-configmap"
#: A reservation pod's GPU device index.
RESERVED_GPU_INDEX = "run.ai/reserve_for_gpu_index"

# --- resources ----------------------------------------------------------------------------------
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
#: The GPU memory the binder reports for a shared-GPU pod in its PodGroup's status.
GPU_MEMORY_RESOURCE = "run.ai/gpu.memory"

# --- pod conditions and event reasons -----------------------------------------------------------
POD_BOUND_CONDITION = "PodBound"
UNSCHEDULABLE_ON_NODE_POOL = "UnschedulableOnNodePool"
REASON_SCHEDULED = "Scheduled"
REASON_PIPELINED = "Pipelined"
REASON_FAILED_BINDING = "FailedBinding"
REASON_EVICT = "Evict"
REASON_NOT_READY = "NotReady"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_POD_SCHEDULING_ERRORS = "PodSchedulingErrors"
REASON_BOUND = "Bound"
REASON_BINDING_ERROR = "BindingError"
REASON_PODGROUPER_WARNING = "PodGrouperWarning"
REASON_INTERNAL_ERROR = "InternalSchedulingError"
REASON_NODE_NOT_FOUND = "NodeNotFound"
REASON_NODE_OVERCOMMITTED = "NodeOverCommitted"
#: Events and PodGroup scheduling conditions of reservations and runtime limits.
REASON_NODES_RESERVED = "NodesReserved"
REASON_RESERVATION_RELEASED = "ReservationReleased"
REASON_RUNTIME_LIMIT_EXCEEDED = "RuntimeLimitExceeded"
#: KAI's unschedulable reasons of a PodGroup's scheduling condition (``reasons[].reason``).
UNSCHEDULABLE_OVER_LIMIT = "OverLimit"
UNSCHEDULABLE_NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
UNSCHEDULABLE_PREEMPTION_DELAY = "PreemptionDelayNotElapsed"
#: A job whose victims a PodDisruptionBudget protects (its fit error names the budget).
UNSCHEDULABLE_DISRUPTION_BUDGET = "PodDisruptionBudget"
#: Event on a PodGroup whose pod's eviction the API server refused (a PodDisruptionBudget's 429).
REASON_EVICTION_BLOCKED = "EvictionBlocked"
UNSCHEDULABLE_QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
#: On a Config or SchedulingShard whose change a component could not apply.
REASON_INVALID_CONFIGURATION = "InvalidConfiguration"

# --- event sources (the component names KAI's events carry) --------------------------------------
SOURCE_SCHEDULER = SCHEDULER_NAME
SOURCE_BINDER = "kai-binder"
SOURCE_PODGROUPER = "pod-grouper"

# --- podgrouper annotations of KAI v0.17 -------------------------------------------------------
#: On a Job or JobSet (or a replicated job's template): the gang minimum instead of the default.
BATCH_MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
#: ``"true"`` on a pod or any of its owners: the podgrouper leaves the pod alone.
SKIP_PODGROUPER_ANNOTATION = "kai.scheduler/skip-podgrouper"
#: On a pod or an owner: a Go duration the PodGroup takes as ``spec.preemptionDelay`` (not negative).
PREEMPTION_DELAY_ANNOTATION = "kai.scheduler/preemption-delay"
#: On a pod or an owner: a Go duration the PodGroup takes as ``spec.stalenessGracePeriod``.
STALENESS_GRACE_PERIOD_ANNOTATION = "kai.scheduler/staleness-grace-period"
