"""Podgroupers that skip the top owner: Argo Workflow, Kubeflow Trainer TrainJob, Dynamo
DynamoGraphDeployment and Run:ai workloads (WorkloadRunner among them) wrap another workload (a Pod,
a JobSet, a Grove PodCliqueSet...). The owner below the top one is grouped by the podgrouper the hub
finds for its kind (exact kind, any version, then the fallback with its Karta), after inheriting the
skipped owner's labels and annotations it lacks, and the priority class and preemptibility the
defaults ConfigMap gives the skipped owner's kind (as labels it lacks). A wrapper inside a wrapper is
skipped in turn."""

from __future__ import annotations

import copy

from kai.sdk import PREEMPTIBILITY_LABEL, PRIORITY_CLASS_LABEL, GroupingError, hookimpl, meta_str

RUNAI_WORKLOADS = (
    "TrainingWorkload",
    "InteractiveWorkload",
    "DistributedWorkload",
    "InferenceWorkload",
    "DistributedInferenceWorkload",
    "WorkloadRunner",
)


def _inherit(target: dict, source: dict, key: str) -> None:
    source_values = (source.get("metadata") or {}).get(key)
    if not source_values:
        return
    meta = target.setdefault("metadata", {})
    values = meta.get(key)
    if values is None:
        meta[key] = dict(source_values)
        return
    for name, value in source_values.items():
        values.setdefault(name, value)


def _kind_default_labels(hub, skipped: dict, targets) -> None:
    try:
        priority, preemptibility = hub.kind_defaults(skipped)
    except GroupingError:
        return
    for target in targets:
        target_labels = target.setdefault("metadata", {}).setdefault("labels", {})
        if priority:
            target_labels.setdefault(PRIORITY_CLASS_LABEL, priority)
        if preemptibility:
            target_labels.setdefault(PREEMPTIBILITY_LABEL, preemptibility)


class SkipTopOwnerGrouper:
    """Hands the pod on to the podgrouper of the next owner down (the pod itself for a direct child).

    ``table`` (``{(group, version, kind): podgrouper name}``) replaces the hub's exact-kind table.
    """

    def __init__(self, kinds, table=None):
        self.kinds = [tuple(kind) for kind in kinds]
        self.table = table

    @hookimpl
    def kai_podgrouper_kinds(self):
        return self.kinds

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        if len(owners) > 1:
            below = owners[-2]
            api_version, kind = str(below.get("apiVersion") or ""), str(below.get("kind") or "")
        else:
            below = pod
            api_version, kind = str(pod.get("apiVersion") or "v1"), str(pod.get("kind") or "Pod")
        try:
            owner = hub.get(api_version, kind, meta_str(below, "namespace"), meta_str(below, "name"))
        except GroupingError as err:
            raise GroupingError(f"failed to get last owner: {err}") from err
        owner["apiVersion"], owner["kind"] = owner.get("apiVersion") or api_version, owner.get("kind") or kind
        below_owners = [copy.deepcopy(o) for o in owners[:-1]]
        if top_owner is not None:
            _kind_default_labels(hub, top_owner, [owner, *below_owners[-1:]])
            _inherit(owner, top_owner, "labels")
            _inherit(owner, top_owner, "annotations")
        return hub.dispatch(owner, pod, below_owners, table=self.table)


def build(arguments):
    """Skip-top-owner for the kinds in ``arguments["kinds"]`` (``[[group, version, kind], ...]``); an optional
    ``arguments["table"]`` (``[{group, version, kind, grouper}, ...]``) names the podgrouper per kind."""
    table = arguments.get("table")
    if table is not None:
        table = {(e.get("group", ""), e.get("version", ""), e.get("kind", "")): e["grouper"] for e in table}
    return SkipTopOwnerGrouper(arguments.get("kinds") or [], table)


def build_workflow(arguments):
    return SkipTopOwnerGrouper([("argoproj.io", "v1alpha1", "Workflow")])


def build_trainjob(arguments):
    return SkipTopOwnerGrouper([("trainer.kubeflow.org", "v1alpha1", "TrainJob")])


def build_dynamographdeployment(arguments):
    return SkipTopOwnerGrouper([("nvidia.com", "*", "DynamoGraphDeployment")])


def build_runai_workloads(arguments):
    return SkipTopOwnerGrouper([("run.ai", "*", kind) for kind in RUNAI_WORKLOADS])
