"""GPU quota per resource type: validation, division per type, placement, queue order and reclaim."""

import pytest

from kai import testing as kt
from kai.api import UNLIMITED
from kai.framework import Session

A100 = {"gpu": "A100"}
H100 = {"gpu": "H100"}
PLUGINS = ["proportion", "predicates", "nodeplacement"]


def a100(deserved=0.0, limit=UNLIMITED, weight=1.0):
    return kt.gpu_type("a100", A100, deserved, limit, weight)


def h100(deserved=0.0, limit=UNLIMITED, weight=1.0):
    return kt.gpu_type("h100", H100, deserved, limit, weight)


def nodes(a=4, h=4):
    return [kt.node("h1", gpus=h, labels=H100), kt.node("a1", gpus=a, labels=A100)]


def opened(snapshot):
    """An open session on ``snapshot`` (proportion keeps its shares until the session closes)."""
    return Session(snapshot, kt.plugin_manager(PLUGINS, ())).open()


def problems(*queues):
    snap = kt.cluster(nodes(), queues=list(queues))
    return {p.name: p.message for p in snap.problems}


@pytest.mark.parametrize("types, message", [
    ([a100(), a100()], "a resource type is given twice"),
    ([kt.gpu_type("x", {})], "resource type x needs a name and a node selector"),
    ([a100(), kt.gpu_type("pool", {"pool": "big"})], "resource types a100 and pool have node selectors one node "
                                                      "could match"),
    ([a100(deserved=-2)], "resource type a100 gpu deserved is negative (-2); only -1 (unlimited) may be negative"),
    ([a100(deserved=4, limit=2)], "resource type a100 gpu limit 2 is below its deserved quota 4"),
])
def test_bad_resource_types_make_the_queue_invalid(types, message):
    assert problems(kt.queue("q", resource_types=types)) == {"q": message}


def test_a_type_named_again_needs_the_same_selector_and_no_other_type_may_overlap_it():
    found = problems(kt.queue("q1", resource_types=[a100()]),
                     kt.queue("q2", resource_types=[kt.gpu_type("a100", {"gpu": "A100-80GB"})]),
                     kt.queue("q3", resource_types=[kt.gpu_type("big", {"pool": "big"})]),
                     kt.queue("q4", resource_types=[a100(), h100()]))
    assert found == {"q2": "resource type a100 has another node selector than where it was first given",
                     "q3": "resource types a100 and big have node selectors one node could match"}


def test_at_most_thirteen_types():
    types = [kt.gpu_type(f"t{i}", {"gpu": f"m{i}"}) for i in range(14)]
    assert problems(kt.queue("q", resource_types=types)) == {
        "q": "resource type t13 is one more than the 13 a cluster may have"}


def test_each_type_divides_its_own_gpus_down_the_tree():
    queues = [kt.queue("dept"), kt.queue("x", "dept", 2, resource_types=[a100(2)]),
              kt.queue("y", "dept", 2, resource_types=[a100(1), h100(3)]), kt.queue("z", deserved_gpus=2)]
    jobs = [kt.job("jx", "x", tasks=4, gpus=1), kt.job("jy", "y", tasks=4, gpus=1),
            kt.job("jz", "z", tasks=2, gpus=1, status="Running", node="a1")]
    session = opened(kt.cluster(nodes(a=8, h=4) + [kt.node("other", gpus=8)], queues, jobs))
    types = session.plugins.plugin("proportion").types.types
    assert (types["a100"].capacity, types["h100"].capacity) == (8.0, 4.0)
    a, h = types["a100"].shares, types["h100"].shares
    assert set(a) == {"dept", "x", "y"} and set(h) == {"dept", "y"}  # z gives no type: not divided per type
    assert (a["dept"].deserved, h["dept"].deserved) == (3.0, 3.0)  # a department deserves its children's sum
    assert (a["x"].request, a["y"].request, h["y"].request) == (4.0, 4.0, 4.0)  # pending GPUs count in every type
    assert (a["x"].fair_share, a["y"].fair_share) == (4.0, 4.0)
    assert h["y"].fair_share == 4.0
    session.close()


def test_a_queue_with_types_gets_only_its_types_up_to_their_limits():
    queues = [kt.queue("x", deserved_gpus=4, resource_types=[a100(2, limit=3)]), kt.queue("free", deserved_gpus=4)]
    jobs = [kt.job("train", "x", tasks=4, gpus=1, min_available=1), kt.job("cpu", "x", tasks=1),
            kt.job("any", "free", tasks=1, gpus=1)]
    session = kt.run(kt.cluster(nodes(a=6), queues, jobs), PLUGINS)
    placed = kt.placements(session)
    assert [placed.get(f"train-{i}") for i in range(4)] == ["a1", "a1", "a1", None]
    assert "cpu-0" in placed and "any-0" in placed
    assert session.task_fit_errors["default/train-3"] == (
        "no nodes with enough resources were found: 1 node(s) didn't match the GPU types of queue x (a100). \n"
        "1 node(s) of GPU type a100, where queue x has reached its limit of 3 GPUs (3 allocated).")


