"""Kernel unit tests: statements, gangs, elastic growth, pipelining, predicates, snapshot validation,
and the plugin manager."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from kai import hookimpl
from kai import testing as kt
from kai.api import (
    LabelRequirement,
    LabelSelector,
    PodAffinityTerm,
    QuotaSpec,
    Reject,
    Taint,
    TaskStatus,
    Toleration,
)
from kai.framework import PluginError, Plugins, SchedulerConfig, Session
from kai.framework import plugins as plugins_module
from kai.plugin_loader import ACTION_GROUP, discover

# --- statements -------------------------------------------------------------------------------------


def node_state(session: Session):
    """Every per-node amount and task set of the session, as plain values."""
    a = session.arrays
    arrays = tuple(tuple(getattr(a, f)) for f in (
        "idle_cpu", "idle_mem", "idle_gpu", "idle_pods", "rel_cpu", "rel_mem", "rel_gpu", "rel_pods"))
    scalars = tuple(tuple(sorted(d.items())) for d in a.idle_scalars + a.rel_scalars)
    return arrays, scalars, tuple(tuple(sorted(n.tasks)) for n in session.nodes)


def task_state(session: Session):
    return {t.uid: (t.status, t.node) for j in session.jobs.values() for t in j.tasks.values()}


def queue_state(session: Session):
    shares = session.plugins.plugin("proportion").shares
    return {name: (tuple(qs.allocated), tuple(qs.allocated_np)) for name, qs in shares.items()}


def full_state(session):
    return node_state(session), task_state(session), queue_state(session)


@pytest.fixture
def session():
    snap = kt.cluster(
        nodes=[kt.node("n1", gpus=2, scalars={"nvidia.com/mig-1g.10gb": 2}), kt.node("n2", gpus=4)],
        queues=[kt.queue("root"), kt.queue("q", parent="root")],
        jobs=[kt.job("run", queue="q", tasks=2, gpus=1, status="Running", node="n1"),
              kt.job("new", queue="q", tasks=3, gpus=1)],
    )
    return Session(snap, kt.plugin_manager(["predicates", "proportion"])).open()


def _tasks(session, job):
    return list(session.jobs[f"default/{job}"].tasks.values())


def test_statement_operations_change_nodes_tasks_and_plugin_state(session):
    before = full_state(session)
    run0, run1 = _tasks(session, "run")[:2]
    new0, new1 = _tasks(session, "new")[:2]
    stmt = session.statement()
    stmt.evict(run0, "room")
    stmt.pipeline(new0, "n1")
    stmt.allocate(new1, "n2")
    a = session.arrays
    assert (run0.status, run0.node) == (TaskStatus.RELEASING, "n1")
    assert (new0.status, new0.node) == (TaskStatus.PIPELINED, "n1")
    assert (new1.status, new1.node) == (TaskStatus.ALLOCATED, "n2")
    assert (a.idle_gpu[0], a.rel_gpu[0], a.idle_gpu[1]) == (0.0, 0.0, 3.0)
    assert a.idle_pods[1] == 109
    # proportion charges placed (allocated, pipelined) tasks up the queue tree, not the evicted one.
    assert queue_state(session)["q"][0][2] == 3.0 and queue_state(session)["root"][0][2] == 3.0
    assert full_state(session) != before
    assert run1.status is TaskStatus.RUNNING


def test_statement_rollback_to_checkpoint_restores_exactly(session):
    run0 = _tasks(session, "run")[0]
    new0, new1, new2 = _tasks(session, "new")
    stmt = session.statement()
    stmt.allocate(new0, "n2")
    cp = stmt.checkpoint()
    middle = full_state(session)
    stmt.evict(run0, "room")
    stmt.pipeline(new1, "n1")
    stmt.allocate(new2, "n2")
    stmt.rollback(cp)
    assert full_state(session) == middle
    assert stmt.checkpoint() == cp


def test_statement_discard_leaves_nothing_behind(session):
    before = full_state(session)
    run0 = _tasks(session, "run")[0]
    new0, new1, _ = _tasks(session, "new")
    stmt = session.statement()
    stmt.allocate(new0, "n2")
    stmt.evict(run0, "room")
    stmt.pipeline(new1, "n1")
    stmt.discard()
    assert full_state(session) == before
    assert stmt.commit() == [] and session.decisions == []


def test_statement_commit_produces_decisions_in_operation_order(session):
    run0 = _tasks(session, "run")[0]
    new0, new1, _ = _tasks(session, "new")
    stmt = session.statement()
    stmt.evict(run0, "make room")
    stmt.pipeline(new0, "n1")
    stmt.allocate(new1, "n2")
    decisions = stmt.commit()
    assert [(d.kind, d.task.name, d.node, d.message) for d in decisions] == [
        ("evict", "run-0", "n1", "make room"), ("pipeline", "new-0", "n1", ""), ("bind", "new-1", "n2", "")]
    assert session.decisions == decisions
    assert new1.status is TaskStatus.BINDING
    assert stmt.ops == []


# --- gangs, elastic growth, pipelining --------------------------------------------------------------


def test_gang_is_all_or_nothing():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=2), kt.node("n2", gpus=1)],
                      jobs=[kt.job("big", queue="q", tasks=4, gpus=1, creation=1),
                            kt.job("small", queue="q", tasks=3, gpus=1, creation=2)])
    session = kt.run(snap, plugins=["predicates", "proportion"])
    assert sorted(kt.placements(session)) == ["small-0", "small-1", "small-2"]
    big = session.jobs["default/big"]
    assert all(t.status is TaskStatus.PENDING and t.node is None for t in big.tasks.values())
    assert session.job_fit_message(big).startswith(
        "PodSchedulingErrors: Resources were found for 3 pods while 4 are required")
    assert list(session.arrays.idle_gpu) == [0.0, 0.0]


def test_without_explanations_placements_are_the_same_and_a_task_that_fits_nowhere_gets_no_reasons():
    def cluster():
        return kt.cluster(nodes=[kt.node("n1", gpus=2), kt.node("n2", gpus=1, cpu=500)],
                          jobs=[kt.job("a", queue="q", tasks=2, gpus=1, creation=1),
                                kt.job("b", queue="q", tasks=1, gpus=2, creation=2)])

    explained = kt.run(cluster(), plugins=["predicates", "proportion"])
    quiet = Session(cluster(), kt.plugin_manager(["predicates", "proportion"])).open()
    quiet.explain = False
    quiet.run_actions()
    assert kt.placements(quiet) == kt.placements(explained) and len(kt.placements(quiet)) == 2
    assert "didn't have enough resources" in kt.fit_error(explained, "b-0")
    assert kt.fit_error(quiet, "b-0") is None


def test_gang_failure_message_counts_each_found_pod_once():
    j = kt.job("g", queue="q", tasks=[kt.task("g-0", gpus=1, status="Running", node="n1"),
                                      *(kt.task(f"g-{i}", gpus=1) for i in (1, 2, 3))], min_available=4)
    session = kt.run(kt.cluster(nodes=[kt.node("n1", gpus=3)], jobs=[j]), plugins=["predicates"])
    assert session.job_fit_message(session.jobs["default/g"]).startswith(
        "PodSchedulingErrors: Resources were found for 3 pods while 4 are required for gang scheduling. "
        "Additional pods cannot")


def test_elastic_job_grows_one_task_per_step():
    steps = []

    class Steps:
        @hookimpl
        def kai_job_over_capacity(self, job, tasks):
            steps.append([t.name for t in tasks])

    snap = kt.cluster(nodes=[kt.node("n1", gpus=3)], jobs=[kt.job("e", queue="q", tasks=5, gpus=1, min_available=2)])
    session = kt.run(snap, plugins=["predicates", "steps"], extra_plugins={"steps": lambda a: Steps()})
    assert steps == [["e-0", "e-1"], ["e-2"], ["e-3"]]
    assert sorted(kt.placements(session)) == ["e-0", "e-1", "e-2"]


def test_pipelining_onto_releasing_resources():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=1)], jobs=[
        kt.job("old", queue="q", gpus=1, status="Releasing", node="n1"), kt.job("new", queue="q", gpus=1)])
    session = kt.run(snap, plugins=["predicates"])
    assert kt.placements(session, "pipeline") == {"new-0": "n1"} and kt.placements(session) == {}
    assert session.arrays.rel_gpu[0] == 0.0 and session.arrays.idle_gpu[0] == 0.0


def test_gang_partly_on_releasing_resources_is_pipelined_as_a_whole():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=2)], jobs=[
        kt.job("old", queue="q", gpus=1, status="Releasing", node="n1"), kt.job("g", queue="q", tasks=2, gpus=1)])
    session = kt.run(snap, plugins=["predicates"])
    assert kt.placements(session) == {}
    assert kt.placements(session, "pipeline") == {"g-0": "n1", "g-1": "n1"}
    assert {t.status for t in session.jobs["default/g"].tasks.values()} == {TaskStatus.PIPELINED}


def test_idle_resources_are_preferred_to_releasing_ones():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=1), kt.node("n2", gpus=1)], jobs=[
        kt.job("old", queue="q", gpus=1, status="Releasing", node="n1"), kt.job("new", queue="q", gpus=1)])
    session = kt.run(snap, plugins=["predicates", "nodeavailability"])
    assert kt.placements(session) == {"new-0": "n2"}


def test_the_nominated_node_wins_over_binpacking_when_the_task_fits_there():
    nodes = [kt.node("n1", gpus=4), kt.node("n2", gpus=4), kt.node("n3", gpus=1)]
    running = kt.job("running", queue="q", tasks=2, gpus=1, status="Running", node=["n1", "n3"])
    jobs = [running, kt.job("plain", queue="q", gpus=1), kt.job("nominated", queue="q", gpus=1, nominated_node="n2"),
            kt.job("too-big", queue="q", gpus=2, nominated_node="n3")]
    plugins = ["predicates", "nodeplacement", "nominatednode"]
    placed = kt.placements(kt.run(kt.cluster(nodes=nodes, jobs=jobs), plugins=plugins))
    # binpack fills n1; the nomination moves one task to n2; a nominated node that cannot hold the task is ignored
    assert (placed["plain-0"], placed["nominated-0"]) == ("n1", "n2") and placed["too-big-0"] in ("n1", "n2")


# --- predicates -------------------------------------------------------------------------------------


def _place(nodes, task, others=()):
    snap = kt.cluster(nodes=nodes, jobs=[*others, kt.job("j", queue="q", tasks=[task])])
    session = kt.run(snap, plugins=["predicates"])
    return kt.placements(session).get(task.name), kt.fit_error(session, task.name)


def test_node_selector_and_required_node_affinity():
    nodes = [kt.node("a", labels={"pool": "cpu"}), kt.node("b", labels={"pool": "gpu", "rack": "7"})]
    assert _place(nodes, kt.task("t", node_selector={"pool": "gpu"}))[0] == "b"
    affinity = ((LabelRequirement("rack", "Gt", ("5",)),), (LabelRequirement("pool", "In", ("none",)),))
    assert _place(nodes, kt.task("t", node_affinity=affinity))[0] == "b"
    where, why = _place(nodes, kt.task("t", node_selector={"pool": "tpu"}))
    assert where is None and "2 node(s) didn't match Pod's node affinity/selector" in why


def test_taints_and_tolerations():
    nodes = [kt.node("a", taints=[Taint("gpu", "yes")]), kt.node("b", taints=[Taint("soft", "", "PreferNoSchedule")])]
    assert _place(nodes, kt.task("t"))[0] == "b"
    assert _place(nodes[:1], kt.task("t", tolerations=(Toleration("gpu", "Equal", "yes"),)))[0] == "a"
    assert _place(nodes[:1], kt.task("t", tolerations=(Toleration(operator="Exists"),)))[0] == "a"
    where, why = _place(nodes[:1], kt.task("t", tolerations=(Toleration("gpu", "Equal", "no"),)))
    assert where is None and "node(s) had untolerated taint {gpu: yes}" in why


def test_max_pods():
    nodes = [kt.node("a", max_pods=1), kt.node("b", max_pods=2)]
    others = [kt.job("o", queue="q", tasks=2, status="Running", node=["a", "b"])]
    assert _place(nodes, kt.task("t"), others)[0] == "b"
    others = [kt.job("o", queue="q", tasks=3, status="Running", node=["a", "b", "b"])]
    where, why = _place(nodes, kt.task("t"), others)
    assert where is None and "2 node(s) pod number exceeded" in why


def _zones():
    return [kt.node("a1", labels={"zone": "a"}), kt.node("b1", labels={"zone": "b"}),
            kt.node("b2", labels={"zone": "b"})]


def test_pod_affinity_requires_a_matching_pod_in_the_domain():
    db = kt.job("db", queue="q", status="Running", node="b2", labels={"app": "db"})
    term = PodAffinityTerm(LabelSelector((("app", "db"),)), "zone")
    assert _place(_zones(), kt.task("t", pod_affinity=(term,)), [db])[0] == "b1"
    where, why = _place(_zones(), kt.task("t", pod_affinity=(term,)))
    assert where is None and "3 node(s) didn't match pod affinity rules" in why


def test_pod_anti_affinity_both_ways():
    db = kt.job("db", queue="q", status="Running", node="a1", labels={"app": "db"})
    term = PodAffinityTerm(LabelSelector((("app", "db"),)), "zone")
    assert _place(_zones()[:2], kt.task("t", pod_anti_affinity=(term,)), [db])[0] == "b1"
    # An existing pod's anti-affinity keeps a matching newcomer out of its zone.
    guard = kt.job("g", queue="q", status="Running", node="a1", pod_anti_affinity=(
        PodAffinityTerm(LabelSelector((("app", "web"),)), "zone"),))
    assert _place(_zones()[:2], kt.task("t", labels={"app": "web"}), [guard])[0] == "b1"
    where, why = _place(_zones()[:1], kt.task("t", labels={"app": "web"}), [guard])
    assert where is None and "node(s) didn't satisfy existing pods anti-affinity rules" in why


# --- snapshot validation ----------------------------------------------------------------------------


def test_bad_input_is_reported_and_the_rest_still_schedules():
    queues = [
        kt.queue("good"),
        kt.queue("orphan", parent="missing"),
        kt.queue("c1", parent="c2"), kt.queue("c2", parent="c1"),
        kt.queue("negative", deserved_gpus=-3),
        kt.queue("nan", deserved_gpus=math.nan),
        kt.queue("tight", deserved_gpus=4, limit_gpus=2),
        kt.queue("child-of-bad", parent="nan"),
    ]
    queues[0].cpu = QuotaSpec(-1, -1, 1)  # -1 (unlimited) is the one allowed negative
    jobs = [kt.job(f"in-{q.name}", queue=q.name, gpus=1) for q in queues]
    jobs.append(kt.job("nowhere", queue="unknown", gpus=1))
    jobs.append(kt.job("ghost", queue="good", status="Running", node="gone", gpus=1))
    snap = kt.cluster(nodes=[kt.node("n1", gpus=8)], queues=queues, jobs=jobs)
    problems = {(p.kind, p.name): p for p in snap.problems}
    assert set(problems) == {
        ("queue", "orphan"), ("queue", "c1"), ("queue", "c2"), ("queue", "negative"), ("queue", "nan"),
        ("queue", "tight"), ("queue", "child-of-bad"), ("job", "in-orphan"), ("job", "in-c1"),
        ("job", "in-c2"), ("job", "in-negative"), ("job", "in-nan"), ("job", "in-tight"),
        ("job", "in-child-of-bad"), ("job", "nowhere"), ("task", "default/ghost-0"),
    }
    assert "parent queue 'missing' does not exist" in problems["queue", "orphan"].message
    assert "cycle" in problems["queue", "c1"].message
    assert "negative" in problems["queue", "negative"].message
    assert "not a number" in problems["queue", "nan"].message
    assert "below its deserved quota" in problems["queue", "tight"].message
    assert "ancestor queue nan is invalid" in problems["queue", "child-of-bad"].message
    assert problems["job", "nowhere"].message == "Queue 'unknown' does not exist"
    assert problems["job", "in-tight"].message == (
        "Queue 'tight' is invalid: gpu limit 2 is below its deserved quota 4")
    session = kt.run(snap, plugins=["predicates", "proportion"])
    assert kt.placements(session) == {"in-good-0": "n1"}
    assert session.arrays.idle_gpu[0] == 7.0  # the task on a missing node holds nothing


@pytest.mark.parametrize("change, message", [
    ({"over_quota_weight": -2.0}, "gpu over_quota_weight is negative (-2); only -1 (unlimited) may be negative"),
    ({"over_quota_weight": math.nan}, "gpu over_quota_weight is not a number"),
    ({"deserved": math.inf}, "gpu deserved is infinite; use -1 for unlimited"),
    ({"limit": -0.5}, "gpu limit is negative (-0.5)"),
    ({"priority": 1.5}, "priority 1.5 is not a whole number"),
    ({"priority": None}, "priority None is not a whole number"),
])
def test_bad_weights_and_priorities_name_the_queue_and_the_siblings_are_still_divided(change, message):
    bad = kt.queue("bad", parent="dept", deserved_gpus=1)
    if "priority" in change:
        bad.priority = change["priority"]
    else:
        setattr(bad.gpu, *next(iter(change.items())))
    queues = [kt.queue("dept", deserved_gpus=8), kt.queue("a", parent="dept", deserved_gpus=1), bad,
              kt.queue("b", parent="dept", deserved_gpus=1, over_quota_weight=3)]
    jobs = [kt.job(f"in-{q}", queue=q, tasks=8, gpus=1) for q in ("a", "bad", "b")]
    snap = kt.cluster(nodes=[kt.node("n1", gpus=8)], queues=queues, jobs=jobs)
    problems = {(p.kind, p.name): p.message for p in snap.problems}
    assert set(problems) == {("queue", "bad"), ("job", "in-bad")}
    assert message in problems["queue", "bad"] and message in problems["job", "in-bad"]
    session = Session(snap, kt.plugin_manager(["proportion"])).open()
    shares = session.plugins.plugin("proportion").shares
    assert "bad" not in shares
    # dept's 8 GPUs: 1 deserved each, the other 6 by weight 1:3 (1.5 and 4.5, the halves rounded to the older a).
    assert (shares["a"].fair_share[2], shares["b"].fair_share[2]) == (3.0, 5.0)


def test_job_in_a_non_leaf_queue_is_rejected():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=1)], queues=[kt.queue("p"), kt.queue("leaf", parent="p")],
                      jobs=[kt.job("bad", queue="p", gpus=1), kt.job("ok", queue="leaf", gpus=1)])
    assert [p.reason for p in snap.problems] == ["QueueNotLeaf"]
    assert kt.placements(kt.run(snap, plugins=["predicates", "proportion"])) == {"ok-0": "n1"}


# --- plugin manager ---------------------------------------------------------------------------------


class Named:
    def __init__(self, name, log):
        self.name, self.log = name, log

    @hookimpl
    def kai_job_order(self, left, right):
        self.log.append(self.name)


def test_config_order_is_call_order():
    log = []
    extra = {n: (lambda a, n=n: Named(n, log)) for n in ("x", "y", "z")}
    manager = kt.plugin_manager(["z", "x", "y"], extra_plugins=extra)
    assert manager.names == ["z", "x", "y"]
    for fn in manager.call_lists().kai_job_order:
        fn(None, None, None)
    assert log == ["z", "x", "y"]
    log.clear()
    manager.pm.hook.kai_job_order(session=None, left=None, right=None)
    assert log == ["z", "x", "y"]


class Partial:
    """Implementations taking some of a hook's arguments, in their own order."""

    name = "partial"

    def __init__(self, log):
        self.log = log

    @hookimpl
    def kai_job_order(self, right, left):
        self.log.append(("job", left, right))

    @hookimpl
    def kai_task_order(self, right):
        self.log.append(("task", right))

    @hookimpl
    def kai_queue_order(self, right_victims, left, session):
        self.log.append(("queue", right_victims, left, session))


