"""Scoring hooks kai_node_scores and kai_gpu_scores: batched, vectors of all plugins summed."""

from kai import hookimpl
from kai import testing as kt
from kai.api import ResourceRequest


def scorer(by_node, calls=None):
    class Scorer:
        @hookimpl
        def kai_node_scores(self, task, nodes):
            if calls is not None:
                calls.append((task.name, [n.name for n in nodes]))
            return None if by_node is None else [by_node.get(n.name, 0.0) for n in nodes]

    return lambda arguments: Scorer()


def _snap():
    return kt.cluster(nodes=[kt.node(n, gpus=1) for n in ("n1", "n2", "n3", "n4")],
                      jobs=[kt.job("j", queue="q", gpus=1)])


A = {"n1": 1.0, "n2": 0.8}
B = {"n3": 1.0, "n2": 0.8}


def test_kai_node_scores_of_two_plugins_are_summed():
    assert kt.placements(kt.run(_snap(), ["a"], extra_plugins={"a": scorer(A)})) == {"j-0": "n1"}
    assert kt.placements(kt.run(_snap(), ["b"], extra_plugins={"b": scorer(B)})) == {"j-0": "n3"}
    both = kt.run(_snap(), ["a", "b"], extra_plugins={"a": scorer(A), "b": scorer(B)})
    assert kt.placements(both) == {"j-0": "n2"}


def test_kai_node_scores_gets_all_feasible_nodes_at_once_and_none_is_no_opinion():
    calls = []
    snap = _snap()
    snap.nodes[0].unschedulable = True
    session = kt.run(snap, ["predicates", "spy", "b"], extra_plugins={"spy": scorer(None, calls), "b": scorer(B)})
    assert calls == [("j-0", ["n2", "n3", "n4"])]
    assert kt.placements(session) == {"j-0": "n3"}


def test_kai_node_scores_ties_go_to_the_node_name():
    session = kt.run(_snap(), ["flat"], extra_plugins={"flat": scorer({"n4": 2.0, "n3": 2.0})})
    assert kt.placements(session) == {"j-0": "n3"}


def gpu_scorer(whole, shared, calls=None):
    class GpuScorer:
        @hookimpl
        def kai_gpu_scores(self, task, node, groups):
            if calls is not None:
                calls.append((task.name, node.name, list(groups)))
            return [whole if g is None else shared for g in groups]

    return lambda arguments: GpuScorer()


def _shared_snap():
    running = kt.task("r-0", status="Running", node="n1", gpu_groups=("g1",),
                      request=ResourceRequest(cpu=1000, memory=2**30, gpu_fraction=0.5))
    pending = kt.task("p-0", request=ResourceRequest(cpu=1000, memory=2**30, gpu_fraction=0.25))
    return kt.cluster(nodes=[kt.node("n1", gpus=2, gpu_memory_mib=1000)],
                      jobs=[kt.job("r", queue="q", tasks=[running]), kt.job("p", queue="q", tasks=[pending])])


def _groups_of(session, name):
    return next(d.gpu_groups for d in session.decisions if d.task.name == name)


def test_kai_gpu_scores_get_the_fitting_shared_devices_and_one_entry_for_new_ones():
    calls = []
    session = kt.run(_shared_snap(), ["spy"], extra_plugins={"spy": gpu_scorer(0.0, 0.0, calls)})
    assert ("p-0", "n1", ["g1", None]) in calls
    # Ties keep the order given: the shared device first.
    assert _groups_of(session, "p-0") == ("g1",)


def test_kai_gpu_scores_of_two_plugins_are_summed():
    to_new = kt.run(_shared_snap(), ["a"], extra_plugins={"a": gpu_scorer(1.0, 0.0)})
    assert _groups_of(to_new, "p-0") != ("g1",) and len(_groups_of(to_new, "p-0")) == 1
    both = kt.run(_shared_snap(), ["a", "b"], extra_plugins={"a": gpu_scorer(1.0, 0.0), "b": gpu_scorer(0.0, 2.0)})
    assert _groups_of(both, "p-0") == ("g1",)


def test_kai_gpu_scores_is_not_asked_for_whole_gpu_tasks():
    calls = []
    kt.run(_snap(), ["spy"], extra_plugins={"spy": gpu_scorer(0.0, 0.0, calls)})
    assert calls == []
