"""The runtimelimit action: a job past its declared maximum runtime has its placed tasks evicted."""

from kai import testing as kt
from kai.api import TaskStatus
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, run_session

NOW = kt.NOW


def _run(jobs):
    snapshot = kt.cluster([kt.node("n1", gpus=4)], jobs=jobs, now=NOW)
    return run_session(snapshot, Plugins(SchedulerConfig(("runtimelimit",), DEFAULT_CONFIG.plugins)))


def _running(name, started_ago, max_runtime, tasks=2):
    job = kt.job(name, tasks=tasks, gpus=1, status="Running", node="n1")
    job.last_start, job.max_runtime = NOW - started_ago, max_runtime
    return job


def test_job_past_its_maximum_runtime_is_evicted_with_a_message():
    session = _run([_running("long", 7201, 7200.0)])
    evicted = [d for d in session.decisions if d.kind == "evict"]
    assert sorted(d.task.name for d in evicted) == ["long-0", "long-1"]
    assert all(d.task.status is TaskStatus.RELEASING for d in evicted)
    assert evicted[0].message == "Workload exceeded its maximum runtime (2h0m0s), evicting pod: default/long-0"


def test_jobs_within_their_runtime_or_without_one_are_left_alone():
    within = _running("within", 100, 7200.0)
    undeclared = _running("undeclared", 10**6, None)
    assert _run([within, undeclared]).decisions == []


def test_runtime_limit_is_a_default_action():
    assert "runtimelimit" in DEFAULT_CONFIG.actions