def test_a_type_with_limit_zero_is_left_out_and_a_department_restricts_its_children():
    queues = [kt.queue("dept", resource_types=[a100(), h100(limit=0)]), kt.queue("x", "dept", 4)]
    session = kt.run(kt.cluster(nodes(a=1), queues, [kt.job("j", "x", tasks=2, gpus=1, min_available=1)]), PLUGINS)
    assert kt.placements(session) == {"j-0": "a1"}
    assert "node(s) didn't match the GPU types of queue x (a100)" in session.task_fit_errors["default/j-1"]


def test_without_types_proportion_has_no_predicate():
    session = opened(kt.cluster(nodes(), [kt.queue("q")], [kt.job("j", "q", gpus=1)]))
    plugin = session.plugins.plugin("proportion")
    assert plugin.types is None
    assert plugin not in session.calls.owners("kai_predicate")
    assert plugin not in session.calls.owners("kai_nodes_alike")
    session.close()


def test_queue_order_counts_each_type():
    # Equal totals; x already holds its A100 share while y holds H100s: y's A100 job goes first (by creation, x would).
    queues = [kt.queue("x", deserved_gpus=1, creation=1, resource_types=[a100(1)]),
              kt.queue("y", deserved_gpus=1, creation=2, resource_types=[a100(1), h100()])]
    jobs = [kt.job("held-x", "x", gpus=1, status="Running", node="a1", priority=100),
            kt.job("held-y", "y", gpus=1, status="Running", node="h1", priority=100),
            kt.job("want-x", "x", gpus=1, creation=1), kt.job("want-y", "y", gpus=1, creation=2)]
    session = kt.run(kt.cluster(nodes(a=2, h=2), queues, jobs), PLUGINS)
    assert kt.placements(session) == {"want-y-0": "a1"}


def test_reclaim_needs_a_type_within_its_fair_share():
    queues = [kt.queue("x", deserved_gpus=4, resource_types=[a100(0)]),
              kt.queue("y", deserved_gpus=0, resource_types=[a100(4)])]
    jobs = [kt.job("held", "y", tasks=4, gpus=1, status="Running", node="a1", min_available=1),
            kt.job("want", "x", gpus=1, priority=100)]
    session = kt.run(kt.cluster(nodes(h=0), queues, jobs), PLUGINS, actions=("reclaim",))
    assert not session.decisions
    types_off = [kt.queue("x", deserved_gpus=4), kt.queue("y", deserved_gpus=0)]
    session = kt.run(kt.cluster(nodes(h=0), types_off, jobs), PLUGINS, actions=("reclaim",))
    assert [d.kind for d in session.decisions] == ["evict", "pipeline"]


def test_no_reclaim_on_a_type_from_a_queue_whose_quota_of_it_is_unlimited():
    queues = [kt.queue("x", deserved_gpus=2, resource_types=[a100(2)]),
              kt.queue("y", deserved_gpus=0, resource_types=[a100(UNLIMITED)])]
    jobs = [kt.job("held", "y", tasks=4, gpus=1, status="Running", node="a1", min_available=1),
            kt.job("want", "x", gpus=1, priority=100)]
    session = kt.run(kt.cluster(nodes(h=0), queues, jobs), PLUGINS, actions=("reclaim",))
    assert not session.decisions  # on the totals alone y is above its share of 3
    types_off = [kt.queue("x", deserved_gpus=2), kt.queue("y", deserved_gpus=0)]
    session = kt.run(kt.cluster(nodes(h=0), types_off, jobs), PLUGINS, actions=("reclaim",))
    assert [d.kind for d in session.decisions] == ["evict", "pipeline"]


def test_a_non_preemptible_job_stays_within_its_queue_s_quota_of_the_type():
    queues = [kt.queue("x", deserved_gpus=8, resource_types=[a100(2)])]
    jobs = [kt.job("held", "x", gpus=1, status="Running", node="a1", priority=100),
            kt.job("serve", "x", tasks=2, gpus=1, priority=100, min_available=1, creation=1),
            kt.job("batch", "x", tasks=2, gpus=1, priority=50, min_available=1, creation=2)]
    session = kt.run(kt.cluster(nodes(), queues, jobs), PLUGINS)
    placed = kt.placements(session)
    assert placed == {"serve-0": "a1", "batch-0": "a1", "batch-1": "a1"}
    assert session.task_fit_errors["default/serve-1"].endswith(
        "1 node(s) of GPU type a100, where non-preemptible jobs of queue x would go over its deserved quota of 2 GPUs "
        "(2 allocated).")
