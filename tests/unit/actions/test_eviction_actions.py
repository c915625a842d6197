"""The job solver and the consolidation, reclaim and preempt actions on small clusters."""

import datetime

import attrs
import pytest

from kai import hookimpl
from kai import testing as kt
from kai.actions.preempt import messages as preempt_messages
from kai.actions.preempt import victims as preempt_victims
from kai.actions.solver import JobSolver, validator_hook
from kai.api import Reject, TaskStatus
from kai.common.errors import ConfigError
from kai.framework import Session, parse_config, run_session

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]


def _run(snapshot, *actions, plugins=PLUGINS, extra=None):
    return kt.run(snapshot, plugins=plugins, actions=actions, extra_plugins=extra)


def _statuses(session):
    return {t.name: (t.status.value, t.node) for j in session.jobs.values() for t in j.tasks.values()}


def _one_queue(*jobs, gpus=(4,)):
    return kt.cluster(nodes=[kt.node(f"n{i + 1}", gpus=g) for i, g in enumerate(gpus)],
                      queues=[kt.queue("q", deserved_gpus=sum(gpus))], jobs=list(jobs))


# --- victim order ----------------------------------------------------------------------------------


def test_preempt_takes_the_lowest_priority_job_first_even_when_older():
    snap = _one_queue(kt.job("older-low", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("newer", "q", gpus=2, priority=10, status="Running", node="n1", creation=2.0),
                      kt.job("urgent", "q", gpus=2, priority=50, creation=3.0))
    session = _run(snap, "preempt")
    assert kt.placements(session, "evict") == {"older-low-0": "n1"}
    assert kt.placements(session, "pipeline") == {"urgent-0": "n1"}
    assert "was preempted by higher priority workload default/urgent" in session.decisions[0].message


def test_preempt_with_equal_priorities_takes_the_newest_job_first():
    snap = _one_queue(kt.job("a", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("b", "q", gpus=2, priority=5, status="Running", node="n1", creation=2.0),
                      kt.job("urgent", "q", gpus=2, priority=50, creation=3.0))
    assert kt.placements(_run(snap, "preempt"), "evict") == {"b-0": "n1"}


def test_preempt_never_takes_equal_priority_other_queue_or_non_preemptible_jobs():
    snap = kt.cluster(
        nodes=[kt.node("n1", gpus=3)], queues=[kt.queue("q", deserved_gpus=3), kt.queue("other", deserved_gpus=3)],
        jobs=[kt.job("same-prio", "q", gpus=1, priority=50, status="Running", node="n1"),
              kt.job("other-queue", "other", gpus=1, priority=5, status="Running", node="n1"),
              kt.job("pinned", "q", gpus=1, priority=5, preemptible=False, status="Running", node="n1"),
              kt.job("urgent", "q", gpus=1, priority=50, creation=3.0)])
    session = _run(snap, "preempt")
    assert session.decisions == []
    assert _statuses(session)["urgent-0"] == ("Pending", None)


# --- elastic victims shrink one task at a time -------------------------------------------------------


def _elastic(need):
    return _one_queue(kt.job("elastic", "q", tasks=4, gpus=1, min_available=2, priority=5, status="Running",
                             node="n1", creation=1.0),
                      kt.job("urgent", "q", gpus=need, priority=50, creation=2.0))


def test_elastic_victim_loses_one_task_when_one_is_enough():
    session = _run(_elastic(1), "preempt")
    assert kt.placements(session, "evict") == {"elastic-3": "n1"}
    assert _statuses(session)["elastic-0"] == ("Running", "n1")


def test_elastic_victim_shrinks_down_to_its_gang_then_goes_whole():
    session = _run(_elastic(2), "preempt")
    assert set(kt.placements(session, "evict")) == {"elastic-3", "elastic-2"}
    session = _run(_elastic(3), "preempt")
    # below its gang size the job is evicted whole; its gang of 2 cannot be placed again on 1 free GPU
    assert set(kt.placements(session, "evict")) == {"elastic-0", "elastic-1", "elastic-2", "elastic-3"}
    assert kt.placements(session, "pipeline") == {"urgent-0": "n1"}


# --- the solver leaves no trace when it finds nothing ------------------------------------------------


class RejectAll:
    @hookimpl
    def kai_scenario_validator(self, session, action, scenario):
        return Reject("rejectall", "no")


def test_rejected_solutions_leave_the_session_as_it_was():
    snap = _one_queue(kt.job("low", "q", tasks=3, gpus=1, min_available=1, priority=5, status="Running", node="n1"),
                      kt.job("urgent", "q", tasks=2, gpus=2, priority=50, creation=2.0), gpus=(4,))
    plugins = kt.plugin_manager(PLUGINS + ["rejectall"], actions=(), extra_plugins={"rejectall": lambda a: RejectAll()})
    session = Session(snap, plugins).open()
    prop = session.plugins.plugin("proportion")
    before = (_statuses(session), [list(getattr(session.arrays, f)) for f in ("idle_gpu", "rel_gpu", "idle_pods")],
              {q: list(s.allocated) for q, s in prop.shares.items()})
    solver = JobSolver(session, "preempt", lambda job: preempt_victims(session, job), validator_hook("preempt"),
                       preempt_messages)
    assert solver.solve(session.jobs["default/urgent"]).statement is None
    after = (_statuses(session), [list(getattr(session.arrays, f)) for f in ("idle_gpu", "rel_gpu", "idle_pods")],
             {q: list(s.allocated) for q, s in prop.shares.items()})
    assert after == before
    assert session.evicted == set() and session.decisions == []


# --- consolidation moves pods, never evicts them for good ------------------------------------------


def test_consolidation_moves_a_pod_to_make_room():
    snap = _one_queue(kt.job("a", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("b", "q", gpus=2, priority=5, status="Running", node="n2", creation=2.0),
                      kt.job("big", "q", gpus=3, priority=5, creation=3.0), gpus=(4, 4))
    session = _run(snap, "consolidation")
    moved = kt.placements(session, "evict")
    assert len(moved) == 1
    (task,) = moved
    # the moved pod is pipelined on the other node, the pending job on the freed one
    pipelined = kt.placements(session, "pipeline")
    assert pipelined[task] != moved[task]
    assert pipelined["big-0"] == moved[task]
    assert "rescheduled due to bin packing (resource consolidation) procedure" in session.decisions[0].message


def test_consolidation_does_nothing_when_pods_cannot_be_moved():
    snap = _one_queue(kt.job("a", "q", gpus=3, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("b", "q", gpus=3, priority=5, status="Running", node="n2", creation=2.0),
                      kt.job("big", "q", gpus=2, priority=5, creation=3.0), gpus=(4, 4))
    session = _run(snap, "consolidation")
    assert session.decisions == []


def test_consolidation_is_off_with_zero_preemptees_and_for_non_preemptible_jobs():
    def snap(preemptible=True):
        return _one_queue(kt.job("a", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                          kt.job("b", "q", gpus=2, priority=5, status="Running", node="n2", creation=2.0),
                          kt.job("big", "q", gpus=3, priority=5, preemptible=preemptible, creation=3.0), gpus=(4, 4))

    plugins = kt.plugin_manager(PLUGINS, actions=("consolidation",))
    assert run_session(snap(), plugins).decisions != []
    plugins.config = attrs.evolve(plugins.config, max_consolidation_preemptees=0)
    assert run_session(snap(), plugins).decisions == []
    assert _run(snap(preemptible=False), "consolidation").decisions == []


# --- reclaim -----------------------------------------------------------------------------------------


def _reclaim_cluster(deserved=(1, 1), pending_priority=50, preemptible=True):
    return kt.cluster(
        nodes=[kt.node("n1", gpus=2)],
        queues=[kt.queue("q1", deserved_gpus=deserved[0]), kt.queue("q2", deserved_gpus=deserved[1])],
        jobs=[kt.job("big", queue="q1", gpus=2, priority=50, status="Running", node="n1"),
              kt.job("small", queue="q2", gpus=1, priority=pending_priority, preemptible=preemptible)])


def test_reclaim_takes_from_the_queue_over_its_share():
    session = _run(_reclaim_cluster(), "reclaim")
    assert kt.placements(session, "evict") == {"big-0": "n1"}
    assert kt.placements(session, "pipeline") == {"small-0": "n1"}
    assert session.jobs["default/big"].tasks["big-0"].status is TaskStatus.RELEASING


def test_reclaim_does_not_take_from_a_queue_within_its_share():
    session = _run(_reclaim_cluster(deserved=(2, 0)), "reclaim")
    assert session.decisions == []


def test_reclaim_never_takes_from_the_reclaimers_own_queue():
    snap = kt.cluster(
        nodes=[kt.node("n1", gpus=2)],
        queues=[kt.queue("q1", deserved_gpus=1), kt.queue("q2", deserved_gpus=1)],
        jobs=[kt.job("mine", queue="q2", gpus=2, priority=5, status="Running", node="n1"),
              kt.job("small", queue="q2", gpus=1, priority=50)])
    assert _run(snap, "reclaim").decisions == []


def test_reclaim_of_a_non_preemptible_job_stays_within_deserved_quota():
    assert _run(_reclaim_cluster(deserved=(1, 0), preemptible=False), "reclaim").decisions == []
    assert kt.placements(_run(_reclaim_cluster(deserved=(1, 1), preemptible=False), "reclaim"), "evict") == {
        "big-0": "n1"}


# --- scheduling signatures -----------------------------------------------------------------------------


def test_a_job_like_a_smaller_failed_one_is_not_tried_again():
    tried = []

    class Spy:
        @hookimpl
        def kai_job_solution_start(self, session, job):
            tried.append(job.name)

    snap = _one_queue(kt.job("pinned", "q", gpus=4, priority=5, preemptible=False, status="Running", node="n1"),
                      kt.job("p1", "q", gpus=2, priority=50, creation=1.0),
                      kt.job("p2", "q", gpus=2, priority=50, creation=2.0),
                      kt.job("p3", "q", gpus=1, priority=50, creation=3.0))
    _run(snap, "preempt", plugins=PLUGINS + ["spy"], extra={"spy": lambda a: Spy()})
    # p2 asks as much as p1, which failed: skipped; p3 asks less: tried
    assert tried == ["p1", "p3"]


# --- configuration ---------------------------------------------------------------------------------


def test_eviction_settings_are_read_from_the_config():
    cfg = parse_config({"maxConsolidationPreemptees": -1, "allowConsolidatingReclaim": False,
                        "useSchedulingSignatures": False})
    assert (cfg.max_consolidation_preemptees, cfg.allow_consolidating_reclaim, cfg.use_scheduling_signatures) == (
        -1, False, False)
    assert parse_config({}).max_consolidation_preemptees == 16


@pytest.mark.parametrize("data, field", [({"maxConsolidationPreemptees": -2}, "maxConsolidationPreemptees"),
                                         ({"maxConsolidationPreemptees": "5"}, "maxConsolidationPreemptees"),
                                         ({"allowConsolidatingReclaim": "yes"}, "allowConsolidatingReclaim")])
def test_bad_eviction_settings_name_the_field(data, field):
    with pytest.raises(ConfigError, match=field):
        parse_config(data, "sched.yaml")


def test_a_pipelined_victim_gives_its_reservation_back_and_a_moved_one_is_not_evicted_twice():
    nodes = [kt.node("n1", gpus=4), kt.node("n2", gpus=4)]
    queues = [kt.queue(q, deserved_gpus=4, over_quota_weight=0) for q in ("q0", "q1")]
    jobs = [kt.job("a", "q0", gpus=2, priority=50, status="Running", node="n1", creation=1.0),
            kt.job("b", "q0", gpus=2, priority=50, status="Running", node="n2", creation=2.0),
            kt.job("c", "q0", gpus=1, priority=50, status="Running", node="n2", creation=3.0),
            kt.job("big", "q0", gpus=3, priority=50, creation=4.0),
            kt.job("r", "q1", gpus=4, priority=50, creation=5.0)]
    session = _run(kt.cluster(nodes=nodes, queues=queues, jobs=jobs), "consolidation", "reclaim")
    kinds = [(d.kind, d.task.name) for d in session.decisions]
    # consolidation moved b and pipelined big; reclaim then took big's reservation back
    assert kinds.count(("evict", "b-0")) == 1
    assert ("pipeline", "big-0") not in kinds and ("evict", "big-0") not in kinds
    assert _statuses(session)["big-0"] == ("Pending", None)
    assert kt.placements(session, "pipeline")["r-0"] == "n2"
    for node in session.nodes:  # what runs or terminates on a node fits it
        held = [t for t in node.tasks.values() if t.status is not TaskStatus.PIPELINED]
        assert sum(t.request.gpus for t in held) <= node.allocatable.gpu


# --- queueDepthPerAction -----------------------------------------------------------------------------


def test_queue_depth_is_read_per_action_and_bad_values_name_the_field():
    cfg = parse_config({"queueDepthPerAction": {"allocate": 2, "reclaim": 0, "preempt": -1}})
    assert (cfg.queue_depth("allocate"), cfg.queue_depth("reclaim"), cfg.queue_depth("preempt")) == (2, 0, None)
    assert parse_config({}).queue_depth("allocate") is None
    for bad in ({"alocate": 2}, {"allocate": -2}, {"allocate": "2"}, {"allocate": True}, [2]):
        with pytest.raises(ConfigError, match="queueDepthPerAction"):
            parse_config({"queueDepthPerAction": bad}, "sched.yaml")


def test_allocate_tries_only_the_first_jobs_of_each_leaf_queue():
    def snap():
        return kt.cluster(nodes=[kt.node("n1", gpus=8)],
                          jobs=[kt.job(f"{q}{k}", queue=q, gpus=1, creation=float(k)) for q in "ab" for k in range(3)])

    plugins = kt.plugin_manager(PLUGINS)
    assert len(run_session(snap(), plugins).decisions) == 6
    plugins.config = attrs.evolve(plugins.config, queue_depth_per_action=(("allocate", 2),))
    assert sorted(kt.placements(run_session(snap(), plugins))) == ["a0-0", "a1-0", "b0-0", "b1-0"]


def test_reclaim_tries_no_job_with_depth_zero():
    plugins = kt.plugin_manager(PLUGINS, actions=("reclaim",))
    plugins.config = attrs.evolve(plugins.config, queue_depth_per_action=(("reclaim", 0),))
    assert run_session(_reclaim_cluster(), plugins).decisions == []
    plugins.config = attrs.evolve(plugins.config, queue_depth_per_action=(("allocate", 0),))
    assert kt.placements(run_session(_reclaim_cluster(), plugins), "evict") == {"big-0": "n1"}


# --- preemption delay ------------------------------------------------------------------------------


def _delayed(delay, created_ago, last_eviction_ago=None):
    urgent = kt.job("urgent", "q", gpus=2, priority=50, creation=kt.NOW - created_ago)
    urgent.preemption_delay = delay
    if last_eviction_ago is not None:
        urgent.last_eviction = kt.NOW - last_eviction_ago
    return _one_queue(kt.job("low", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("other", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0), urgent)


@pytest.mark.parametrize("action", ["preempt", "reclaim", "consolidation"])
def test_a_job_within_its_preemption_delay_evicts_nobody_and_says_until_when(action):
    session = _run(_delayed(300.0, created_ago=60.0), action)
    assert session.decisions == []
    job = session.jobs["default/urgent"]
    assert [(e.reason, e.detail) for e in session.job_fit_errors[job.uid]] == [(
        "PreemptionDelayNotElapsed",
        "Workload is within its preemption delay window (5m0s) and may not trigger evictions before "
        + kt_time(kt.NOW + 240.0))]


def test_a_job_past_its_preemption_delay_preempts():
    session = _run(_delayed(300.0, created_ago=600.0), "preempt")
    assert kt.placements(session, "pipeline") == {"urgent-0": "n1"}


def test_the_preemption_delay_counts_from_the_last_eviction_when_later():
    session = _run(_delayed(300.0, created_ago=600.0, last_eviction_ago=100.0), "preempt")
    assert session.decisions == []
    assert session.jobs["default/urgent"].preemption_delay_end() == kt.NOW + 200.0


def test_the_preemption_delay_does_not_hold_back_plain_allocation():
    snap = _one_queue(kt.job("urgent", "q", gpus=2, priority=50, creation=kt.NOW - 1.0))
    snap.jobs["default/urgent"].preemption_delay = 3600.0
    assert kt.placements(_run(snap, "allocate")) == {"urgent-0": "n1"}


def test_an_eviction_stamps_the_victims_job_with_its_time():
    snap = _one_queue(kt.job("low", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("other", "q", gpus=2, priority=5, status="Running", node="n1", creation=1.0),
                      kt.job("urgent", "q", gpus=2, priority=50, creation=3.0))
    session = _run(snap, "preempt")
    [victim] = [d.task.job for d in session.decisions if d.kind == "evict"]
    assert session.jobs[victim].last_eviction == session.now
    assert session.jobs["default/urgent"].last_eviction is None


def kt_time(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
