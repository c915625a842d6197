"""Replays KAI's podgrouper conformance cases through the grouping hub and the installed podgroupers.

A case file is a YAML list of cases (see the podgrouper conformance schema): the objects, which of
them exist in the cluster, the pod, the owners, the grouper flags, and the expected PodGroup
metadata or error. :func:`run_case_file` returns one result per case.
"""

from __future__ import annotations

import copy
from typing import Any

from kai.api.podgroup import GroupingError, PodGroupMetadata, SubGroupMetadata
from kai.common.yamlfile import Fields, describe, read_yaml
from kai.grouping.hub import GroupingConfig, build_hub
from kai.grouping.objects import MemoryObjects

#: Grouper flags of a case that are arguments of one podgrouper: grouper id -> {flag: argument}.
_PLUGIN_ARGUMENTS = {
    "job": {"search_for_legacy_pod_groups": "searchForLegacyPodGroups"},
    "runaijob": {"search_for_legacy_pod_groups": "searchForLegacyPodGroups"},
    "knative": {"gang_schedule_knative": "gangSchedule"},
    "kubeflow-distributed": {"replica_spec_name": "replicaSpecName", "mandatory_spec_names": "mandatorySpecNames"},
    "skiptopowner": {"skip_top_owner_table": "table"},
}
_WHOLE_FLOW = "podgrouper"


class UnsupportedCase(Exception):
    """The case needs something this runner or the installed podgroupers do not offer."""


_DISPATCH = "hub"


def _plugin_arguments(config: dict) -> dict[str, dict]:
    arguments: dict[str, dict] = {}
    for name, flags in _PLUGIN_ARGUMENTS.items():
        arguments[name] = {argument: config[flag] for flag, argument in flags.items() if flag in config}
    return arguments


def _grouping_config(config: dict) -> GroupingConfig:
    defaults = config.get("default_configs_configmap")
    return GroupingConfig(
        queue_label_key=config.get("queue_label_key", "kai.scheduler/queue"),
        node_pool_label_key=config.get("node_pool_label_key", "kai.scheduler/node-pool"),
        defaults_configmap=(defaults.get("namespace", ""), defaults.get("name", "")) if defaults else None,
    )


