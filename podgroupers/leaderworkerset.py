"""Podgrouper for ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet: one gang per replica group
(leader + workers), with ``leader``/``workers`` sub-groups or fixed-size segments."""

from __future__ import annotations

from kai.sdk import (
    SEGMENT_SIZE_ANNOTATION,
    GroupingError,
    SubGroupMetadata,
    annotations_of,
    atoi,
    hookimpl,
    labels,
    meta_str,
    nested_int,
    nested_map,
    nested_str,
    segment_topology,
    trunc_div,
)

SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_CREATED = "LeaderCreated"
LEADER_READY = "LeaderReady"
LEADER_WORKER = "LeaderWorker"
LEADER_EXCLUDED = "LeaderExcluded"
#: The most segments a group may be cut into.
MAX_SEGMENTS = 10000


def _is_leader(pod) -> bool:
    return labels(pod).get(WORKER_INDEX_LABEL) == "0"


def _check_worker_index(pod) -> None:
    text = labels(pod).get(WORKER_INDEX_LABEL)
    if text is None:
        return
    try:
        index = atoi(text)
    except ValueError as err:
        raise GroupingError(
            f"failed to get worker index from pod {meta_str(pod, 'namespace')}/{meta_str(pod, 'name')}: {err}"
        ) from err
    if index < 0:
        raise GroupingError(f"workerIndex {text} is not valid. It must be bigger than 0")


