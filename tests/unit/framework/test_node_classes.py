"""Node classes: alike nodes share a class, the first by name represents it, and moves are followed."""

from kai import testing as kt
from kai.api import Taint, TaskStatus
from kai.framework import Session
from kai.framework.nodeclasses import NodeClasses


def _session(nodes, jobs=()):
    return Session(kt.cluster(nodes=nodes, jobs=jobs), kt.plugin_manager([])).open()


def _classes(session):
    reps, positions, sizes = NodeClasses(session.nodes, session.arrays).representatives()
    assert list(positions) == [n.index for n in reps]
    return sorted((n.name, size) for n, size in zip(reps, sizes, strict=True))


def test_alike_nodes_share_a_class_represented_by_the_first_name():
    nodes = [kt.node(name, gpus=8) for name in ("n3", "n10", "n2")] + [kt.node("big", gpus=16)]
    # byte order of names: "n10" < "n2" < "n3"
    assert _classes(_session(nodes)) == [("big", 1), ("n10", 3)]


def test_what_a_class_holds_taints_readiness_extended_resources_and_placed_pods():
    nodes = [kt.node("a", gpus=8), kt.node("b", gpus=8, taints=[Taint("k", "v", "NoSchedule")]),
             kt.node("c", gpus=8, taints=[Taint("k", "v", "PreferNoSchedule")]), kt.node("d", gpus=8, ready=False),
             kt.node("e", gpus=8, scalars={"nvidia.com/mig-1g.5gb": 2}), kt.node("f", gpus=8), kt.node("g", gpus=8)]
    running = kt.job("r", queue="q", gpus=1, status=TaskStatus.RUNNING, node="f")
    assert _classes(_session(nodes, [running])) == [("a", 3), ("b", 1), ("d", 1), ("e", 1), ("f", 1)]


def test_a_move_changes_the_class_of_the_node_and_no_other():
    session = _session([kt.node(f"n{i}", gpus=2) for i in range(4)], [kt.job("j", queue="q", gpus=1)])
    classes = NodeClasses(session.nodes, session.arrays)
    (task,) = session.jobs[next(iter(session.jobs))].tasks.values()
    reps, _, sizes = classes.representatives()
    assert [(n.name, s) for n, s in zip(reps, sizes, strict=True)] == [("n0", 4)]
    session.move_task(task, TaskStatus.ALLOCATED, "n0")
    reps, _, sizes = classes.representatives()
    assert sorted((n.name, s) for n, s in zip(reps, sizes, strict=True)) == [("n0", 1), ("n1", 3)]
    session.move_task(task, TaskStatus.PENDING, None)
    reps, _, sizes = classes.representatives()
    assert [(n.name, s) for n, s in zip(reps, sizes, strict=True)] == [("n0", 4)]  # n0 leads its class again


def test_node_versions_count_each_node_s_changes_and_copies_keep_their_own():
    session = _session([kt.node(f"n{i}", gpus=2) for i in range(2)], [kt.job("j", queue="q", gpus=1)])
    (task,) = session.jobs[next(iter(session.jobs))].tasks.values()
    before = list(session.arrays.version)
    copy = session.arrays.copy()
    session.move_task(task, TaskStatus.ALLOCATED, "n0")
    moved = session.node_by_name["n0"].index
    assert [v > b for v, b in zip(session.arrays.version, before, strict=True)] == [i == moved for i in range(2)]
    assert copy.version == before


def test_each_session_on_a_kept_accounting_starts_from_its_classes_and_follows_its_own_moves():
    snapshot = kt.cluster(nodes=[kt.node(f"n{i}", gpus=2) for i in range(4)],
                          jobs=[kt.job("r", queue="q", gpus=1, status=TaskStatus.RUNNING, node="n3"),
                                kt.job("j", queue="q", gpus=1)])
    snapshot.follow(None)  # the accounting is kept for the next sessions
    plugins = kt.plugin_manager([])
    first = Session(snapshot, plugins).open()
    assert _names(first.node_classes) == _classes(first) == [("n0", 3), ("n3", 1)]
    kept = snapshot.placed[0].classes
    (task,) = first.jobs["default/j"].tasks.values()
    first.move_task(task, TaskStatus.ALLOCATED, "n1")
    assert _names(first.node_classes) == _classes(first) == [("n0", 2), ("n1", 2)]
    second = Session(snapshot, plugins).open()  # rewound: the move is gone
    assert snapshot.placed[0].classes is kept
    assert _names(second.node_classes) == _classes(second) == [("n0", 3), ("n3", 1)]


def _names(classes):
    reps, _, sizes = classes.representatives()
    return sorted((n.name, size) for n, size in zip(reps, sizes, strict=True))
