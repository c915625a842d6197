"""Fair-share division: hand-computed examples in KAI's semantics, run on both implementations.

Most single-level cases are KAI's own ``resource_division`` tests with their numbers; where KAI
starts from a pre-set fair share equal to the deserved quota, the same case is expressed here as a
larger ``total`` that first pays the quota.
"""

from __future__ import annotations

import importlib

import pytest

U = -1  # unlimited

IMPLEMENTATIONS = ["kai._native.division_py", "kai._native.division"]


@pytest.fixture(params=IMPLEMENTATIONS, ids=["pure", "native"])
def impl(request):
    try:
        return importlib.import_module(request.param)
    except ImportError:
        pytest.skip(f"{request.param} is not built")


def q(deserved, request, weight=1, limit=U, priority=0, usage=0.0):
    return dict(deserved=deserved, request=request, weight=weight, limit=limit, priority=priority, usage=usage)


def level(impl, total, queues, k_value=0.0, rank=None):
    """Fair shares of ``queues`` (``q(...)`` dicts) sharing ``total``; rank defaults to list order."""
    return impl.divide_level(
        total,
        [x["deserved"] for x in queues],
        [x["limit"] for x in queues],
        [x["weight"] for x in queues],
        [x["priority"] for x in queues],
        [x["request"] for x in queues],
        [x["usage"] for x in queues],
        list(range(len(queues))) if rank is None else rank,
        k_value,
    )


# --- KAI: "single queue within quota" (deserved 3, weight 0, request 2)


@pytest.mark.parametrize(
    "total, change, share",
    [
        (2, {}, 2),  # gives requested, nothing left
        (3, {}, 2),  # gives requested, 1 left
        (3, {"limit": 2}, 2),
        (1, {}, 2),  # over-subscribed: still up to deserved
        (7, {"request": 5}, 3),  # up to the quota (weight 0: no over-quota)
        (2, {"deserved": 1.5}, 1.5),
        (2, {"request": 1.5}, 1.5),
        (2, {"deserved": 0}, 0),
    ],
)
def test_single_queue_within_quota(impl, total, change, share):
    queue = q(deserved=3, request=2, weight=0) | change
    assert level(impl, total, [queue]) == [share]


# --- KAI: "single queue over quota" (deserved 3 already paid, weight 1, request 5)


@pytest.mark.parametrize(
    "over_quota, change, share",
    [
        (2, {}, 5),
        (3, {}, 5),
        (2, {"limit": 4}, 4),
        (2, {"weight": 0}, 3),
        (2, {"request": 4.5}, 4.5),
        (0.5, {}, 3.5),  # the last fraction goes out in the rounding phase
        (0, {}, 3),
        (10, {"weight": 0}, 3),
    ],
)
def test_single_queue_over_quota(impl, over_quota, change, share):
    queue = q(deserved=3, request=5) | change
    assert level(impl, 3 + over_quota, [queue]) == [share]


def test_single_queue_without_quota_takes_over_quota(impl):
    assert level(impl, 6, [q(deserved=0, request=5)]) == [5]


def test_weight_zero_gets_no_over_quota_beside_another(impl):
    queues = [q(deserved=3, request=5, weight=0), q(deserved=3, request=3)]
    assert level(impl, 16, queues) == [3, 3]


# --- KAI: "two queues" table (deserved 2, weight 2, request 6 each)


@pytest.mark.parametrize(
    "total, changes, shares",
    [
        (15, {}, [6, 6]),
        (12, {}, [6, 6]),
        (8, {"weight": [1, 3]}, [3, 5]),
        (12, {"limit": [5, U]}, [5, 6]),
        # 7 over quota by 1:4 -> 1.4 and 5.6 -> floors 1 and 5; the larger rest (0.6) wins the last unit.
        (11, {"weight": [1, 4], "request": [10, 10]}, [3, 8]),
        # equal rests (0.5 each): the older queue wins.
        (11, {}, [6, 5]),
        (4, {"priority": [1, 2]}, [2, 2]),  # priority does not affect deserved
        (6, {"priority": [1, 2]}, [2, 4]),  # ... but goes first over quota
        (6, {"priority": [1, 2], "weight": [100, 1]}, [2, 4]),  # whatever the weights
    ],
)
def test_two_queues(impl, total, changes, shares):
    queues = [q(deserved=2, request=6, weight=2) for _ in range(2)]
    for key, values in changes.items():
        for queue, value in zip(queues, values):
            queue[key] = value
    assert level(impl, total, queues) == shares


