"""Podgroupers for Kubeflow: the training operators (PyTorchJob, TFJob, XGBoostJob, JAXJob, MPIJob),
Notebook and Kubeflow Pipelines' ScheduledWorkflow.

A distributed job is one gang: ``spec.runPolicy.schedulingPolicy.minAvailable`` if set, else the
sum of the replicas of all its replica specs. A PyTorchJob also gets ``master`` and ``worker``
sub-groups and, with a segment size, fixed-size worker segments ``worker-0``, ``worker-1``, ...
"""

from __future__ import annotations

from kai.sdk import (
    BUILD_PRIORITY,
    SEGMENT_SIZE_ANNOTATION,
    FieldError,
    GroupingError,
    SubGroupMetadata,
    annotations_of,
    atoi,
    hookimpl,
    labels,
    meta_str,
    nested,
    nested_int,
    nested_map,
    nested_str,
    segment_topology,
)


def distributed_min_available(top_owner, spec_name: str, mandatory=()) -> int:
    """The gang size of a Kubeflow job whose replica specs live in ``spec.<spec_name>``."""
    min_available, found = nested_int(top_owner, "spec", "runPolicy", "schedulingPolicy", "minAvailable")
    if found:
        return min_available
    name = meta_str(top_owner, "name")
    specs, found = nested_map(top_owner, "spec", spec_name)
    if not found:
        raise GroupingError(
            f"the type of the job {name} doesn't have a {spec_name} field. Please fix the replica field"
        )
    for required in mandatory:
        if required not in specs:
            raise GroupingError(
                f"the type of the job {name} doesn't have a {required} replica spec "
                f"which is required. Please fix the replica field"
            )
    total = 0
    for replica_type in specs:
        replicas, found = nested_int(top_owner, "spec", spec_name, replica_type, "replicas")
        if not found or replicas == 0:
            raise GroupingError(
                f"the type of the job {name} doesn't allow for 0 {replica_type} pods. Please fix the replica field"
            )
        total += replicas
    if total <= 0:
        raise GroupingError(
            f"failed calculate number of pods for a distributed job {name}. Must be greater than 0, but got {total}"
        )
    return total


class DistributedGrouper:
    """One gang per job: the default rules with the distributed minimum of ``spec.<spec_name>``."""

    def __init__(self, kinds, spec_name: str, mandatory=()):
        self.kinds = [tuple(kind) for kind in kinds]
        self.spec_name = spec_name
        self.mandatory = list(mandatory)

    @hookimpl
    def kai_podgrouper_kinds(self):
        return self.kinds

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        metadata.min_available = distributed_min_available(top_owner, self.spec_name, self.mandatory)
        return metadata


MPI_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
MPI_JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


class MpiGrouper(DistributedGrouper):
    """MPIJob (v1, v2beta1): Launcher and Worker are required. With ``launcherCreationPolicy:
    WaitForWorkersReady`` the launcher is left out of the gang until its pod exists."""

    def __init__(self):
        super().__init__(
            [("kubeflow.org", "v1", "MPIJob"), ("kubeflow.org", "v2beta1", "MPIJob")],
            "mpiReplicaSpecs",
            ["Launcher", "Worker"],
        )

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = super().kai_podgroup_metadata(hub, top_owner, pod, owners)
        policy, found = nested_str(top_owner, "spec", "launcherCreationPolicy")
        if found and policy == "WaitForWorkersReady" and not self._launcher_exists(hub, top_owner):
            replicas, found = nested_int(top_owner, "spec", "mpiReplicaSpecs", "Launcher", "replicas")
            if not found or replicas == 0:
                raise GroupingError(
                    f"the type of the job {meta_str(top_owner, 'name')} doesn't allow for 0 "
                    f"mpiReplicaSpecs pods. Please fix the replica field"
                )
            metadata.min_available -= replicas
        return metadata

    @staticmethod
    def _launcher_exists(hub, top_owner) -> bool:
        selector = {MPI_JOB_NAME_LABEL: meta_str(top_owner, "name"), MPI_JOB_ROLE_LABEL: "launcher"}
        pods = hub.list_pods(meta_str(top_owner, "namespace"), selector)
        return any(not (pod.get("metadata") or {}).get("deletionTimestamp") for pod in pods)


