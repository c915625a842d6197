"""The fields of the conformance scenario format, and what a scenario needs that the kernel lacks.

This project extends the format with PodDisruptionBudgets (``disruption_budgets``), KAI's
``preemptibility`` of a job (``semi-preemptible``), a queue's GPU quota per resource type (``resource_types``),
and reservations: the configuration's ``reservation`` policy, a job's ``max_runtime_seconds`` and
``reservation``, and an expected job's ``reserved_nodes``.

A scenario is run only when every field it sets is one the loader reads. :func:`needs` walks the raw
scenario and names, for each field or value that is part of the format but not built yet, its
feature tag (``needs: numa``), and for each field outside the format the field itself, so that no
scenario passes because a field it relies on was ignored.
"""

from __future__ import annotations

from typing import Any

#: The fields of each part of a scenario (SCHEMA.md §1-§10 and its v0.17 additions, and this project's DRA
#: extension: ``device_classes``, ``resource_claims``, node ``devices``, task ``resource_claims``; its budget
#: extension: ``disruption_budgets``, job ``preemptibility``; its GPU type extension: queue ``resource_types``;
#: its reservation extension: config ``reservation``, job ``max_runtime_seconds`` and ``reservation``, result
#: ``reserved_nodes``).
FIELDS: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in {
    "scenario": "name source actions mode simulation config topologies nodes queues jobs expected features notes "
                "device_classes resource_claims disruption_budgets",
    "simulation": "rounds_until_match rounds_after_match",
    "config": "plugins predicates max_consolidation_preemptees allow_consolidating_reclaim "
              "staleness_grace_period_seconds reservation",
    "topology": "name levels",
    "node": "gpus cpu_millis memory_bytes gpu_memory_mib mig_strategy mig_instances labels max_pods "
            "gpu_memory_synced numa devices",
    "queue": "name parent implicit priority deserved_gpus max_allowed_gpus over_quota_weight deserved_cpu_millis "
             "max_allowed_cpu_millis deserved_memory_bytes max_allowed_memory_bytes preempt_min_runtime_seconds "
             "reclaim_min_runtime_seconds resource_types",
    "resource_type": "name node_selector deserved_gpus max_allowed_gpus over_quota_weight",
    "job": "name queue priority preemptible created_minutes_ago min_available topology_constraint pod_sets subgroups "
           "gpus_per_task gpu_memory_mib_per_task cpu_millis_per_task memory_bytes_per_task best_effort "
           "stale_for_seconds deleting tasks preemption_delay_seconds staleness_grace_period_seconds qos_class "
           "gpu_devices_per_task min_subgroup preemptibility max_runtime_seconds reservation",
    "job_reservation": "nodes expires_in_seconds",
    "subgroup": "name topology_constraint pod_sets subgroups min_subgroup",
    "pod_set": "name min_available topology_constraint",
    "topology_constraint": "topology required_level preferred_level",
    "task": "name state node gpu_groups sub_group gpus mig legacy_mig node_affinity pod_labels "
            "pod_affinity_topology_key pod_anti_affinity_topology_key priority numa_placement resource_claims",
    "expected": "jobs tasks nodes max_binds max_evictions max_pipelines",
    "result": "status node gpus_required gpus_accepted cpu_millis_required memory_bytes_required "
              "last_start_older_than_seconds fit_error_message numa_zones reserved_nodes",
    "node_result": "idle_gpus releasing_gpus numa_zones_available",
    "device_class": "name selectors extended_resource_name",
    "node_device": "driver count attributes capacity",
    "resource_claim": "name device_class count all selectors admin_access labels allocation reserved_for "
                      "other_consumers",
    "claim_allocation": "node devices",
    "disruption_budget": "name pod_labels disruptions_allowed",
}.items()}

#: Fields (``part.field``) and task states of the format that the kernel does not build yet, with their
#: feature tags (``state.StuckInReleasing``: "stuck_in_releasing"). An entry leaves this table when its
#: feature is built; today every field of the format is.
UNBUILT: dict[str, str] = {}


def needs(data: Any) -> list[str]:
    """What the raw scenario ``data`` needs that is not built, in order of first use (empty: nothing)."""
    found: dict[str, None] = {}
    _part(found, "scenario", data, "")
    return list(found)


def _part(found: dict, part: str, data: Any, where: str) -> None:
    """Record the unbuilt and unknown fields of one mapping (malformed parts are the loader's to report)."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if value is None:
            continue
        if key not in FIELDS[part]:
            found[f"field {where}{key} (not in the scenario format)"] = None
        elif f"{part}.{key}" in UNBUILT:
            found[UNBUILT[f"{part}.{key}"]] = None
    for key, child in _CHILDREN.get(part, {}).items():
        value = data.get(key)
        path = f"{where}{key}"
        if child in _MAPS:
            for name, item in (value.items() if isinstance(value, dict) else ()):
                _part(found, child, item, f"{path}.{name}.")
        elif isinstance(value, list):
            for item in value:
                _part(found, child, item, f"{path}[].")
        else:
            _part(found, child, value, f"{path}.")
    if part == "task" and f"state.{data.get('state')}" in UNBUILT:
        found[UNBUILT[f"state.{data['state']}"]] = None
    if part == "result" and f"state.{data.get('status')}" in UNBUILT:
        found[UNBUILT[f"state.{data['status']}"]] = None


#: Which field of a part holds which sub-part (lists, or mappings of names for the parts in _MAPS).
_CHILDREN: dict[str, dict[str, str]] = {
    "scenario": {"simulation": "simulation", "config": "config", "topologies": "topology", "nodes": "node",
                 "queues": "queue", "jobs": "job", "expected": "expected", "device_classes": "device_class",
                 "resource_claims": "resource_claim", "disruption_budgets": "disruption_budget"},
    "node": {"devices": "node_device"},
    "queue": {"resource_types": "resource_type"},
    "resource_claim": {"allocation": "claim_allocation"},
    "job": {"topology_constraint": "topology_constraint", "subgroups": "subgroup", "pod_sets": "pod_set",
            "tasks": "task", "reservation": "job_reservation"},
    "subgroup": {"topology_constraint": "topology_constraint", "subgroups": "subgroup", "pod_sets": "pod_set"},
    "pod_set": {"topology_constraint": "topology_constraint"},
    "expected": {"jobs": "result", "tasks": "result", "nodes": "node_result"},
}
_MAPS = {"node", "result", "node_result"}