def group_case(case: dict) -> PodGroupMetadata:
    """Run the grouping call a case describes; raises :class:`GroupingError` as the podgrouper does."""
    objects = case.get("objects") or []
    pod = copy.deepcopy(case["pod"])
    stored = [copy.deepcopy(objects[i]) for i in case.get("in_cluster") or []]
    if case.get("pod_in_cluster"):
        stored.append({"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(pod)})
    config = case.get("grouper_config") or {}
    hub = build_hub(MemoryObjects(stored), _grouping_config(config), _plugin_arguments(config))
    grouper = case["grouper"]
    if grouper == _WHOLE_FLOW:
        return hub.group(pod)
    index = case.get("top_owner")
    top_owner = copy.deepcopy(objects[index]) if index is not None else None
    owners = [pod if ref == "pod" else copy.deepcopy(objects[ref]) for ref in case.get("owners") or []]
    if grouper == _DISPATCH:
        if top_owner is None:
            raise UnsupportedCase("a hub case needs a top owner")
        return hub.metadata(top_owner, pod, owners)
    if grouper not in hub.names:
        raise UnsupportedCase(f"no podgrouper named {grouper!r} is installed")
    return hub.call(grouper, top_owner, pod, owners)


def _mismatch(field: str, expected, got) -> str:
    return f"{field}: expected {expected!r}, got {got!r}"


def _check_topology(field, expected: dict, topology) -> str | None:
    values = {
        "topology": topology.topology,
        "requiredTopologyLevel": topology.required_level,
        "preferredTopologyLevel": topology.preferred_level,
    }
    for key, want in expected.items():
        if values.get(key) != want:
            return _mismatch(f"{field}.{key}", want, values.get(key))
    return None


def _check_subgroup(field: str, expected: dict, subgroup: SubGroupMetadata) -> str | None:
    checks = {
        "name": subgroup.name,
        "minAvailable": subgroup.min_available,
        "minSubGroup": subgroup.min_subgroup,
        "parent": subgroup.parent,
        "pods": list(subgroup.pods),
        "pods_count": len(subgroup.pods),
    }
    for key, want in expected.items():
        if key == "topology":
            if want is None or subgroup.topology is None:
                if want != subgroup.topology:
                    return _mismatch(f"{field}.topology", want, subgroup.topology)
                continue
            reason = _check_topology(f"{field}.topology", want, subgroup.topology)
            if reason:
                return reason
        elif key in checks:
            if checks[key] != want:
                return _mismatch(f"{field}.{key}", want, checks[key])
        else:
            raise UnsupportedCase(f"sub-group assertion {key!r}")
    return None


def _check_subgroups(expected: dict, metadata: PodGroupMetadata) -> str | None:
    subgroups = metadata.subgroups
    wanted = expected.get("subgroups") or []
    if expected.get("subgroups_ordered"):
        for i, want in enumerate(wanted):
            if i >= len(subgroups):
                return _mismatch(f"subgroups[{i}]", want, None)
            reason = _check_subgroup(f"subgroups[{i}]", want, subgroups[i])
            if reason:
                return reason
    else:
        by_name: dict[str, SubGroupMetadata] = {}
        for subgroup in subgroups:
            by_name.setdefault(subgroup.name, subgroup)
        for want in wanted:
            found = by_name.get(want["name"])
            if found is None:
                return _mismatch(f"subgroups[{want['name']}]", "present", [s.name for s in subgroups])
            reason = _check_subgroup(f"subgroups[{want['name']}]", want, found)
            if reason:
                return reason
    for i, subgroup in enumerate(subgroups):
        if "subgroups_each" in expected:
            reason = _check_subgroup(f"subgroups[{i}]", expected["subgroups_each"], subgroup)
            if reason:
                return reason
    return None


def check_metadata(expected: dict, metadata: PodGroupMetadata, pod: dict) -> str | None:
    """The first difference between ``expected`` (a case's ``expected.podgroup``) and ``metadata``."""
    scalar = {
        "name": metadata.name,
        "namespace": metadata.namespace,
        "minAvailable": metadata.min_available,
        "minSubGroup": metadata.min_subgroup,
        "queue": metadata.queue,
        "priorityClassName": metadata.priority_class,
        "preemptibility": metadata.preemptibility,
        "labels": metadata.labels,
        "annotations": metadata.annotations,
        "labels_count": len(metadata.labels),
        "annotations_count": len(metadata.annotations),
        "subgroups_count": len(metadata.subgroups),
        "preemptionDelay": metadata.preemption_delay,
        "stalenessGracePeriod": metadata.staleness_grace_period,
    }
    for key, want in expected.items():
        if key in scalar:
            if scalar[key] != want:
                return _mismatch(key, want, scalar[key])
        elif key == "name_contains":
            if want not in metadata.name:
                return _mismatch("name", f"containing {want!r}", metadata.name)
        elif key == "owner":
            owner = metadata.owner.to_dict()
            for field, value in want.items():
                if owner.get(field) != value:
                    return _mismatch(f"owner.{field}", value, owner.get(field))
        elif key in ("labels_include", "annotations_include"):
            got = metadata.labels if key == "labels_include" else metadata.annotations
            for field, value in want.items():
                if got.get(field) != value:
                    return _mismatch(f"{key[:-8]}[{field}]", value, got.get(field))
        elif key == "topology":
            reason = _check_topology("topology", want, metadata.topology)
            if reason:
                return reason
        elif key == "pod_subgroup":
            meta = pod.get("metadata") or {}
            found = metadata.subgroup_for_pod(meta.get("namespace") or "", meta.get("name") or "")
            name = found.name if found else None
            if name != want:
                return _mismatch("pod_subgroup", want, name)
        elif key not in ("subgroups", "subgroups_ordered", "subgroups_each"):
            raise UnsupportedCase(f"assertion {key!r}")
    return _check_subgroups(expected, metadata)


def run_case(case: dict, file: str) -> dict:
    """Run one case: ``{"name", "file", "status": "passed"|"failed"|"skipped", "reason"}``."""
    result = {"name": case.get("name", "?"), "file": file, "status": "passed", "reason": ""}
    expected = case.get("expected") or {}
    try:
        metadata = group_case(case)
    except UnsupportedCase as err:
        return {**result, "status": "skipped", "reason": str(err)}
    except GroupingError as err:
        if "error" not in expected:
            return {**result, "status": "failed", "reason": f"unexpected error: {err}"}
        want = expected["error"]
        if want is not True and str(want) not in str(err):
            return {**result, "status": "failed", "reason": _mismatch("error", want, str(err))}
        return result
    except Exception as err:  # a podgrouper bug fails its case, not the whole run
        return {**result, "status": "failed", "reason": f"crashed: {type(err).__name__}: {err}"}
    if "error" in expected:
        return {**result, "status": "failed", "reason": _mismatch("error", expected["error"], "success")}
    try:
        reason = check_metadata(expected.get("podgroup") or {}, metadata, case["pod"])
    except UnsupportedCase as err:
        return {**result, "status": "skipped", "reason": f"unsupported {err}"}
    if reason:
        return {**result, "status": "failed", "reason": reason}
    return result


def load_cases(path, data: Any = None) -> list[dict]:
    """The cases of a podgrouper case file (``data``: its content when already read), their shape checked;
    a malformed case raises :class:`~kai.common.errors.ConfigError` naming the file, the case and the field."""
    if data is None:
        data = read_yaml(path, top=(list, type(None)), what="a YAML list of podgrouper cases")
    for i, case in enumerate(data or []):
        _check_case(Fields(case, f"{path}: case {describe(Fields(case, f'{path}: entry {i}').text('name'))}"))
    return data or []


def _check_case(case: Fields) -> None:
    case.text("grouper")
    config = case.entry("grouper_config")
    config.entry("default_configs_configmap")
    for key in ("queue_label_key", "node_pool_label_key"):
        config.text(key, None)
    objects = case.sequence("objects", [])
    for i, obj in enumerate(objects):
        Fields(obj, f"{case.where}: objects[{i}]")
    case.get("pod", dict)
    meta = case.entry("pod").entry("metadata")
    for key in ("name", "namespace"):
        meta.text(key, None)
    case.flag("pod_in_cluster", False)
    indexes = {"top_owner": [case.data.get("top_owner")], "in_cluster": case.sequence("in_cluster", []),
               "owners": [o for o in case.sequence("owners", []) if o != "pod"]}
    for key, values in indexes.items():
        for value in values:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value < len(objects)):
                raise case.fail(key, f"must name objects by their index (0 to {len(objects) - 1}), not "
                                f"{describe(value)}")
    expected = case.entry("expected")
    expected.get("error", (str, int, float, bool), None, "a message or true")
    podgroup = expected.entry("podgroup")
    podgroup.text("name_contains", None)
    for key in ("owner", "labels_include", "annotations_include", "topology", "subgroups_each"):
        podgroup.entry(key)
    for k, want in enumerate(podgroup.sequence("subgroups", [])):
        subgroup = Fields(want, f"{podgroup.where}: subgroups[{k}]")
        if not podgroup.data.get("subgroups_ordered"):
            subgroup.text("name")
        subgroup.entry("topology")
    podgroup.entry("subgroups_each").entry("topology")


def run_case_file(path) -> list[dict]:
    """Run every case of a podgrouper case file."""
    return [run_case(case, str(path)) for case in load_cases(path)]