def test_rounding_phase_runs_per_priority(impl):
    queues = [
        q(deserved=2, request=5, weight=2, priority=2),
        q(deserved=2, request=5, weight=2, priority=2),
        q(deserved=1, request=0, weight=2, priority=1),
    ]
    assert level(impl, 5, queues) == [3, 2, 0]


# --- KAI: CPU (millicores) and memory cases


def test_cpu_one_queue(impl):
    queue = q(deserved=3000, request=2000, weight=3000)
    assert level(impl, 3000, [queue]) == [2000]
    assert level(impl, 1000, [queue]) == [2000]  # deserved granted even above the total


def test_cpu_queue_without_quota_or_weight_gets_nothing(impl):
    queues = [q(deserved=5000, request=10000, weight=5000), q(deserved=0, request=5000, weight=0)]
    assert level(impl, 10000, queues) == [10000, 0]


@pytest.mark.parametrize(
    "total, requests, limits, shares",
    [
        (10000, [5000, 5000, 5000], [U, U, U], [5000, 5000, 5000]),  # over-subscribed quotas
        (18000, [6000, 6000, 6000], [U, U, U], [6000, 6000, 6000]),
        (10000, [7000, 2000, 2000], [U, U, U], [6000, 2000, 2000]),
        (10000, [7000, 5000, 2000], [U, U, U], [5000, 5000, 2000]),
        (10000, [7000, 2000, 2000], [7000, U, U], [6000, 2000, 2000]),
    ],
)
def test_three_queues_cpu(impl, total, requests, limits, shares):
    queues = [q(deserved=5000, request=r, weight=5000, limit=m) for r, m in zip(requests, limits)]
    assert level(impl, total, queues) == shares


def test_three_queues_one_without_quota(impl):
    queues = [q(deserved=5000, request=5000, weight=5000) for _ in range(3)]
    queues[1]["deserved"] = 0
    assert level(impl, 10000, queues) == [5000, 0, 5000]


# --- KAI: SetResourcesShare table (one resource at a time)


@pytest.mark.parametrize(
    "total, queues, shares",
    [
        (10, [q(1, 1)], [1]),
        (2500, [q(200, 500)], [500]),
        (1000, [q(1000, 500)], [500]),
        (1, [q(2, 3)], [2]),
        (1000, [q(20000, 2500)], [2500]),
        (3000, [q(1000, 5000)], [3000]),
        (2500, [q(200, 500), q(200, 500)], [500, 500]),
        (10, [q(1, 8), q(1, 8)], [5, 5]),
        (3000, [q(2000, 3000), q(2000, 3000)], [2000, 2000]),
        (1000, [q(1000, 5000), q(1000, 5000)], [1000, 1000]),
        (1000, [q(250, 5000, 1), q(150, 5000, 2)], [450, 550]),
        (1000, [q(250, 5000, 1), q(150, 5000, 2, limit=400)], [600, 400]),
        (9999, [q(1000, 10000) for _ in range(3)], [3333, 3333, 3333]),
        (9999, [q(0, 10000, 6), q(0, 10000, 2), q(0, 10000, 1)], [6666, 2222, 1111]),
        (
            45,
            [q(12, 32.54999999999996, 12), q(7, 9.5, 7), q(2, 1.65, 2, limit=2)],
            [32.54999999999996, 9.5, 1.65],
        ),
        (5, [q(2, 3, 2), q(2, 3, 2)], [3, 2]),
    ],
)
def test_kai_set_resources_share_table(impl, total, queues, shares):
    assert level(impl, total, queues) == shares


def test_kai_fairshare_simulator_example(impl):
    queues = [q(deserved=10, request=100000, weight=3), q(deserved=10, request=100000, weight=1)]
    assert level(impl, 100, queues) == [70, 30]


# --- further semantics


