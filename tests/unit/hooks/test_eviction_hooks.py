"""Hooks of the eviction actions: kai_can_reclaim, kai_victim_filter, kai_scenario_validator,
kai_job_solution_start, kai_queue_resources."""

from kai import hookimpl
from kai import testing as kt
from kai.api import Reject, Resources

PLUGINS = ["predicates", "proportion", "priority", "nodeplacement"]


def _reclaim_cluster():
    """q1 runs a 2-GPU job on the only node; q2 (same quota) waits for 1 GPU."""
    return kt.cluster(
        nodes=[kt.node("n1", gpus=2)],
        queues=[kt.queue("q1", deserved_gpus=1), kt.queue("q2", deserved_gpus=1)],
        jobs=[kt.job("big", queue="q1", gpus=2, priority=50, status="Running", node="n1"),
              kt.job("small", queue="q2", gpus=1, priority=50)])


def _preempt_cluster():
    """Two low-priority 1-GPU jobs fill the node; a higher-priority job of the same queue waits."""
    return kt.cluster(
        nodes=[kt.node("n1", gpus=2)],
        queues=[kt.queue("q", deserved_gpus=2)],
        jobs=[kt.job("low-a", queue="q", gpus=1, priority=10, status="Running", node="n1", creation=1.0),
              kt.job("low-b", queue="q", gpus=1, priority=10, status="Running", node="n1", creation=2.0),
              kt.job("high", queue="q", gpus=1, priority=50, creation=3.0)])


def _builder(obj):
    return lambda args: obj


def _run(snapshot, action, **plugins):
    return kt.run(snapshot, plugins=PLUGINS + list(plugins), actions=(action,),
                  extra_plugins={name: _builder(obj) for name, obj in plugins.items()})


def test_kai_can_reclaim_veto_keeps_the_job_from_reclaiming():
    assert kt.placements(_run(_reclaim_cluster(), "reclaim"), "evict") == {"big-0": "n1"}

    class Never:
        @hookimpl
        def kai_can_reclaim(self, session, job):
            return Reject("never", f"{job.name} may not reclaim")

    session = _run(_reclaim_cluster(), "reclaim", never=Never())
    assert session.decisions == []


def test_kai_victim_filter_protects_a_victim_and_names_the_action():
    seen = []

    class Protect:
        @hookimpl
        def kai_victim_filter(self, session, action, preemptor, victim):
            seen.append((action, preemptor.name, victim.name))
            return Reject("protect", "young") if victim.name == "low-b" else None

    session = _run(_preempt_cluster(), "preempt", protect=Protect())
    assert kt.placements(session, "evict") == {"low-a-0": "n1"}
    assert ("preempt", "high", "low-b") in seen and ("preempt", "high", "low-a") in seen


def test_kai_victim_filter_unasked_by_consolidation():
    seen = []

    class Spy:
        @hookimpl
        def kai_victim_filter(self, session, action, preemptor, victim):
            seen.append(action)

    _run(_preempt_cluster(), "consolidation", spy=Spy())
    assert seen == []


def test_kai_scenario_validator_sees_the_simulated_scenario_and_can_veto_it():
    scenarios = []

    class Judge:
        @hookimpl
        def kai_scenario_validator(self, session, action, scenario):
            scenarios.append((action, scenario.preemptor.name, [t.name for t in scenario.preemptor_tasks],
                              [(t.name, t.status.value) for t in scenario.victims],
                              [j.name for j in scenario.victim_jobs], scenario.moved))
            return Reject("judge", "not today")

    session = _run(_preempt_cluster(), "preempt", judge=Judge())
    assert session.decisions == []
    assert scenarios[0] == ("preempt", "high", ["high-0"], [("low-b-0", "Releasing")], ["low-b"], [])
    # the rejected scenario was rolled back: nothing is left evicted
    assert {t.status.value for j in session.jobs.values() for t in j.tasks.values()} == {"Running", "Pending"}


def test_kai_job_solution_start_is_called_before_each_solve():
    log = []

    class Start:
        @hookimpl
        def kai_job_solution_start(self, session, job):
            log.append((job.name, sorted(t.status.value for j in session.jobs.values() for t in j.tasks.values())))

    _run(_preempt_cluster(), "preempt", start=Start())
    assert log == [("high", ["Pending", "Running", "Running"])]


def test_kai_queue_resources_fills_the_queue_lines_of_reclaim_messages():
    session = _run(_reclaim_cluster(), "reclaim")
    (evict,) = [d for d in session.decisions if d.kind == "evict"]
    lines = evict.message.split("\n")
    assert lines[0] == "Pod default/big-0 was preempted by workload default/small."
    # the queues as they were when the victim was chosen: the victim's queue first, then the reclaimer's
    assert lines[1] == ("q1 uses <GPU: 2, CPU: 1 (cores), memory: 1.074 (GB)> with a quota of <GPU: 1, CPU: Unlimited "
                        "(cores), memory: Unlimited (GB)>, fair-share of <GPU: 1, CPU: 1 (cores), memory: 1.074 (GB)> "
                        "and queue priority of <100>.")
    assert lines[2].startswith("q2 uses <GPU: 0, CPU: 0 (cores), memory: 0 (GB)> with a quota of <GPU: 1,")
    assert lines[2].endswith("and queue priority of <100>.")

    class Fixed:
        @hookimpl
        def kai_queue_resources(self, session, queue):
            return Resources(2000.0, 4e9, 3.0), Resources(-1, -1, 4.0), Resources(1000.0, 1e9, 0.5)

    session = kt.run(_reclaim_cluster(), plugins=["fixed"] + PLUGINS, actions=("reclaim",),
                     extra_plugins={"fixed": lambda args: Fixed()})
    (evict,) = [d for d in session.decisions if d.kind == "evict"]
    assert evict.message.split("\n")[1] == (
        "q1 uses <GPU: 3, CPU: 2 (cores), memory: 4 (GB)> with a quota of <GPU: 4, CPU: Unlimited (cores), "
        "memory: Unlimited (GB)>, fair-share of <GPU: 0.5, CPU: 1 (cores), memory: 1 (GB)> and queue priority "
        "of <100>.")
