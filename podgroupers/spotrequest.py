"""Podgrouper for ``egx.nvidia.io/v1`` SPOTRequest: the default rules with priority class ``inference``."""

from __future__ import annotations

from kai.sdk import INFERENCE_PRIORITY, hookimpl


class SpotRequestGrouper:
    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("egx.nvidia.io", "v1", "SPOTRequest")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        return hub.default_metadata(top_owner, pod, fallback_priority=INFERENCE_PRIORITY)


def build(arguments):
    return SpotRequestGrouper()