def test_unlimited_deserved_means_everything_requested(impl):
    assert level(impl, 10, [q(U, 7)]) == [7]
    assert level(impl, 10, [q(U, 7), q(U, 8)]) == [7, 8]  # capped by the request, not by what is left
    assert level(impl, 10, [q(U, 70)]) == [10]


def test_higher_priority_bucket_takes_the_remainder_first(impl):
    queues = [q(0, 100, priority=1), q(0, 100, priority=2)]
    assert level(impl, 10, queues) == [0, 10]


def test_rounding_remainder_of_a_higher_bucket_flows_to_lower_buckets(impl):
    # Priority 2 splits 3 as 1.5 + 1.5 -> floors 1 + 1; the remaining unit reaches the priority-1
    # bucket's rounds before any rounding phase, so the lower-priority queue takes it.
    queues = [q(0, 100, priority=2), q(0, 100, priority=2), q(0, 100, priority=1)]
    assert level(impl, 3, queues) == [1, 1, 1]
    assert level(impl, 3, queues[:2]) == [2, 1]


def test_satisfied_queue_frees_its_share_for_another_round(impl):
    # 12 over quota by thirds: the first queue needs only 1, the other two split the rest 5.5 each
    # (floors 5 + 5, then one unit to the older of the equal rests).
    queues = [q(0, 1), q(0, 100), q(0, 100)]
    assert level(impl, 12, queues) == [1, 6, 5]


def test_leftover_ties_broken_by_rank_then_index(impl):
    queues = [q(0, 100) for _ in range(3)]  # 10 by thirds: floors 3, one unit to the winner
    assert level(impl, 10, queues, rank=[2, 0, 1]) == [3, 4, 3]
    assert level(impl, 10, queues, rank=[1, 1, 0]) == [3, 3, 4]
    assert level(impl, 10, queues, rank=[1, 0, 0]) == [3, 4, 3]


def test_rounding_phase_ignores_the_request(impl):
    # Shares 2.4 each -> floors 2 + 2, rests 0.4 each; the last 0.8 goes whole to the older queue,
    # above its request (and limit) of 2.5: KAI's rounding phase does not check either.
    queues = [q(0, 2.5), q(0, 100)]
    assert level(impl, 4.8, queues) == [2.8, 2]
    queues[0]["limit"] = 2.5
    assert level(impl, 4.8, queues) == [2.8, 2]


def test_usage_term_shifts_over_quota_weights(impl):
    # k=1: normalised weights 0.5 each become 0.5 + (0.5 - usage): 0.2 and 0.8.
    queues = [q(0, 100, usage=0.8), q(0, 100, usage=0.2)]
    assert level(impl, 10, queues, k_value=1.0) == [2, 8]
    assert level(impl, 10, queues, k_value=0.0) == [5, 5]


def test_usage_term_floors_at_zero(impl):
    # k=2: the heavy user's weight 0.5 + 2 * (0.5 - 1) < 0 becomes 0; once the other queue is
    # satisfied, the next round counts the heavy user alone (weight 1 + 2 * (1 - 1) = 1).
    queues = [q(0, 100, usage=1.0), q(0, 4, usage=0.0)]
    assert level(impl, 10, queues, k_value=2.0) == [6, 4]


def test_usage_term_can_leave_a_bucket_without_over_quota(impl):
    # k=2 and full usage: both weights 0.5 + 2 * (0.5 - 1) floor at 0, so the bucket takes nothing
    # and the amount stays undivided (or goes to a lower-priority bucket).
    queues = [q(0, 100, usage=1.0), q(0, 100, usage=1.0)]
    assert level(impl, 10, queues, k_value=2.0) == [0, 0]
    queues.append(q(0, 100, priority=-1))
    assert level(impl, 10, queues, k_value=2.0) == [0, 0, 10]


def test_empty_and_mismatched_inputs(impl):
    assert impl.divide_level(5, [], [], [], [], [], [], []) == []
    with pytest.raises(ValueError, match="request"):
        impl.divide_level(5, [1], [U], [1], [0], [], [0], [0])


# --- trees


def tree(impl, total, parent, queues, k_value=0.0, rank=None):
    return impl.divide_tree(
        total,
        parent,
        [x["deserved"] for x in queues],
        [x["limit"] for x in queues],
        [x["weight"] for x in queues],
        [x["priority"] for x in queues],
        [x["request"] for x in queues],
        [x["usage"] for x in queues],
        list(range(len(queues))) if rank is None else rank,
        k_value,
    )


