"""KAI v0.17's bounded scenario search: budgets, generators, de-duplication, the search over k, metrics."""

from __future__ import annotations

import pytest

from kai import testing as kt
from kai.actions import eviction
from kai.actions.preempt import messages as preempt_messages
from kai.actions.preempt import victims as preempt_victims
from kai.actions.search import ActionBudget, Reason, SearchResult, max_solvable_k
from kai.actions.solver import JobSolver, validator_hook
from kai.actions.victims import GpuRoom, IdleGpus
from kai.common.errors import ConfigError
from kai.framework import Session, parse_config
from kai.framework.scenariosearch import SearchBudgets, parse_search_budgets
from kai.framework.shard import apply_shard
from kai.metrics import Registry, SchedulerMetrics

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _session(*jobs, gpus=(1, 1)):
    snap = kt.cluster(nodes=[kt.node(f"n{i + 1}", gpus=g) for i, g in enumerate(gpus)],
                      queues=[kt.queue("q", deserved_gpus=sum(gpus))], jobs=list(jobs))
    return Session(snap, kt.plugin_manager(PLUGINS, actions=())).open()


def _victims_on_two_nodes():
    return (kt.job("a", "q", gpus=1, priority=5, status="Running", node="n1", creation=1.0),
            kt.job("b", "q", gpus=1, priority=5, status="Running", node="n2", creation=2.0))


def _solver(session, validate, budgets=None, clock=None):
    budget = ActionBudget(budgets or SearchBudgets(), "preempt", clock) if clock is not None else None
    return JobSolver(session, "preempt", lambda job: preempt_victims(session, job), validate, preempt_messages,
                     budget=budget)


# --- the search over how many tasks to solve for ------------------------------------------------------


def _probing(threshold: int, stop_at: int | None = None):
    probes: list[int] = []

    def probe(k: int) -> SearchResult:
        probes.append(k)
        if k == stop_at:
            return SearchResult(Reason.DEADLINE_EXHAUSTED)
        return SearchResult(Reason.SOLVED if k <= threshold else Reason.GENERATORS_EXHAUSTED)

    return probes, probe


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_the_search_finds_the_largest_solvable_step_in_logarithmic_probes(n):
    for threshold in range(n + 1):
        probes, probe = _probing(threshold)
        solved, last = max_solvable_k(n, probe)
        assert solved == threshold
        assert len(probes) <= 2 * n.bit_length() + 1
        assert (last is None) == (threshold == n)


def test_the_search_doubles_then_bisects():
    probes, probe = _probing(5)
    assert max_solvable_k(8, probe)[0] == 5
    assert probes == [1, 2, 4, 8, 6, 5]


def test_a_result_that_stops_the_search_ends_it_at_once():
    probes, probe = _probing(8, stop_at=4)
    solved, last = max_solvable_k(8, probe)
    assert (solved, probes) == (0, [1, 2, 4])
    assert last is not None and last.reason is Reason.DEADLINE_EXHAUSTED


# --- de-duplication -----------------------------------------------------------------------------------


def test_a_victim_set_that_failed_is_not_simulated_again_across_generators():
    session = _session(*_victims_on_two_nodes(), kt.job("urgent", "q", gpus=1, priority=50, creation=3.0))
    seen: list[frozenset[str]] = []

    def reject(_session, scenario):
        seen.append(frozenset(t.name for t in scenario.candidates))
        return False

    result = _solver(session, reject).solve(session.jobs["default/urgent"])
    assert result.reason is Reason.GENERATORS_EXHAUSTED and result.statement is None
    log = session.scenario_search
    # victims newest first. NodeLocalGreedy: {b}, {a}; MultiNodeGang: {b} again twice, then {a, b}
    assert seen == [frozenset({"b-0"}), frozenset({"a-0"}), frozenset({"a-0", "b-0"})]
    assert log.scenarios["preempt", "MultiNodeGang", "duplicate"] == 2
    assert log.scenarios["preempt", "MultiNodeGang", "emitted"] == 3
    assert log.scenarios["preempt", "MultiNodeGang", "validator_rejected"] == 1
    assert log.simulated["preempt"] == 3
    assert log.jobs["preempt", "generators_exhausted", False] == 1
    assert session.evicted == set() and session.decisions == []


def test_multi_node_gang_solves_what_node_local_scenarios_cannot():
    # a 2-task gang on 1-GPU nodes behind a validator that wants scenarios of both victims at once
    session = _session(*_victims_on_two_nodes(), kt.job("urgent", "q", tasks=2, gpus=1, priority=50, creation=3.0))
    result = _solver(session, lambda _s, scenario: len(scenario.candidates) == 2).solve(
        session.jobs["default/urgent"])
    assert result.reason is Reason.SOLVED and result.statement is not None
    result.statement.commit()
    assert kt.placements(session, "evict") == {"a-0": "n1", "b-0": "n2"}
    assert session.scenario_search.scenarios["preempt", "MultiNodeGang", "simulated"] >= 1


