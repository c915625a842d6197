"""The stalegangeviction action: gangs below their minimum are evicted once the grace period passed."""

from types import SimpleNamespace

import pytest

from kai import testing as kt
from kai.actions.stalegangeviction import is_stale
from kai.api import TaskStatus
from kai.common.errors import ConfigError
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, parse_config, run_session
from kai.framework.asbuilt import JobsKey, flagged_as_built
from kai.framework.memo import Memo

NOW = kt.NOW


def _run(jobs, grace=60.0):
    snapshot = kt.cluster([kt.node("n1", gpus=4)], jobs=jobs, now=NOW)
    config = SchedulerConfig(("stalegangeviction",), DEFAULT_CONFIG.plugins, grace)
    return run_session(snapshot, Plugins(config))


def _gang(stale_since=None, statuses=("Running", "Pending", "Pending")):
    tasks = [kt.task(f"g-{i}", gpus=1, status=s, node="n1" if s != "Pending" else None)
             for i, s in enumerate(statuses)]
    job = kt.job("g", tasks=tasks, min_available=3)
    job.stale_since = stale_since
    return job


def test_stale_past_grace_is_evicted_with_kai_message():
    session = _run([_gang(stale_since=NOW - 61)])
    evicted = [d for d in session.decisions if d.kind == "evict"]
    assert [d.task.name for d in evicted] == ["g-0"]
    assert evicted[0].task.status is TaskStatus.RELEASING
    assert evicted[0].message == ("Workload doesn't meet the minimum required number of pods (3), "
                                  "evicting remaining pod: default/g-0")


def test_newly_stale_job_is_stamped_not_evicted():
    session = _run([_gang()])
    assert session.decisions == []
    assert session.jobs["default/g"].stale_since == NOW


def test_zero_grace_evicts_at_once_and_negative_never():
    assert len(_run([_gang()], grace=0).decisions) == 1
    assert _run([_gang(stale_since=NOW - 10_000)], grace=-1).decisions == []


def test_satisfied_or_succeeded_jobs_are_not_stale_and_lose_their_stamp():
    full = _gang(stale_since=NOW - 100, statuses=("Running", "Running", "Running"))
    done = _gang(stale_since=NOW - 100, statuses=("Running", "Succeeded", "Pending"))
    done.name, done.uid = "d", "default/d"
    session = _run([full, done])
    assert session.decisions == []
    assert full.stale_since is None and done.stale_since is None


def test_grace_period_is_read_from_the_config():
    assert parse_config({"actions": "stalegangeviction", "stalenessGracePeriodSeconds": 5}).staleness_grace_period == 5
    assert parse_config({"actions": "allocate"}).staleness_grace_period == 60
    with pytest.raises(ConfigError, match="stalenessGracePeriodSeconds"):
        parse_config({"stalenessGracePeriodSeconds": "soon"})


@pytest.mark.parametrize("own, stale_for, evicted", [
    (600.0, 120, False),   # longer than the configured 60 s: not yet
    (10.0, 20, True),      # shorter: already
    (0.0, 0, True),        # zero: at once
    (-1.0, 10_000, False),  # negative: never
])
def test_a_jobs_own_grace_period_overrides_the_configured_one(own, stale_for, evicted):
    job = _gang(stale_since=NOW - stale_for)
    job.staleness_grace_period = own
    assert bool(_run([job], grace=60.0).decisions) is evicted


@pytest.mark.parametrize(("statuses", "stale"), [
    (("Running", "Pending", "Pending"), True),  # holds resources, below its gang size
    (("Pending", "Pending", "Pending"), False),  # holds nothing
    (("Running", "Succeeded", "Pending"), False),  # a task succeeded: the gang finished
    (("Releasing", "Pending", "Pending"), True),  # a releasing task still holds its resources
    (("Running", "Running", "Pipelined"), False),  # a pipelined task counts toward the gang
])
def test_is_stale_reads_the_tasks_in_one_pass(statuses, stale):
    assert is_stale(_gang(statuses=statuses)) is stale


def test_a_job_the_session_made_stale_is_stamped_though_it_was_not_as_built():
    from kai.framework import Session

    tasks = [kt.task(f"g-{i}", gpus=1) for i in range(2)]
    snapshot = kt.cluster([kt.node("n1", gpus=4)], jobs=[kt.job("g", tasks=tasks, min_available=2)], now=NOW)
    session = Session(snapshot, Plugins(SchedulerConfig(("stalegangeviction",), DEFAULT_CONFIG.plugins, 60.0)))
    session.open().run_actions()  # as built nothing is placed: not stale
    assert session.jobs["default/g"].stale_since is None
    session.move_task(tasks[0], TaskStatus.ALLOCATED, "n1")
    session.run_actions()
    assert session.jobs["default/g"].stale_since == NOW


def test_a_job_whose_property_cannot_be_worked_out_is_looked_at_not_fatal_to_the_pass():
    def test(job):
        if job == "bad":
            raise ValueError("malformed")
        return job == "flagged"

    snapshot = SimpleNamespace(memo=Memo(), memo_before=Memo(), jobs={"a": "plain", "b": "bad", "c": "flagged"})
    assert flagged_as_built(SimpleNamespace(snapshot=snapshot), JobsKey("key"), test, set()) == {"b", "c"}