def test_tree_children_share_their_parents_fair_share(impl):
    # Top level: 0 and 3 deserve 5 each of 10. Under 0: deserved 1 + 1, then 3 over quota by halves
    # (1.5 each: floors 1 + 1, the last unit to the older child).
    parent = [-1, 0, 0, -1]
    queues = [q(5, 10), q(1, 3), q(1, 10), q(5, 10)]
    assert tree(impl, 10, parent, queues) == [5, 3, 2, 5]


def test_tree_three_levels_any_index_order(impl):
    # department 2 (10 of 20 by equal weights with department 0), project 3 under it, leaves 1 and 4.
    parent = [-1, 3, -1, 2, 3]
    queues = [q(0, 100), q(U, 4), q(0, 100), q(2, 100), q(0, 100, weight=3)]
    # project 3 gets its parent's 10; leaf 1 (unlimited deserved) takes its 4; leaf 4 the other 6.
    assert tree(impl, 20, parent, queues) == [10, 4, 10, 10, 6]


def test_tree_limit_of_a_parent_caps_its_subtree(impl):
    parent = [-1, 0, -1]
    queues = [q(0, 100, limit=3), q(0, 100), q(0, 100)]
    assert tree(impl, 10, parent, queues) == [3, 3, 7]


def test_tree_rejects_bad_parents(impl):
    queues = [q(1, 1), q(1, 1)]
    with pytest.raises(ValueError, match="cycle"):
        tree(impl, 5, [1, 0], queues)
    with pytest.raises(ValueError, match="not a queue index"):
        tree(impl, 5, [-1, 7], queues)
    with pytest.raises(ValueError, match="not a queue index"):
        tree(impl, 5, [-1, 1], queues)
    with pytest.raises(ValueError, match="parent"):
        tree(impl, 5, [-1], queues)
    assert impl.divide_tree(5, [], [], [], [], [], [], [], []) == []


# --- the rule that bounded each fair share (divide_tree_explained)


def explained(impl, total, queues, k_value=0.0):
    n = len(queues)
    return impl.divide_tree_explained(
        total, [-1] * n, [x["deserved"] for x in queues], [x["limit"] for x in queues],
        [x["weight"] for x in queues], [x["priority"] for x in queues], [x["request"] for x in queues],
        [x["usage"] for x in queues], list(range(n)), k_value,
    )


@pytest.mark.parametrize(
    "total, queues, k_value, shares, reasons",
    [
        # Higher priority takes the whole remainder; the lower one is left with nothing.
        (10, [q(0, 10, priority=1), q(0, 10)], 0.0, [10, 0], ["REQUESTED", "HIGHER_PRIORITY"]),
        # Deserved quotas over-subscribe the amount: both keep their quota, no over-quota.
        (4, [q(3, 5), q(3, 5)], 0.0, [3, 3], ["DESERVED_ONLY", "DESERVED_ONLY"]),
        # A limit below the request.
        (10, [q(0, 5, limit=2), q(0, 1)], 0.0, [2, 1], ["LIMIT", "REQUESTED"]),
        # Weight 0 keeps its deserved quota only; the weighted sibling takes the rest.
        (10, [q(1, 5, weight=0), q(0, 20)], 0.0, [1, 9], ["NO_WEIGHT", "OVER_QUOTA"]),
        # Equal weights split the remainder.
        (10, [q(0, 10), q(0, 10)], 0.0, [5, 5], ["OVER_QUOTA", "OVER_QUOTA"]),
        # Past usage leans the split away from the heavy user.
        (10, [q(0, 10, usage=0.5), q(0, 10)], 1.0, [3, 7], ["USAGE", "OVER_QUOTA"]),
    ],
)
def test_reason_of_each_fair_share(impl, total, queues, k_value, shares, reasons):
    fs, codes = explained(impl, total, queues, k_value)
    assert fs == shares
    assert codes == [getattr(impl, f"REASON_{r}") for r in reasons]
    assert all(isinstance(impl.REASONS[c], str) for c in codes)
