"""Podgroupers that skip the top owner: Argo Workflow, Kubeflow Trainer TrainJob, Dynamo
DynamoGraphDeployment and Run:ai workloads wrap another workload (a Pod, a JobSet, a Grove
PodCliqueSet...). The owner below the top one is grouped by its own kind's podgrouper, after
inheriting the skipped owner's labels and annotations it lacks."""

from __future__ import annotations

from kai import hookimpl
from kai.api.podgroup import GroupingError
from kai.grouping.unstructured import meta_str

RUNAI_WORKLOADS = (
    "TrainingWorkload",
    "InteractiveWorkload",
    "DistributedWorkload",
    "InferenceWorkload",
    "DistributedInferenceWorkload",
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
        if top_owner is not None:
            _inherit(owner, top_owner, "labels")
            _inherit(owner, top_owner, "annotations")
        return hub.dispatch(owner, pod, owners[:-1], table=self.table)


def build(args):
    """Skip-top-owner for the kinds in ``args["kinds"]`` (``[[group, version, kind], ...]``); an optional
    ``args["table"]`` (``[{group, version, kind, grouper}, ...]``) names the podgrouper per kind."""
    table = args.get("table")
    if table is not None:
        table = {(e.get("group", ""), e.get("version", ""), e.get("kind", "")): e["grouper"] for e in table}
    return SkipTopOwnerGrouper(args.get("kinds") or [], table)


def build_workflow(args):
    return SkipTopOwnerGrouper([("argoproj.io", "v1alpha1", "Workflow")])


def build_trainjob(args):
    return SkipTopOwnerGrouper([("trainer.kubeflow.org", "v1alpha1", "TrainJob")])


def build_dynamographdeployment(args):
    return SkipTopOwnerGrouper([("nvidia.com", "v1alpha1", "DynamoGraphDeployment")])


def build_runai_workloads(args):
    return SkipTopOwnerGrouper([("run.ai", "*", kind) for kind in RUNAI_WORKLOADS])
