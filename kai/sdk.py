"""The plugin SDK: everything a scheduling plugin, an action or a podgrouper may import, in one module.

* hooks: :data:`hookimpl` and one protocol per family of :mod:`kai.hookspecs` (:class:`ScoreHooks`,
  :class:`FilterHooks`, ...). A plugin class may subclass the protocols of the hooks it implements: a type
  checker then holds each ``@hookimpl`` method to its hook's arguments and return type (taking every
  argument, in the specification's order). Their methods are not hook implementations themselves: only
  the ``@hookimpl`` methods of a plugin are registered.
* the domain model (:mod:`kai.api`): resources, nodes, tasks, jobs, queues, statuses, vetoes, NUMA,
  storage and DRA objects, the labels and annotations plugins and podgroupers read (by name; every name
  of KAI's API is in :data:`names`), and the PodGroup metadata podgroupers return;
* the kernel's services: :class:`Session`, :class:`Statement`, :class:`NodeInfo` and the node arrays,
  orderings and gang functions, the compiled placement scores and fragmentation measure (:data:`fragment`),
  what a session works out once per snapshot (:func:`jobs_where`, :func:`nodes_as_built`, kept under a
  :class:`JobsKey` or :class:`MemoKey`), GPU memory and fair-share functions, fit-error texts, task shapes
  and node states (:class:`Shape`, :class:`NodeState`);
* pod grouping: the hub podgroupers are given, readers of unstructured objects (``annotations_of``, not
  ``annotations``, which ``from __future__ import annotations`` would shadow), segments and Karta;
* errors, durations and Kubernetes quantities.

What is stable: the names in ``__all__``, with the signatures and meaning their own documentation gives.
Removing or changing one is a breaking change, listed in the CHANGELOG. Where a name is defined is not:
the modules behind this one move between releases, so plugins import from here. The shipped plugins and
podgroupers import nothing else of ``kai`` (``tests/unit/project/test_import_rules.py``); tests of plugins use
:mod:`kai.testing` and :mod:`kai.testing_podgroupers` besides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kai import _native, hookimpl
from kai.api import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    ALIVE,
    ALLOCATED,
    EPSILON,
    GPU,
    MIG_PREFIX,
    UNLIMITED,
    ContainerRequest,
    Job,
    Member,
    Node,
    NumaTopology,
    PodSet,
    Queue,
    QueueDetails,
    Reject,
    ResourceRequest,
    Resources,
    SubGroup,
    Taint,
    Task,
    TaskStatus,
    Topology,
    TopologyConstraint,
    ZonePlacement,
    is_mig_resource,
    mig_gpu_slices,
    names,
)
from kai.api.dra import ALL as ALL_DEVICES
from kai.api.dra import (
    EXTENDED_ENTRY,
    GPU_RESOURCE,
    RESERVED_FOR_MAX,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    DynamicResources,
    ExtendedClaim,
    ResourceClaim,
    ResourceSlice,
    is_gpu_name,
)
from kai.api.dra import Allocation as ClaimAllocation
from kai.api.names import (
    BATCH_MIN_MEMBER_ANNOTATION,
    CPU_WORKER_LABEL,
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_WORKER_LABEL,
    MIG_STRATEGY_LABEL,
    NODE_POOL_LABEL,
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    PREEMPTIBILITY_LABEL,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    PROJECT_LABEL,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    SEGMENT_PREFERRED_ANNOTATION,
    SEGMENT_REQUIRED_ANNOTATION,
    SEGMENT_SIZE_ANNOTATION,
    STALENESS_GRACE_PERIOD_ANNOTATION,
    SUBGROUP_LABEL,
    TASK_PRIORITY_LABEL,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    USER_LABEL,
)
from kai.api.numa import (
    GUARANTEED,
    POLICY_BEST_EFFORT,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE,
    SCOPE_CONTAINER,
    SCOPE_POD,
)
from kai.api.podgroup import (
    BUILD_PRIORITY,
    DEFAULT_QUEUE,
    INFERENCE_PRIORITY,
    NON_PREEMPTIBLE,
    PREEMPTIBLE,
    SEMI_PREEMPTIBLE,
    TRAIN_PRIORITY,
    GroupingError,
    NotFoundError,
    OwnerReference,
    PodGroupMetadata,
    SubGroupMetadata,
    parse_preemptibility,
)
from kai.api.podgroup import TopologyConstraint as PodGroupTopology
from kai.api.storage import (
    UNBOUND_IMMEDIATE,
    PodClaim,
    PodClaims,
    Storage,
    claims_problem,
    classify,
    node_reasons,
    static_bindings,
)
from kai.common.durations import format_duration, parse_duration
from kai.common.quantity import QuantityError
from kai.common.quantity import parse as parse_quantity
from kai.framework import (
    FAIR_SHARE_REASONS,
    ROOT_GROUP,
    Decision,
    NodeInfo,
    Scenario,
    Session,
    Statement,
    cluster_capacity,
    core_tasks,
    divide_tree_explained,
    max_node_gpu_memory,
    memory_base,
    min_node_gpu_memory,
    ordered_pod_sets,
    placement_scores,
    queue_order_compare,
    should_pipeline,
    tasks_to_allocate,
)
from kai.framework.asbuilt import JobsKey, jobs_where, nodes_as_built
from kai.framework.fiterrors import scheduling_conditions_message
from kai.framework.gpusharing import node_gpu_memory, task_gpu_memory
from kai.framework.jobqueue import JobQueue
from kai.framework.memo import MemoKey
from kai.framework.nodepool import LargestNode
from kai.framework.nodes import NodeArrays
from kai.framework.shapes import NodeState, Shape, after_task, node_state, normalised, parse_workload, task_shape
from kai.grouping.hub import ANY, FALLBACK_KIND, PodGrouperHub, first_duration
from kai.grouping.karta import KartaLookup, karta_metadata
from kai.grouping.podgroups import kept_topology
from kai.grouping.segments import segment_topology, trunc_div
from kai.grouping.unstructured import (
    FieldError,
    atoi,
    gvk,
    labels,
    meta_str,
    nested,
    nested_bool,
    nested_int,
    nested_list,
    nested_map,
    nested_str,
    nested_str_list,
    parse_int32,
)
from kai.grouping.unstructured import annotations as annotations_of  # "annotations": the __future__ feature
from kai.plugin_loader import PluginError

if TYPE_CHECKING:  # the compiled module has the class of its pure-Python twin
    from kai._native import fragment_py as fragment
else:
    fragment = _native.load("fragment")

#: An action: runs on a session (``kai_actions`` offers them by name).
Action = Callable[[Session], None]


# --- the hook families of kai.hookspecs, section by section ----------------------------------------
# Each method has its hook's arguments and return type and answers "no opinion"; a plugin overrides
# those it implements and marks them ``@hookimpl``. ``tests/unit/sdk/test_sdk.py`` keeps them equal to
# kai/hookspecs.py.


class SessionHooks(Protocol):
    """Session life cycle: the actions a plugin offers, a session opening and closing, a job arriving."""

    def kai_actions(self) -> Mapping[str, Callable[[Session], None]] | None:
        return None

    def kai_session_open(self, session: Session) -> None:
        return None

    def kai_session_close(self, session: Session) -> None:
        return None

    def kai_session_job_added(self, session: Session, job: Job) -> Reject | None:
        return None


class OrderHooks(Protocol):
    """Ordering: comparators of jobs, tasks, subgroup members and sibling queues."""

    def kai_job_order(self, session: Session, left: Job, right: Job) -> int | None:
        return None

    def kai_task_order(self, session: Session, left: Task, right: Task) -> int | None:
        return None

    def kai_subgroup_order(self, session: Session, job: Job, left: Member, right: Member) -> int | None:
        return None

    def kai_queue_order(self, session: Session, left: Queue, right: Queue, left_job: Job | None,
                        right_job: Job | None, left_victims: Sequence[Job], right_victims: Sequence[Job]) -> int | None:
        return None


class FilterHooks(Protocol):
    """Filtering: vetoes of a task, and of a task on a node; whether nodes of one class look alike."""

    def kai_pre_predicate(self, session: Session, task: Task, job: Job) -> Reject | None:
        return None

    def kai_predicate(self, session: Session, task: Task, job: Job, node: NodeInfo) -> Reject | None:
        return None

    def kai_nodes_alike(self, session: Session, task: Task, job: Job) -> bool | None:
        return None


class CapacityHooks(Protocol):
    """Capacity: vetoes of an allocation step, or a placement, that a queue's limits or quota forbid."""

    def kai_job_over_capacity(self, session: Session, job: Job, tasks: list[Task]) -> Reject | None:
        return None

    def kai_task_over_capacity(self, session: Session, task: Task, job: Job, node: NodeInfo | None) -> Reject | None:
        return None


