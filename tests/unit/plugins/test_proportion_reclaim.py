"""proportion's reclaim rules: KAI's two strategies, the saturation check, the multiplier argument."""

import math

import attrs
import pytest

from kai import testing as kt
from kai.api import Queue, QuotaSpec
from kai.plugins.proportion import build
from kai.plugins.proportion.reclaim import _fits_strategy, _leveled, _saturation
from kai.plugins.proportion.shares import QueueShare


def _share(name, deserved, fair_share, parent=None):
    qs = QueueShare(Queue(name, parent, gpu=QuotaSpec(deserved, -1, 1.0)))
    qs.fair_share = [-1.0, -1.0, fair_share]
    return qs


@pytest.mark.parametrize("left, fits", [
    ([0, 0, 5.0], True),   # above its fair share (allocatable 4): maintain fair share holds
    ([0, 0, 4.0], False),  # at its fair share, and the reclaimer would go over its own quota
])
def test_maintain_fair_share_strategy(left, fits):
    mine, theirs = _share("mine", 1.0, 2.0), _share("theirs", 2.0, 4.0)
    assert _fits_strategy(mine, [0, 0, 1.0], [0, 0, 1.0], theirs, left) is fits


def test_guarantee_deserved_quota_strategy_lets_a_queue_within_quota_reclaim_above_the_others_quota():
    mine, theirs = _share("mine", 2.0, 1.0), _share("theirs", 2.0, 4.0)
    # the victim side is within its fair share (4) but above its quota (2); the reclaimer stays within 2
    assert _fits_strategy(mine, [0, 0, 1.0], [0, 0, 1.0], theirs, [0, 0, 3.0])
    assert not _fits_strategy(mine, [0, 0, 1.0], [0, 0, 1.0], theirs, [0, 0, 2.0])
    assert not _fits_strategy(mine, [0, 0, 2.0], [0, 0, 1.0], theirs, [0, 0, 3.0])


def test_saturation_ratio_of_zero_and_unlimited_fair_shares():
    assert _saturation(3.0, 2.0) == 1.5
    assert _saturation(1.0, 0.0) == math.inf and _saturation(0.0, 0.0) == 0.0
    assert _saturation(5.0, -1.0) == 0.0


def test_queues_compared_where_the_paths_part():
    snap = kt.cluster(queues=[kt.queue("d1"), kt.queue("d2"), kt.queue("a", parent="d1"), kt.queue("b", parent="d1"),
                              kt.queue("c", parent="d2")])
    session = kt.run(snap, plugins=["proportion"], actions=())
    assert _leveled(session, "a", "b") == ("a", "b")
    assert _leveled(session, "a", "c") == ("d1", "d2")


@pytest.mark.parametrize("arguments, multiplier", [
    ({}, 1.0), ({"reclaimerSaturationMultiplier": "1.5"}, 1.5), ({"relcaimerSaturationMultiplier": 2}, 2.0),
    ({"reclaimerSaturationMultiplier": 0.5}, 1.0),
])
def test_saturation_multiplier_takes_both_spellings_and_at_least_one(arguments, multiplier):
    assert build(arguments).saturation_multiplier == multiplier


def test_capacity_messages_name_the_queue_by_its_display_name_and_details_by_its_name():
    q = attrs.evolve(kt.queue("team-a", limit_gpus=1), display_name="Team A")
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)], queues=[q], jobs=[kt.job("j", "team-a", gpus=2)])
    session = kt.run(snap)
    [error] = session.job_fit_errors["default/j"]
    assert error.reason == "OverLimit"
    assert error.messages[0].startswith("Team A quota has reached the allowable limit of GPUs. Limit is 1 GPUs")
    assert error.details.name == "team-a" and error.details.limits[2] == 1 and error.details.job_requested[2] == 2
