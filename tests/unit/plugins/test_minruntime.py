"""The ``minruntime`` plugin: queue-tree resolution, defaults, the victim filter and the elastic rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kai import testing as kt
from kai.api import PodSet, Reject, TaskStatus
from kai.framework import PluginError, PluginSpec, Session
from kai.plugins.minruntime import build

NOW = kt.NOW
RUNNING = TaskStatus.RUNNING


def tree(**runtimes):
    """root-a -> {dept-a -> {qa1, qa2}}, root-b -> {qb1}; ``runtimes`` maps 'queue' -> (preempt, reclaim)."""
    queues = [kt.queue("root-a"), kt.queue("dept-a", "root-a"), kt.queue("qa1", "dept-a"), kt.queue("qa2", "dept-a"),
              kt.queue("root-b"), kt.queue("qb1", "root-b")]
    for q in queues:
        q.preempt_min_runtime, q.reclaim_min_runtime = runtimes.get(q.name.replace("-", "_"), (None, None))
    return queues


def session(queues, jobs=()):
    snap = kt.cluster([kt.node("n1", gpus=8)], queues, list(jobs), now=NOW)
    return Session(snap, kt.plugin_manager([])).open()


def job(name, queue, started_ago=None, tasks=1, min_available=None):
    j = kt.job(name, queue, tasks=tasks, gpus=1, status=RUNNING, node="n1", min_available=min_available)
    j.last_start = None if started_ago is None else NOW - started_ago
    return j


def test_arguments_defaults_and_errors():
    plugin = build({})
    assert (plugin.default_preempt, plugin.default_reclaim, plugin.method) == (0.0, 0.0, "lca")
    plugin = build({"defaultPreemptMinRuntime": "10m", "defaultReclaimMinRuntime": "1h30m",
                    "reclaimResolveMethod": "queue"})
    assert (plugin.default_preempt, plugin.default_reclaim, plugin.method) == (600.0, 5400.0, "queue")
    with pytest.raises(ValueError, match="reclaimResolveMethod"):
        build({"reclaimResolveMethod": "nearest"})
    with pytest.raises(ValueError, match="defaultPreemptMinRuntime.*not a duration"):
        build({"defaultPreemptMinRuntime": "ten minutes"})
    with pytest.raises(ValueError, match="negative"):
        build({"defaultReclaimMinRuntime": "-5s"})


def test_plugin_is_in_the_default_configuration_and_reports_bad_arguments():
    from kai.framework.config import DEFAULT_CONFIG

    assert "minruntime" in [p.name for p in DEFAULT_CONFIG.plugins]
    with pytest.raises(PluginError, match="minruntime"):
        kt.plugin_manager([PluginSpec("minruntime", {"reclaimResolveMethod": "x"})])


def test_preempt_inherits_from_the_nearest_ancestor_then_the_default():
    plugin = build({"defaultPreemptMinRuntime": "5s"})
    s = session(tree(dept_a=(100.0, None), qa2=(7.0, None)))
    pending = job("p", "qa1")
    assert plugin.min_runtime(s, "preempt", pending, job("v", "qa1")) == 100.0  # from dept-a
    assert plugin.min_runtime(s, "preempt", pending, job("v", "qa2")) == 7.0  # its own
    assert plugin.min_runtime(s, "preempt", pending, job("v", "qb1")) == 5.0  # nothing set: default


@pytest.mark.parametrize("method, preemptor, victim, expected", [
    # lca: siblings under dept-a -> the victim's leaf queue decides.
    ("lca", "qa1", "qa2", 20.0),
    # lca: same queue -> from the leaf up.
    ("lca", "qa2", "qa2", 20.0),
    # lca: different top-level trees -> the victim's top-level queue only.
    ("lca", "qb1", "qa2", 300.0),
    ("lca", "qa1", "qb1", 9.0),  # root-b has none set: default
    # queue: the victim's leaf queue up to the root, whoever reclaims.
    ("queue", "qb1", "qa2", 20.0),
    ("queue", "qa1", "qb1", 9.0),
])
def test_reclaim_resolution(method, preemptor, victim, expected):
    plugin = build({"defaultReclaimMinRuntime": "9s", "reclaimResolveMethod": method})
    s = session(tree(root_a=(None, 300.0), dept_a=(None, 60.0), qa2=(None, 20.0)))
    assert plugin.min_runtime(s, "reclaim", job("p", preemptor), job("v", victim)) == expected


def test_lca_steps_one_level_down_towards_the_victim():
    # Reclaimer in qa-other (under root-a), victim in qa2 (root-a -> dept-a -> qa2): the LCA is root-a,
    # its child on the victim's side is dept-a, whose value applies rather than the victim leaf's own.
    queues = tree(dept_a=(None, 60.0), qa2=(None, 20.0))
    queues.append(kt.queue("qa-other", "root-a"))
    plugin = build({"reclaimResolveMethod": "lca"})
    s = session(queues)
    assert plugin.min_runtime(s, "reclaim", job("p", "qa-other"), job("v", "qa2")) == 60.0
    # Without a value at dept-a the walk goes up (root-a: none) to the default.
    queues = tree(qa2=(None, 20.0))
    queues.append(kt.queue("qa-other", "root-a"))
    assert build({"defaultReclaimMinRuntime": "3s"}).min_runtime(
        session(queues), "reclaim", job("p", "qa-other"), job("v", "qa2")) == 3.0


def test_victim_filter_vetoes_protected_non_elastic_victims_only():
    plugin = build({"defaultPreemptMinRuntime": "60s", "defaultReclaimMinRuntime": "120s"})
    young, old, never = job("young", "qa1", started_ago=30), job("old", "qa1", started_ago=600), job("new", "qa1")
    elastic = job("elastic", "qa1", started_ago=30, tasks=3, min_available=1)
    s = session(tree(), [young, old, never, elastic])
    plugin.kai_session_open(s)
    pending = job("p", "qa2")
    veto = plugin.kai_victim_filter(s, "preempt", pending, young)
    assert isinstance(veto, Reject) and veto.plugin == "minruntime"
    assert "young" in veto.reason and "30s more" in veto.reason and "1m0s" in veto.reason
    assert plugin.kai_victim_filter(s, "preempt", pending, old) is None
    assert plugin.kai_victim_filter(s, "preempt", pending, never) is None  # no last start: not protected
    assert plugin.kai_victim_filter(s, "preempt", pending, elastic) is None  # left to the scenario validator
    assert plugin.kai_victim_filter(s, "reclaim", pending, job("mid", "qa1", started_ago=90)) is not None
    assert plugin.kai_victim_filter(s, "consolidation", pending, young) is None


def scenario(preemptor, victims):
    return SimpleNamespace(preemptor=preemptor, preemptor_tasks=[], victims=victims, moved=[],
                           victim_jobs=list({t.job: t for t in victims}))


def test_protected_elastic_victims_keep_min_available_per_pod_set():
    plugin = build({"defaultReclaimMinRuntime": "10m"})
    elastic = job("elastic", "qb1", started_ago=60, tasks=4, min_available=2)
    two_sets = job("two-sets", "qb1", started_ago=60, tasks=4)
    two_sets.pod_sets = {"a": PodSet("a", 1), "b": PodSet("b", 2)}
    for k, t in enumerate(two_sets.tasks.values()):
        t.pod_set = "a" if k < 2 else "b"
    s = session(tree(), [elastic, two_sets])
    plugin.kai_session_open(s)
    pending = job("p", "qa1")
    tasks = list(elastic.tasks.values())
    assert plugin.kai_scenario_validator(s, "reclaim", scenario(pending, tasks[:2])) is None
    veto = plugin.kai_scenario_validator(s, "reclaim", scenario(pending, tasks[:3]))
    assert isinstance(veto, Reject) and "min_available (2)" in veto.reason
    b_tasks = [t for t in two_sets.tasks.values() if t.pod_set == "b"]
    a_tasks = [t for t in two_sets.tasks.values() if t.pod_set == "a"]
    assert plugin.kai_scenario_validator(s, "reclaim", scenario(pending, a_tasks[:1])) is None
    assert plugin.kai_scenario_validator(s, "reclaim", scenario(pending, b_tasks[:1])) is not None  # b is at 2
    # Once the min runtime has passed, any number of pods may go.
    elastic.last_start = NOW - 3600
    assert plugin.kai_scenario_validator(s, "reclaim", scenario(pending, tasks)) is None


def test_results_are_cached_per_session():
    plugin = build({"defaultPreemptMinRuntime": "60s"})
    queues = tree()
    s = session(queues)
    plugin.kai_session_open(s)
    victim = job("v", "qa1")
    pending = job("p", "qa2")
    assert plugin.min_runtime(s, "preempt", pending, victim) == 60.0
    queues[2].preempt_min_runtime = 5.0  # qa1: seen only by the next session
    assert plugin.min_runtime(s, "preempt", pending, victim) == 60.0
    plugin.kai_session_open(s)
    assert plugin.min_runtime(s, "preempt", pending, victim) == 5.0


def test_cluster_file_queues_carry_min_runtimes():
    from kai.common.errors import ConfigError
    from kai.sim.cluster_file import parse_cluster

    data = {"queues": [{"name": "dept", "preempt_min_runtime": "1h30m"},
                       {"name": "q", "parent": "dept", "reclaim_min_runtime": 45}]}
    dept, q = parse_cluster(data, "c.yaml", NOW).queues
    assert (dept.preempt_min_runtime, dept.reclaim_min_runtime) == (5400.0, None)
    assert (q.preempt_min_runtime, q.reclaim_min_runtime) == (None, 45.0)
    with pytest.raises(ConfigError, match=r"queues\[0\] 'dept': field 'preempt_min_runtime'.*not a duration"):
        parse_cluster({"queues": [{"name": "dept", "preempt_min_runtime": "soon"}]}, "c.yaml", NOW)


# --- through the real preempt and reclaim actions -------------------------------------------------


def _through(action, arguments, jobs, queues, gpus=2):
    snap = kt.cluster([kt.node("n1", gpus=gpus)], queues, jobs, now=NOW)
    plugins = ["predicates", "proportion", "priority", "elastic", "nodeplacement", PluginSpec("minruntime", arguments)]
    return kt.placements(kt.run(snap, plugins=plugins, actions=(action,)), "evict")


def _started(job, ago):
    job.last_start = NOW - ago
    return job


def test_preempt_spares_a_young_victim_and_takes_an_old_one():
    def jobs():
        return [_started(kt.job("young", "q", gpus=1, priority=10, status=RUNNING, node="n1", creation=1.0), 30),
                _started(kt.job("old", "q", gpus=1, priority=10, status=RUNNING, node="n1", creation=2.0), 900),
                kt.job("high", "q", gpus=1, priority=50, creation=3.0)]

    queues = [kt.queue("q", deserved_gpus=2)]
    assert _through("preempt", {"defaultPreemptMinRuntime": "1m"}, jobs(), queues) == {"old-0": "n1"}
    both_young = jobs()
    both_young[1].last_start = NOW - 30
    assert _through("preempt", {"defaultPreemptMinRuntime": "1m"}, both_young, queues) == {}
    assert _through("preempt", {}, both_young[:2] + [kt.job("high", "q", gpus=1, priority=50, creation=3.0)],
                    queues) != {}


def test_reclaim_keeps_min_available_of_a_protected_elastic_job():
    def jobs(started_ago, small_gpus):
        elastic = kt.job("elastic", "q1", tasks=3, gpus=1, priority=50, status=RUNNING, node="n1",
                         min_available=2)
        return [_started(elastic, started_ago), kt.job("small", "q2", tasks=small_gpus, gpus=1, priority=50)]

    queues = [kt.queue("q1", deserved_gpus=1), kt.queue("q2", deserved_gpus=2)]
    protect = {"defaultReclaimMinRuntime": "10m"}
    # One pod above min_available may go even while protected.
    assert _through("reclaim", protect, jobs(30, 1), queues, gpus=3) == {"elastic-2": "n1"}
    # Two would take the job below min_available: only once its min runtime has passed.
    assert _through("reclaim", protect, jobs(30, 2), queues, gpus=3) == {}
    assert len(_through("reclaim", protect, jobs(3600, 2), queues, gpus=3)) >= 2