class LwsGrouper:
    """PodGroup ``pg-<lws>-<uid>-group-<group index>``; minimum = group size (``LeaderCreated``), or 1
    for an unscheduled leader under ``LeaderReady``."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        where = f"LWS {meta_str(top_owner, 'namespace')}/{meta_str(top_owner, 'name')}"
        size = self._group_size(top_owner, where)
        try:
            policy, found = nested_str(top_owner, "spec", "startupPolicy")
        except GroupingError as err:
            raise GroupingError(f"failed to get startupPolicy from {where}: {err}") from err
        policy = policy if found else LEADER_CREATED
        _check_worker_index(pod)
        if policy == LEADER_READY:
            metadata.min_available = self._leader_ready_min(pod, size)
        elif policy == LEADER_CREATED:
            metadata.min_available = size
        else:
            raise GroupingError(f"unknown startupPolicy: {policy}")
        metadata.subgroups = self._subgroups(top_owner, pod, metadata.min_available, where)
        try:
            metadata.name += f"-group-{atoi(labels(pod)[GROUP_INDEX_LABEL])}"
        except (KeyError, ValueError):
            pass
        return metadata

    @staticmethod
    def _group_size(top_owner, where) -> int:
        try:
            size, found = nested_int(top_owner, "spec", "leaderWorkerTemplate", "size")
        except GroupingError as err:
            raise GroupingError(f"failed to get leaderWorkerTemplate.size from {where} with error: {err}") from err
        if not found:
            raise GroupingError(f"leaderWorkerTemplate.size not found in {where}")
        if size <= 0:
            raise GroupingError(f"invalid leaderWorkerTemplate.size {size} in {where}")
        return size

    @staticmethod
    def _leader_ready_min(pod, size) -> int:
        try:
            size = atoi(annotations_of(pod)[SIZE_ANNOTATION])
        except (KeyError, ValueError):
            pass
        scheduled = bool((pod.get("spec") or {}).get("nodeName"))
        return 1 if _is_leader(pod) and not scheduled else size

    def _subgroups(self, top_owner, pod, replicas, where):
        try:
            policy = self._segmentation(top_owner, replicas, where)
        except GroupingError as err:
            raise GroupingError(f"failed to get sub group policy for {where}: {err}") from err
        name = meta_str(pod, "name")
        if policy is None:
            leader = SubGroupMetadata("leader", 1, pods=[name] if _is_leader(pod) else [])
            if replicas - 1 <= 0:
                return [leader]
            return [leader, SubGroupMetadata("workers", replicas - 1, pods=[] if _is_leader(pod) else [name])]
        segment_size, kind = policy
        count = _segment_of(replicas - 1, replicas, segment_size) + 1
        if count > MAX_SEGMENTS:
            raise GroupingError(
                f"number of subgroups segments {count} is greater than max allowed segmentation {MAX_SEGMENTS}"
            )
        try:
            template, found = nested_map(top_owner, "spec", "leaderWorkerTemplate", "workerTemplate")
        except GroupingError as err:
            raise GroupingError(
                f"failed to get segment topology constraints for {where}: "
                f"failed to get workerTemplate from {where}: {err}"
            ) from err
        topology = segment_topology(pod, template, top_owner) if found else None
        return _segments(kind, segment_size, topology, replicas, pod)

    @staticmethod
    def _segmentation(top_owner, replicas, where):
        """``(segment size, policy type)`` or ``None`` when no segment size is defined."""
        size, found = nested_int(top_owner, "spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupSize")
        if not found:
            text = annotations_of(top_owner).get(SEGMENT_SIZE_ANNOTATION)
            source = where
            if text is None:
                try:
                    text, found_text = nested_str(
                        top_owner,
                        "spec",
                        "leaderWorkerTemplate",
                        "workerTemplate",
                        "metadata",
                        "annotations",
                        SEGMENT_SIZE_ANNOTATION,
                    )
                except GroupingError:
                    found_text = False
                text = text if found_text else None
                source = f"workerTemplate of {where}"
            if text is None:
                return None
            try:
                size = atoi(text)
            except ValueError as err:
                raise GroupingError(f"invalid segment size annotation {text} in {source}: {err}") from err
        if size <= 1:
            raise GroupingError(f"segmentSize {size} is not valid. It must be greater than 1")
        if size > replicas:
            raise GroupingError(f"segmentSize {size} is greater than replicasSize {replicas}")
        kind, found = nested_str(top_owner, "spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupPolicyType")
        return size, kind if found else LEADER_WORKER


def _divisible(replicas, size) -> bool:
    return (replicas - 1) % size == 0


def _segment_of(worker_index, replicas, size) -> int:
    if worker_index == 0:
        return 0
    if _divisible(replicas, size):
        return trunc_div(worker_index - 1, size)
    return trunc_div(worker_index, size)


def _segments(kind, size, topology, replicas, pod):
    name = meta_str(pod, "name")
    last = _segment_of(replicas - 1, replicas, size)
    subgroups = [SubGroupMetadata(f"segment-{i}", size, topology=topology) for i in range(last + 1)]
    subgroups[-1].min_available = sum(1 for w in range(replicas) if _segment_of(w, replicas, size) == last)
    try:
        pod_segment = _segment_of(atoi(labels(pod).get(WORKER_INDEX_LABEL, "")), replicas, size)
    except ValueError as err:
        raise GroupingError(f"failed to get worker index from pod {meta_str(pod, 'namespace')}/{name}: {err}") from err
    placed = False
    if kind == LEADER_WORKER:
        first = subgroups[0]
        if _divisible(replicas, size):
            first.min_available += 1
        leader = SubGroupMetadata("leader", 1, parent=first.name)
        workers = SubGroupMetadata("workers", first.min_available - 1, parent=first.name)
        first.min_available, first.min_subgroup = 0, 2  # a parent sub-group takes minSubGroup
        if _is_leader(pod):
            leader.pods.append(name)
            placed = True
        elif pod_segment == 0:
            workers.pods.append(name)
            placed = True
        subgroups += [leader, workers]
    elif kind == LEADER_EXCLUDED:
        if not _divisible(replicas, size):
            raise GroupingError(
                f"replicasSize {replicas} is not divisible by segmentSize {size}. "
                f"LeaderExcluded policy is only supported when replicasSize is divisible "
                f"by segmentSize."
            )
        subgroups.insert(0, SubGroupMetadata("leader", 1))
        if not _is_leader(pod):
            pod_segment += 1
    if not placed:
        subgroups[pod_segment].pods.append(name)
    return subgroups


def build(arguments):
    return LwsGrouper()