# --- budgets ------------------------------------------------------------------------------------------


def test_a_spent_job_budget_returns_no_solution_and_is_recorded():
    clock = Clock()
    session = _session(*_victims_on_two_nodes(), kt.job("urgent", "q", gpus=1, priority=50, creation=3.0))
    validated = []

    def slow_reject(_session, scenario):
        validated.append(scenario)
        clock.now += 11.0
        return False

    budgets = parse_search_budgets({"maxJobSearchDuration": "10s"}, "config")
    result = _solver(session, slow_reject, budgets, clock).solve(session.jobs["default/urgent"])
    assert result.reason is Reason.DEADLINE_EXHAUSTED and result.statement is None
    assert len(validated) == 1
    log = session.scenario_search
    assert log.jobs["preempt", "deadline_exhausted", False] == 1
    assert log.action_exhausted["preempt"] == 0
    assert session.evicted == set() and session.decisions == []


def test_a_spent_action_budget_stops_the_action():
    clock = Clock()
    session = _session(*_victims_on_two_nodes(),
                       kt.job("urgent", "q", gpus=1, priority=50, creation=3.0),
                       kt.job("later", "q", gpus=1, priority=50, creation=4.0))
    tried = []

    def slow_reject(_session, scenario):
        tried.append(scenario.preemptor.name)
        clock.now += 61.0
        return False

    budgets = parse_search_budgets({"maxActionSearchDuration": {"preempt": "1m"}}, "config")
    solver = _solver(session, slow_reject, budgets, clock)
    eviction.run(session, "preempt", eviction.pending_ready_jobs(session), solver, lambda job: True, per_queue=True)
    log = session.scenario_search
    assert tried == ["urgent"]
    assert log.jobs == {("preempt", "deadline_exhausted", True): 1}
    assert log.action_exhausted["preempt"] == 1


def test_a_job_reached_after_the_action_budget_is_not_attempted():
    clock = Clock()
    session = _session(*_victims_on_two_nodes(), kt.job("urgent", "q", gpus=1, priority=50, creation=3.0))
    solver = _solver(session, validator_hook("preempt"), parse_search_budgets(
        {"maxActionSearchDuration": {"default": "1s"}}, "config"), clock)
    clock.now += 2.0
    result = solver.solve(session.jobs["default/urgent"])
    assert result.reason is Reason.NOT_ATTEMPTED and result.reason.stops_action
    assert session.scenario_search.jobs == {("preempt", "not_attempted", False): 1}
    assert session.scenario_search.simulated["preempt"] == 0


def test_min_job_search_duration_gives_a_job_time_past_the_action_budget():
    clock = Clock()
    budgets = parse_search_budgets({"maxActionSearchDuration": {"default": "1s"}, "minJobSearchDuration": "30s"},
                                   "config")
    budget = ActionBudget(budgets, "reclaim", clock)
    clock.now += 2.0
    job = budget.begin_job()
    assert not job.exhausted() and job.reduced
    clock.now += 31.0
    assert job.exhausted()


def test_a_generator_budget_bounds_one_generator_within_the_job():
    clock = Clock()
    budget = ActionBudget(parse_search_budgets({"maxGeneratorSearchDuration": {"NodeLocalGreedy": "5s"}}, "c"),
                          "reclaim", clock)
    job = budget.begin_job()
    narrow, wide, other = (job.begin_generator(n) for n in ("NodeLocalGreedy", "MultiNodeGang", "Custom"))
    clock.now += 6.0
    assert narrow.exhausted() and not wide.exhausted() and not other.exhausted()
    clock.now += 120.0
    assert wide.exhausted() and other.exhausted() and not job.exhausted()


def test_time_budgets_of_zero_are_unlimited():
    clock = Clock()
    budgets = parse_search_budgets({"maxActionSearchDuration": {"default": "0s"}, "maxJobSearchDuration": "0s",
                                    "maxGeneratorSearchDuration": {"default": "0s"}}, "config")
    job = ActionBudget(budgets, "preempt", clock).begin_job()
    generator = job.begin_generator("MultiNodeGang")
    clock.now += 1e9
    assert not job.exhausted() and not generator.exhausted() and not job.reduced


# --- configuration ------------------------------------------------------------------------------------