class EvictionHooks(Protocol):
    """Eviction actions: reclaimers, victims and solved scenarios vetoed; queue amounts for messages."""

    def kai_can_reclaim(self, session: Session, job: Job) -> Reject | None:
        return None

    def kai_victim_filter(self, session: Session, action: str, preemptor: Job, victim: Job) -> Reject | None:
        return None

    def kai_scenario_validator(self, session: Session, action: str, scenario: Scenario) -> Reject | None:
        return None

    def kai_queue_resources(self, session: Session, queue: Queue) -> tuple[Resources, Resources, Resources] | None:
        return None

    def kai_job_solution_start(self, session: Session, job: Job) -> None:
        return None


class SubsetHooks(Protocol):
    """Node subsets: the node sets a job's groups are tried on (topology)."""

    def kai_pre_job_allocation(self, session: Session, job: Job) -> None:
        return None

    def kai_subset_nodes(self, session: Session, job: Job, group: SubGroup | PodSet, pod_sets: list[str],
                         tasks: list[Task], nodes: list[NodeInfo]) -> list[list[NodeInfo]] | None:
        return None


class ScoreHooks(Protocol):
    """Scoring: scores of a task's candidate nodes, and of a node's shared devices."""

    def kai_node_scores(self, session: Session, task: Task, nodes: list[NodeInfo]) -> Sequence[float] | None:
        return None

    def kai_gpu_scores(self, session: Session, task: Task, node: NodeInfo,
                       groups: list[str | None]) -> Sequence[float] | None:
        return None


