"""Node-subset hooks: kai_subset_nodes splits node sets successively, kai_pre_job_allocation opens each attempt."""

from kai import hookimpl
from kai import testing as kt
from kai.api import PodSet, SubGroup


def splitter(split, calls=None, name="split"):
    """A plugin whose kai_subset_nodes returns ``split(group, nodes)`` (lists of node names, or None)."""

    class Splitter:
        @hookimpl
        def kai_subset_nodes(self, session, job, group, pod_sets, tasks, nodes):
            if calls is not None:
                calls.append((name, group.name, tuple(pod_sets), tuple(t.name for t in tasks),
                              tuple(n.name for n in nodes)))
            sets = split(group, nodes)
            if sets is None:
                return None
            return [[session.node_by_name[n] for n in s if n in {x.name for x in nodes}] for s in sets]

    return lambda arguments: Splitter()


def _nodes():
    return [kt.node("n1", gpus=1), kt.node("n2", gpus=1), kt.node("n3", gpus=2)]


def test_kai_subset_nodes_sets_are_tried_in_order_and_rolled_back_between():
    snap = kt.cluster(nodes=_nodes(), jobs=[kt.job("j", tasks=2, gpus=1)])
    plugin = splitter(lambda group, nodes: [["n3"], ["n1", "n2"]] if group.name == "" else None)
    session = kt.run(snap, ["nodeplacement", "x"], extra_plugins={"x": plugin})
    # The first set holds the gang, so it wins; binpack alone would have chosen n1 and n2.
    assert kt.placements(session) == {"j-0": "n3", "j-1": "n3"}
    without = kt.run(kt.cluster(nodes=_nodes(), jobs=[kt.job("j", tasks=2, gpus=1)]), ["nodeplacement"])
    assert kt.placements(without) == {"j-0": "n1", "j-1": "n2"}

    snap = kt.cluster(nodes=_nodes(), jobs=[kt.job("j", tasks=2, gpus=1)])
    plugin = splitter(lambda group, nodes: [["n1"], ["n3"]] if group.name == "" else None)
    session = kt.run(snap, ["nodeplacement", "x"], extra_plugins={"x": plugin})
    # j-0 fits on n1 but j-1 does not: that attempt is rolled back, both land on n3.
    assert kt.placements(session) == {"j-0": "n3", "j-1": "n3"}
    assert session.arrays.idle_gpu[0] == 1.0
    assert [d.kind for d in session.decisions] == ["bind", "bind"]


def test_kai_subset_nodes_of_two_plugins_split_every_set_successively():
    calls = []
    halves = splitter(lambda group, nodes: [["n1", "n2"], ["n3"]], calls, "halves")
    singles = splitter(lambda group, nodes: [[n.name] for n in reversed(nodes)], calls, "singles")
    snap = kt.cluster(nodes=_nodes(), jobs=[kt.job("j", gpus=1)])
    session = kt.run(snap, ["halves", "singles"], extra_plugins={"halves": halves, "singles": singles})
    root_calls = [c for c in calls if c[1] == ""]
    assert root_calls == [
        ("halves", "", ("default",), ("j-0",), ("n1", "n2", "n3")),
        ("singles", "", ("default",), ("j-0",), ("n1", "n2")),
        ("singles", "", ("default",), ("j-0",), ("n3",)),
    ]
    # The sets are tried in the order n2, n1, n3: the first one takes the task.
    assert kt.placements(session) == {"j-0": "n2"}


def test_kai_subset_nodes_empty_list_leaves_the_job_pending_and_none_is_no_opinion():
    class Nowhere:
        @hookimpl
        def kai_subset_nodes(self, session, job, group):
            session.add_job_fit_error(job, "no rack can host the whole job")
            return []

    snap = kt.cluster(nodes=_nodes(), jobs=[kt.job("j", gpus=1)])
    session = kt.run(snap, ["nodeplacement", "x"], extra_plugins={"x": lambda a: Nowhere()})
    assert session.decisions == []
    assert session.job_fit_message(session.jobs["default/j"]) == "PodSchedulingErrors: no rack can host the whole job."

    snap = kt.cluster(nodes=_nodes(), jobs=[kt.job("j", gpus=1)])
    session = kt.run(snap, ["nodeplacement", "x"], extra_plugins={"x": splitter(lambda group, nodes: None)})
    assert kt.placements(session) == {"j-0": "n1"}


def _tree_job():
    tasks = [kt.task("t-fe", gpus=1, pod_set="frontend"), kt.task("t-p0", gpus=1, pod_set="prefill"),
             kt.task("t-d0", gpus=1, pod_set="decode")]
    job = kt.job("t", tasks=tasks)
    job.subgroups = {"workers": SubGroup("workers")}
    job.pod_sets = {"frontend": PodSet("frontend", 1), "prefill": PodSet("prefill", 1, "workers"),
                    "decode": PodSet("decode", 1, "workers")}
    return job


def test_kai_subset_nodes_is_asked_for_the_root_each_subgroup_and_each_pod_set():
    calls = []
    plugin = splitter(lambda group, nodes: None, calls)
    session = kt.run(kt.cluster(nodes=_nodes(), jobs=[_tree_job()]), ["x"], extra_plugins={"x": plugin})
    assert [(c[1], c[2], c[3]) for c in calls] == [
        ("", ("frontend", "decode", "prefill"), ("t-fe", "t-d0", "t-p0")),
        ("workers", ("decode", "prefill"), ("t-d0", "t-p0")),
        ("decode", ("decode",), ("t-d0",)),
        ("prefill", ("prefill",), ("t-p0",)),
        ("frontend", ("frontend",), ("t-fe",)),
    ]
    assert len(kt.placements(session)) == 3


def test_kai_pre_job_allocation_opens_every_allocation_attempt():
    events = []

    class Spy:
        @hookimpl
        def kai_pre_job_allocation(self, session, job):
            events.append(("pre", job.name, sum(1 for t in job.tasks.values() if t.node)))

        @hookimpl
        def kai_subset_nodes(self, job, group):
            if group.name == "":
                events.append(("subset", job.name))

    snap = kt.cluster(nodes=_nodes(), jobs=[kt.job("e", tasks=3, gpus=1, min_available=1)])
    kt.run(snap, ["spy"], extra_plugins={"spy": lambda a: Spy()})
    # An elastic job is placed one step at a time; each step is one attempt, opened by the hook.
    assert events == [("pre", "e", 0), ("subset", "e"), ("pre", "e", 1), ("subset", "e"),
                      ("pre", "e", 2), ("subset", "e")]