def test_kai_s_defaults():
    budgets = parse_config({}).scenario_search_budgets
    assert [budgets.action(a) for a in ("reclaim", "preempt", "consolidation")] == [300.0] * 3
    assert (budgets.job, budgets.min_job) == (240.0, 0.0)
    assert budgets.generator_limits() == {"default": 120.0, "NodeLocalGreedy": 30.0, "MultiNodeGang": 120.0}


def test_a_configured_default_replaces_every_generator_s_built_in_budget():
    budgets = parse_search_budgets({"maxActionSearchDuration": {"default": "1m", "reclaim": "2m"},
                                    "maxGeneratorSearchDuration": {"default": "10s", "MultiNodeGang": "1m"}}, "c")
    assert (budgets.action("reclaim"), budgets.action("preempt")) == (120.0, 60.0)
    assert budgets.generator_limits() == {"default": 10.0, "NodeLocalGreedy": 10.0, "MultiNodeGang": 60.0}


@pytest.mark.parametrize(("data", "message"), [
    ({"maxJobSearchDuration": "-1s"}, "maxJobSearchDuration' must not be negative"),
    ({"maxJobSearchDuration": "4 minutes"}, "maxJobSearchDuration' must be a duration"),
    ({"maxActionSearchDuration": {"allocate": "1m"}}, "names 'allocate'; the known names are default, reclaim"),
    ({"maxGeneratorSearchDuration": {"Greedy": "1m"}}, "names 'Greedy'"),
    ({"maxGeneratorSearchDuration": {"MultiNodeGang": "-2m"}}, "MultiNodeGang' must not be negative"),
    ({"minJobSearchDuration": "4m"}, "minJobSearchDuration' must be less than maxJobSearchDuration"),
    ({"maxJobSearch": "4m"}, "did you mean 'maxJobSearchDuration'"),
])
def test_bad_budgets_are_configuration_errors(data, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"scenarioSearchBudgets": data}, "scheduler.yaml")


def test_min_job_search_may_be_anything_when_jobs_are_unlimited():
    assert parse_search_budgets({"maxJobSearchDuration": "0s", "minJobSearchDuration": "1h"}, "c").min_job == 3600.0


def test_a_shard_s_budgets_replace_the_configuration_s():
    base = parse_config({"scenarioSearchBudgets": {"maxJobSearchDuration": "1m", "minJobSearchDuration": "10s"}})
    shard = {"metadata": {"name": "default"}, "spec": {"scenarioSearchBudgets": {
        "maxActionSearchDuration": {"reclaim": "30s"}}}}
    settings = apply_shard(base, shard)
    budgets = settings.config.scenario_search_budgets
    assert (budgets.action("reclaim"), budgets.job, budgets.min_job) == (30.0, 240.0, 0.0)
    assert "scenarioSearchBudgets" not in settings.ignored
    bad = {"metadata": {"name": "default"}, "spec": {"scenarioSearchBudgets": {"maxJobSearchDuration": "-1m"}}}
    with pytest.raises(ConfigError, match="SchedulingShard default: spec: scenarioSearchBudgets: field"):
        apply_shard(base, bad)


# --- metrics ------------------------------------------------------------------------------------------


def test_the_search_metrics_carry_kai_s_labels():
    session = _session(*_victims_on_two_nodes(), kt.job("urgent", "q", gpus=1, priority=50, creation=3.0),
                       kt.job("big", "q", gpus=4, priority=50, creation=4.0))
    solver = _solver(session, validator_hook("preempt"))
    eviction.run(session, "preempt", eviction.pending_ready_jobs(session), solver, lambda job: True, per_queue=True)
    registry = Registry()
    SchedulerMetrics(registry).scenario_search(session.scenario_search)

    def value(name, **labels):
        return registry.value(f"kai_{name}", labels)

    assert value("scenario_search_jobs_total", action="preempt", result="solved", reduced_budget="false") == 1
    assert value("scenario_search_jobs_total", action="preempt", result="generators_exhausted",
                 reduced_budget="false") == 1
    assert value("scenario_search_scenarios_total", action="preempt", generator="NodeLocalGreedy",
                 state="emitted") >= 1
    simulated = sum(value("scenario_search_scenarios_total", action="preempt", generator=g, state="simulated") or 0
                    for g in ("NodeLocalGreedy", "MultiNodeGang"))
    assert simulated == value("scenarios_simulation_by_action", action="preempt") == 1
    assert value("scenarios_filtered_by_action", action="preempt") >= 1
    assert value("scenario_search_duration_seconds_count", action="preempt", generator="NodeLocalGreedy",
                 result="solved") == 1
    assert value("scenario_search_action_budget_configured_seconds", action="preempt") == 300.0
    assert value("scenario_search_job_budget_configured_seconds") == 240.0
    assert value("scenario_search_generator_budget_configured_seconds", generator="NodeLocalGreedy") == 30.0
    assert value("scenario_search_action_budget_exhausted_total", action="preempt") is None


