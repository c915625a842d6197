"""Podgrouper for Azure ML jobs (``amlarc.azureml.com/v1alpha1`` AmlJob): the gang is the node count."""

from __future__ import annotations

from kai.sdk import FieldError, GroupingError, hookimpl, nested_int


class AmlGrouper:
    """Default rules with ``minMember`` = ``spec.job.options.envs.AZUREML_NODE_COUNT`` (required)."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("amlarc.azureml.com", "v1alpha1", "AmlJob")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        try:
            count, found = nested_int(top_owner, "spec", "job", "options", "envs", "AZUREML_NODE_COUNT")
        except FieldError:
            found = False
        if not found:
            raise GroupingError("azureml envs count not found in spec")
        metadata.min_available = count
        return metadata


def build(arguments):
    return AmlGrouper()