def test_call_lists_pass_an_implementation_the_arguments_it_names():
    log = []
    manager = kt.plugin_manager(["partial"], extra_plugins={"partial": lambda a: Partial(log)})
    calls = manager.call_lists()
    calls.kai_job_order[0]("s", "l", "r")
    calls.kai_task_order[0]("s", "l", "r")
    calls.kai_queue_order[0]("s", "l", "r", "lj", "rj", "lv", "rv")
    assert log == [("job", "l", "r"), ("task", "r"), ("queue", "rv", "l", "s")]


def test_call_lists_declare_a_type_for_every_hot_hook():
    assert tuple(plugins_module.CallLists.__annotations__) == plugins_module.HOT_HOOKS


def test_unknown_plugin_lists_the_installed_ones():
    with pytest.raises(PluginError) as err:
        kt.plugin_manager(["predicates", "nope"])
    assert "unknown plugin 'nope'" in str(err.value)
    assert "predicates" in str(err.value) and "proportion" in str(err.value) and "nodeplacement" in str(err.value)


def test_plugin_configured_twice_is_an_error():
    with pytest.raises(PluginError, match="configured twice"):
        kt.plugin_manager(["predicates", "predicates"])


def test_bad_plugin_arguments_name_the_plugin():
    with pytest.raises(PluginError, match="plugin 'nodeplacement': invalid arguments"):
        kt.plugin_manager([kt.PluginSpec("nodeplacement", {"gpu": "scatter"})])