PYTORCH_SPECS = "pytorchReplicaSpecs"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
#: The most segments a worker group may be cut into.
MAX_SEGMENTS = 10000


def _optional_int(obj, *path):
    try:
        return nested_int(obj, *path)
    except FieldError:
        return None, False


class PyTorchGrouper(DistributedGrouper):
    """PyTorchJob: the distributed minimum, overridden by ``spec.elasticPolicy.minReplicas`` and then
    by ``spec.runPolicy.schedulingPolicy.minAvailable``; ``master``/``worker`` sub-groups; segments."""

    def __init__(self):
        super().__init__([("kubeflow.org", "v1", "PyTorchJob")], PYTORCH_SPECS)

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = super().kai_podgroup_metadata(hub, top_owner, pod, owners)
        for path in (("elasticPolicy", "minReplicas"), ("runPolicy", "schedulingPolicy", "minAvailable")):
            value, found = _optional_int(top_owner, "spec", *path)
            if found:
                metadata.min_available = value
        metadata.subgroups = self._subgroups(top_owner, pod, metadata.min_available)
        return metadata

    def _subgroups(self, top_owner, pod, total_min):
        where = f"{meta_str(top_owner, 'namespace')}/{meta_str(top_owner, 'name')}"
        try:
            specs, found = nested_map(top_owner, "spec", PYTORCH_SPECS)
        except FieldError as err:
            raise GroupingError(f"failed to get {PYTORCH_SPECS} from PyTorchJob {where}. Err: {err}") from err
        if not found:
            raise GroupingError(f"{PYTORCH_SPECS} not found in PyTorchJob {where}")
        try:
            masters, found = nested_int(specs, "Master", "replicas")
        except FieldError as err:
            raise GroupingError(
                f"failed to get replicas from {PYTORCH_SPECS}[Master] in PyTorchJob {where}. Err: {err}"
            ) from err
        masters = masters if found else 0
        role = labels(pod).get(REPLICA_TYPE_LABEL)
        subgroups = []
        if "Master" in specs and masters != 0:
            pods = [meta_str(pod, "name")] if role == "master" else []
            subgroups.append(SubGroupMetadata("master", masters, pods=pods))
        if "Worker" in specs:
            subgroups += self._worker_subgroups(specs, pod, max(0, total_min - masters), top_owner)
        return subgroups

    def _worker_subgroups(self, specs, pod, worker_min, top_owner):
        try:
            workers, found = nested_int(specs, "Worker", "replicas")
        except FieldError as err:
            raise GroupingError(f"failed to get replicas for worker groups. Err: {err}") from err
        workers = workers if found else 1
        pods = [meta_str(pod, "name")] if labels(pod).get(REPLICA_TYPE_LABEL) == "worker" else []
        try:
            template, _ = nested(specs, "Worker", "template")
        except FieldError:
            template = None
        size = self._segment_size(pod, specs, template)
        if size is None:
            return [SubGroupMetadata("worker", worker_min, pods=pods)]
        count, partial = divmod(workers, size)
        count += 1 if partial else 0
        if count > MAX_SEGMENTS:
            raise GroupingError(
                f"number of subgroups created for the segmentation {count} is greater than max allowed "
                f"segmentation {MAX_SEGMENTS}"
            )
        if count <= 0:
            return [SubGroupMetadata("worker", worker_min, pods=pods)]
        index = self._segment_index(pod, size)
        topology = segment_topology(pod, template, top_owner)
        # A parent sub-group takes minSubGroup; segments past the job's minimum are elastic (minimum 0).
        mandatory = (worker_min + size - 1) // size
        subgroups = [SubGroupMetadata("worker", 0, min_subgroup=count)]
        for i in range(count):
            segment_min = 0 if i >= mandatory else partial if partial and i == count - 1 else size
            subgroups.append(
                SubGroupMetadata(
                    f"worker-{i}",
                    segment_min,
                    parent="worker",
                    pods=list(pods) if i == index else [],
                    topology=topology,
                )
            )
        return subgroups

    @staticmethod
    def _segment_size(pod, specs, template):
        where = f"{meta_str(pod, 'namespace')}/{meta_str(pod, 'name')}"
        text = annotations_of(pod).get(SEGMENT_SIZE_ANNOTATION)
        source = f"on pod {where}"
        if not text:
            try:
                text, found = nested_str(
                    specs, "Worker", "template", "metadata", "annotations", SEGMENT_SIZE_ANNOTATION
                )
            except FieldError as err:
                raise GroupingError(f"failed to get segment size from worker podTemplate: {err}") from err
            if not found or not text:
                return None
            source = "on worker podTemplate"
        try:
            size = atoi(text)
        except ValueError as err:
            raise GroupingError(f"invalid segment size {text} {source}, err: {err}") from err
        if size <= 0:
            raise GroupingError(f"segment size {text} {source} needs to be a positive integer")
        return size

    @staticmethod
    def _segment_index(pod, size):
        pod_labels = labels(pod)
        if pod_labels.get(REPLICA_TYPE_LABEL) != "worker":
            return -1
        text = pod_labels.get(REPLICA_INDEX_LABEL)
        if text is None:
            raise GroupingError(
                f"replica index label not found on pod {meta_str(pod, 'namespace')}/{meta_str(pod, 'name')}"
            )
        try:
            index = atoi(text)
        except ValueError as err:
            raise GroupingError(f"invalid replica index {text}, err: {err}") from err
        if index < 0:
            raise GroupingError(f"replica index {text} is not valid. It must be bigger than 0")
        return index // size


