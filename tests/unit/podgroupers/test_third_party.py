"""The third-party podgrouper of docs/podgroupers.md, run through the real hub."""

import pytest

from kai import hookimpl
from kai.api.podgroup import GroupingError
from kai.framework.unstructured import nested_int, nested_str
from kai.testing_podgroupers import group, obj, pod


class SweepGrouper:
    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("tuning.example.com", "*", "Sweep")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod, owners)
        trials, found = nested_int(top_owner, "spec", "parallelTrials")
        if not found or trials <= 0:
            raise GroupingError(f"sweep {metadata.name}: spec.parallelTrials must be a positive integer")
        metadata.min_available = trials
        queue, found = nested_str(top_owner, "spec", "queue")
        if found and queue:
            metadata.queue = queue
        return metadata


def test_a_sweep_batch_is_one_gang():
    sweep = obj(
        "tuning.example.com/v1", "Sweep", "lr-search", uid="s1", spec={"parallelTrials": 4, "queue": "research"}
    )
    metadata = group(pod("lr-search-trial-7", owner=sweep), sweep, plugins={"sweep": SweepGrouper()})
    assert (metadata.name, metadata.min_available, metadata.queue) == ("pg-lr-search-s1", 4, "research")


def test_a_sweep_without_trials_is_reported():
    sweep = obj("tuning.example.com/v2", "Sweep", "lr-search", uid="s1", spec={})
    with pytest.raises(GroupingError, match="parallelTrials must be a positive integer"):
        group(pod("lr-search-trial-7", owner=sweep), sweep, plugins={"sweep": SweepGrouper()})
