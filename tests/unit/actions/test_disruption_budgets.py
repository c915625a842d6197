"""PodDisruptionBudgets in the eviction actions: victim sets a budget forbids are infeasible, evictions are paced."""

from kai import testing as kt
from kai.api import DisruptionBudget, LabelSelector, names

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]
SERVE = {"app": "serve"}


def _budget(allowed, labels=SERVE, name="serve-pdb"):
    return DisruptionBudget(name, "default", LabelSelector(tuple(labels.items())), allowed)


def _service(replicas=4):
    """One single-pod job per replica, as a Deployment's pods are grouped, filling node n1."""
    return [kt.job(f"serve-{i}", "q", gpus=1, priority=50, status="Running", node="n1", labels=dict(SERVE),
                   creation=float(i)) for i in range(replicas)]


def _snapshot(*jobs, budgets=(), gpus=4):
    return kt.cluster(nodes=[kt.node("n1", gpus=gpus)], queues=[kt.queue("q", deserved_gpus=gpus)], jobs=list(jobs),
                      budgets=budgets)


def _run(snapshot, *actions):
    return kt.run(snapshot, plugins=PLUGINS, actions=actions or ("preempt",))


def test_a_budget_allowing_no_disruption_leaves_the_preemptor_pending_and_names_the_budget():
    session = _run(_snapshot(*_service(), kt.job("urgent", "q", gpus=1, priority=90), budgets=[_budget(0)]))
    assert kt.placements(session, "evict") == {}
    urgent = next(j for j in session.jobs.values() if j.name == "urgent")
    errors = session.job_fit_errors[urgent.uid]
    assert [e.reason for e in errors] == [names.UNSCHEDULABLE_DISRUPTION_BUDGET]
    assert "PodDisruptionBudget default/serve-pdb (0 disruptions allowed) forbids evicting 1 of its pods" in \
        session.job_fit_message(urgent)


def test_without_a_budget_the_same_preemption_happens():
    session = _run(_snapshot(*_service(), kt.job("urgent", "q", gpus=1, priority=90)))
    assert len(kt.placements(session, "evict")) == 1
    assert kt.placements(session, "pipeline") == {"urgent-0": "n1"}


def test_a_budget_of_another_workload_does_not_protect_the_victims():
    session = _run(_snapshot(*_service(), kt.job("urgent", "q", gpus=1, priority=90),
                             budgets=[_budget(0, {"app": "other"})]))
    assert len(kt.placements(session, "evict")) == 1


def test_a_gang_needing_more_victims_than_the_budget_allows_evicts_none():
    session = _run(_snapshot(*_service(), kt.job("urgent", "q", tasks=2, gpus=1, priority=90),
                             budgets=[_budget(1)]))
    assert kt.placements(session, "evict") == {}
    urgent = next(j for j in session.jobs.values() if j.name == "urgent")
    assert "forbids evicting 2 of its pods" in session.job_fit_message(urgent)


def test_evictions_are_paced_at_the_disruptions_the_budget_allows_per_cycle():
    """Two elastic preemptors want two GPUs; the budget allows one disruption: one pod goes this cycle."""
    snap = _snapshot(*_service(), kt.job("a", "q", gpus=1, priority=90, creation=10.0),
                     kt.job("b", "q", gpus=1, priority=90, creation=11.0), budgets=[_budget(1)])
    session = _run(snap)
    assert len(kt.placements(session, "evict")) == 1
    assert kt.placements(session, "pipeline") == {"a-0": "n1"}
    assert session.disruptions.left == {"default/serve-pdb": 0}


def test_reclaim_respects_the_budget_too():
    service = _service()
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)],
                      queues=[kt.queue("q", deserved_gpus=0), kt.queue("owed", deserved_gpus=4)],
                      jobs=[*service, kt.job("reclaimer", "owed", gpus=1, priority=50)], budgets=[_budget(0)])
    session = _run(snap, "reclaim")
    assert kt.placements(session, "evict") == {}
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)],
                      queues=[kt.queue("q", deserved_gpus=0), kt.queue("owed", deserved_gpus=4)],
                      jobs=[*_service(), kt.job("reclaimer", "owed", gpus=1, priority=50)], budgets=[_budget(1)])
    assert len(kt.placements(_run(snap, "reclaim"), "evict")) == 1


def test_stale_gang_eviction_is_paced_by_the_budget():
    gang = kt.job("gang", "q", tasks=4, gpus=1, min_available=6, status="Running", node="n1", labels=dict(SERVE))
    gang.stale_since = kt.NOW - 3600.0
    session = _run(_snapshot(gang, budgets=[_budget(1)]), "stalegangeviction")
    assert len(kt.placements(session, "evict")) == 1