class DefaultRulesGrouper:
    """The default rules for one kind, with its own fallback priority class."""

    def __init__(self, kind, fallback_priority=None, use_owners=False):
        self.kind = kind
        self.fallback_priority = fallback_priority
        self.use_owners = use_owners

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [self.kind]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        if self.fallback_priority:
            return hub.default_metadata(top_owner, pod, fallback_priority=self.fallback_priority)
        return hub.default_metadata(top_owner, pod, owners if self.use_owners else ())


def build_distributed(arguments):
    """A distributed grouper configured by ``replicaSpecName``, ``mandatorySpecNames`` and ``kinds``
    (``[[group, version, kind], ...]``, default none), for Kubeflow-style custom resources."""
    return DistributedGrouper(arguments.get("kinds") or [], str(arguments.get("replicaSpecName") or ""),
                              arguments.get("mandatorySpecNames") or [])


def build_pytorchjob(arguments):
    return PyTorchGrouper()


def build_tfjob(arguments):
    return DistributedGrouper([("kubeflow.org", "v1", "TFJob")], "tfReplicaSpecs")


def build_xgboostjob(arguments):
    return DistributedGrouper([("kubeflow.org", "v1", "XGBoostJob")], "xgbReplicaSpecs", ["Master", "Worker"])


def build_jaxjob(arguments):
    return DistributedGrouper([("kubeflow.org", "v1", "JAXJob")], "jaxReplicaSpecs", ["Worker"])


def build_mpijob(arguments):
    return MpiGrouper()


def build_notebook(arguments):
    return DefaultRulesGrouper(("kubeflow.org", "v1beta1", "Notebook"), fallback_priority=BUILD_PRIORITY)


def build_scheduledworkflow(arguments):
    return DefaultRulesGrouper(("kubeflow.org", "v1alpha1", "ScheduledWorkflow"), use_owners=True)
