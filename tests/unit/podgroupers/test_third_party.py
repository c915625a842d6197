"""The third-party podgrouper of docs/podgroupers.md, run through the real hub."""

import pytest

from kai.api.podgroup import GroupingError
from kai.testing_podgroupers import group, obj, pod


@pytest.fixture
def grouper(sweep_podgrouper_source):
    """The docs' podgrouper, built as its entry point would build it."""
    module: dict = {}
    exec(compile(sweep_podgrouper_source, "sweep_podgrouper.py", "exec"), module)
    return module["build"]({})


def test_a_sweep_batch_is_one_gang(grouper):
    sweep = obj(
        "tuning.example.com/v1", "Sweep", "lr-search", uid="s1", spec={"parallelTrials": 4, "queue": "research"}
    )
    metadata = group(pod("lr-search-trial-7", owner=sweep), sweep, plugins={"sweep": grouper})
    assert (metadata.name, metadata.min_available, metadata.queue) == ("pg-lr-search-s1", 4, "research")


def test_a_sweep_without_trials_is_reported(grouper):
    sweep = obj("tuning.example.com/v2", "Sweep", "lr-search", uid="s1", spec={})
    with pytest.raises(GroupingError, match="parallelTrials must be a positive integer"):
        group(pod("lr-search-trial-7", owner=sweep), sweep, plugins={"sweep": grouper})
