"""Scoring hook kai_node_scores: batched per task, vectors of all plugins summed."""

from kai import hookimpl
from kai import testing as kt


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