class AllocationHooks(Protocol):
    """Allocation events: a task (virtually) placed on or taken off a node."""

    def kai_on_allocate(self, session: Session, task: Task, node: NodeInfo) -> None:
        return None

    def kai_on_deallocate(self, session: Session, task: Task, node: NodeInfo) -> None:
        return None


class PodgrouperHooks(Protocol):
    """Pod grouping: the kinds a podgrouper groups and the PodGroup of a pod (which it must implement)."""

    def kai_podgrouper_kinds(self) -> Iterable[tuple[str, str, str]] | None:
        return None

    def kai_podgroup_metadata(self, hub: PodGrouperHub, top_owner: dict[str, Any] | None, pod: dict[str, Any],
                              owners: list[dict[str, Any]]) -> PodGroupMetadata:
        raise NotImplementedError


__all__ = [
    # hooks
    "hookimpl", "SessionHooks", "OrderHooks", "FilterHooks", "CapacityHooks", "EvictionHooks", "SubsetHooks",
    "ScoreHooks", "AllocationHooks", "PodgrouperHooks",
    # the domain model
    "Resources", "ResourceRequest", "Node", "Taint", "Task", "Job", "Queue", "QueueDetails", "PodSet", "SubGroup",
    "Member", "Topology", "TopologyConstraint", "Reject", "TaskStatus", "ACTIVE_ALLOCATED", "ACTIVE_USED", "ALIVE",
    "ALLOCATED", "UNLIMITED", "EPSILON", "GPU", "MIG_PREFIX", "is_mig_resource", "mig_gpu_slices",
    # KAI's names: labels and annotations, and the module of every name
    "names", "SCHEDULER_NAME", "PODGROUP_API_VERSION", "QUEUE_LABEL", "NODE_POOL_LABEL", "PROJECT_LABEL",
    "USER_LABEL", "PRIORITY_CLASS_LABEL", "PREEMPTIBILITY_LABEL", "SUBGROUP_LABEL", "TASK_PRIORITY_LABEL",
    "GPU_MEMORY_LABEL", "GPU_COUNT_LABEL", "MIG_STRATEGY_LABEL", "GPU_WORKER_LABEL", "CPU_WORKER_LABEL",
    "POD_GROUP_ANNOTATION", "TOPOLOGY_ANNOTATION", "TOPOLOGY_REQUIRED_ANNOTATION", "TOPOLOGY_PREFERRED_ANNOTATION",
    "SEGMENT_SIZE_ANNOTATION", "SEGMENT_REQUIRED_ANNOTATION", "SEGMENT_PREFERRED_ANNOTATION",
    "BATCH_MIN_MEMBER_ANNOTATION", "PREEMPTION_DELAY_ANNOTATION", "STALENESS_GRACE_PERIOD_ANNOTATION",
    # NUMA
    "NumaTopology", "ZonePlacement", "ContainerRequest", "GUARANTEED", "POLICY_NONE", "POLICY_BEST_EFFORT",
    "POLICY_RESTRICTED", "POLICY_SINGLE", "SCOPE_CONTAINER", "SCOPE_POD",
    # storage
    "Storage", "PodClaim", "PodClaims", "UNBOUND_IMMEDIATE", "claims_problem", "classify", "node_reasons",
    "static_bindings",
    # dynamic resources
    "DynamicResources", "ResourceClaim", "ResourceSlice", "Device", "DeviceClass", "DeviceId", "DeviceRequest",
    "ClaimAllocation", "ExtendedClaim", "ALL_DEVICES", "EXTENDED_ENTRY", "GPU_RESOURCE", "RESERVED_FOR_MAX",
    "is_gpu_name",
    # PodGroup metadata
    "PodGroupMetadata", "SubGroupMetadata", "PodGroupTopology", "OwnerReference", "parse_preemptibility",
    "BUILD_PRIORITY", "INFERENCE_PRIORITY", "TRAIN_PRIORITY", "DEFAULT_QUEUE", "PREEMPTIBLE", "NON_PREEMPTIBLE",
    "SEMI_PREEMPTIBLE",
    # the kernel's services
    "Session", "Statement", "Decision", "Scenario", "Action", "NodeInfo", "NodeArrays", "JobQueue", "ROOT_GROUP",
    "ordered_pod_sets", "should_pipeline", "tasks_to_allocate", "core_tasks", "placement_scores", "queue_order_compare",
    "divide_tree_explained", "FAIR_SHARE_REASONS", "cluster_capacity", "memory_base", "max_node_gpu_memory",
    "min_node_gpu_memory", "node_gpu_memory", "task_gpu_memory", "jobs_where", "nodes_as_built", "JobsKey", "MemoKey",
    "LargestNode",
    "scheduling_conditions_message", "fragment",
    # task shapes and node states
    "Shape", "NodeState", "node_state", "after_task", "task_shape", "parse_workload", "normalised",
    # pod grouping
    "PodGrouperHub", "ANY", "FALLBACK_KIND", "first_duration", "KartaLookup", "karta_metadata", "kept_topology",
    "segment_topology", "trunc_div", "FieldError", "annotations_of", "labels", "meta_str", "gvk", "atoi", "parse_int32",
    "nested", "nested_bool", "nested_int", "nested_list", "nested_map", "nested_str", "nested_str_list",
    # errors, durations and quantities
    "PluginError", "GroupingError", "NotFoundError", "parse_duration", "format_duration", "parse_quantity",
    "QuantityError",
]