def test_unknown_action_is_an_error_listing_the_available_ones():
    with pytest.raises(PluginError, match=r"unknown action\(s\) backfill; available actions: allocate, consolidation, "
                                          r"preempt, reclaim, runtimelimit, stalegangeviction"):
        kt.plugin_manager(["predicates"], actions=("allocate", "backfill"))


def test_the_shipped_actions_are_entry_points_loaded_when_configured():
    class BrokenEntryPoint(SimpleNamespace):
        def load(self):
            raise ImportError("no module named backfill_magic")

    actions = {**discover(ACTION_GROUP),
               "backfill": BrokenEntryPoint(name="backfill", value="magic:backfill", dist=None)}
    assert set(actions) >= {"allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"}
    plugins = Plugins(SchedulerConfig(("allocate",), ()), {}, actions)
    assert "backfill" in plugins.actions and plugins.actions["allocate"].__module__ == "kai.actions.allocate"
    with pytest.raises(PluginError, match=r"action 'backfill' \(\?\): cannot load magic:backfill"):
        Plugins(SchedulerConfig(("backfill",), ()), {}, actions)


def test_an_action_offered_by_an_entry_point_and_a_plugin_names_both():
    class Allocator:
        @hookimpl
        def kai_actions(self):
            return {"allocate": lambda session: None}

    with pytest.raises(PluginError, match=r"action 'allocate' is offered twice: by entry point "
                                          r"kai.actions.allocate:allocate \(kai-scheduler .*\) and by plugin 'mine'"):
        kt.plugin_manager(["mine"], extra_plugins={"mine": lambda args: Allocator()})


def test_veto_objects_name_the_plugin():
    veto = Reject("mine", "too hot")
    assert str(veto) == "too hot" and veto.plugin == "mine"