# --- the GPU room check before a scenario is simulated --------------------------------------------------


def _gpu_tasks(session, *names):
    return [t for name in names for t in session.jobs[f"default/{name}"].tasks.values()]


def test_gpu_room_turns_away_victims_that_free_too_few_nodes():
    victims = [kt.job(f"v{i}", "q", gpus=2, priority=5, status="Running", node=f"n{i}", creation=float(i))
               for i in range(1, 5)]
    session = _session(*victims, kt.job("gang", "q", tasks=3, gpus=2, priority=50, creation=9.0), gpus=(2, 2, 2, 2))
    room = GpuRoom(session, _gpu_tasks(session, "gang"), _gpu_tasks(session, "v1"))
    assert not room.may_place(_gpu_tasks(session, "v2"))  # two nodes free for three 2-GPU tasks
    assert room.may_place(_gpu_tasks(session, "v2", "v3"))


def test_gpu_room_never_turns_away_a_step_that_fits():
    # 5+3+2 and 4+4+2 fill two 10-GPU nodes; the greedy fit (largest first, first node that holds it) does not
    sizes = (5, 4, 4, 3, 2, 2)
    session = _session(kt.job("step", "q", tasks=[kt.task(f"t{i}", gpus=g) for i, g in enumerate(sizes)],
                              creation=1.0), gpus=(10, 10))
    pending = _gpu_tasks(session, "step")
    assert not IdleGpus(session, pending).passes([])
    assert GpuRoom(session, pending, []).may_place([])
    assert not GpuRoom(session, pending + [kt.task("more", gpus=1)], []).may_place([])


def test_scenarios_without_the_gpus_for_the_probe_are_not_simulated():
    victims = [kt.job(f"v{i}", "q", gpus=1, priority=5, status="Running", node=f"n{i}", creation=float(i))
               for i in range(1, 5)]
    session = _session(*victims, kt.job("gang", "q", tasks=4, gpus=1, priority=50, creation=9.0), gpus=(1, 1, 1, 1))
    result = _solver(session, validator_hook("preempt")).solve(session.jobs["default/gang"])
    assert result.reason is Reason.SOLVED and result.statement is not None
    log = session.scenario_search
    # NodeLocalGreedy, newest victim first: k=1 {v4}, k=2 {v4, v3}; k=4 has its filters pass once v1 is
    # accumulated, but {v4, v3} + {v1} frees three nodes: turned away; k=3 {v4, v3, v2}, then the step
    assert log.scenarios["preempt", "NodeLocalGreedy", "emitted"] == 5
    assert log.simulated["preempt"] == 4
    result.statement.commit()
    assert kt.placements(session, "evict") == {"v1-0": "n1", "v2-0": "n2", "v3-0": "n3", "v4-0": "n4"}


@pytest.mark.parametrize("seed", range(6))
def test_idle_gpus_with_equal_requests_holds_what_the_best_nodes_hold(seed):
    """Equal requests: the filter passes exactly when the ``size`` nodes with the most GPUs (victims' GPUs
    counted) hold ``size`` requests, victim by victim, also for nodes the filter did not know."""
    import random
    rng = random.Random(seed)
    gpus = tuple(rng.randint(2, 6) for _ in range(5))
    victims = [kt.job(f"v{n}-{k}", "q", gpus=1, priority=5, status="Running", node=f"n{n + 1}", creation=float(k))
               for n, g in enumerate(gpus) for k in range(g)]
    size = rng.randint(2, 4)
    session = _session(*victims, kt.job("gang", "q", tasks=size, gpus=2, priority=50, creation=99.0), gpus=gpus)
    capacity = {n.name: n.idle_gpu_sum() + n.releasing_gpu_sum() for n in session.nodes}
    idle = IdleGpus(session, _gpu_tasks(session, "gang"), capacity)
    freed = [t for j in session.jobs.values() if j.name != "gang" for t in j.tasks.values()]
    freed.append(kt.task("elsewhere", gpus=2, status="Running", node="gone"))
    rng.shuffle(freed)
    outcomes = []
    for task in freed:
        capacity[task.node] = capacity.get(task.node, 0.0) + task.request.gpus
        best = sorted((int(c // 2) for c in capacity.values()), reverse=True)[:size]
        outcomes.append(idle.passes([task]))
        assert outcomes[-1] == (sum(best) >= size)
    assert outcomes[0] is False and outcomes[-1] is True
