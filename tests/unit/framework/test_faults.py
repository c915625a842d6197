"""Faults contained in a session: one job's exception is rolled back and recorded, the rest of the cycle goes on."""

from __future__ import annotations

import logging

import pytest

from kai import hookimpl
from kai import testing as kt
from kai.api import TaskStatus
from kai.framework import DEFAULT_CONFIG, Session
from kai.framework.faults import INTERNAL_ERROR_REASON, SessionCorrupted, SessionOpenError

DEFAULTS = list(DEFAULT_CONFIG.plugins)


class Boom:
    """Raises in the hooks named in ``hooks`` when the job (or the task's job) is ``default/x``."""

    def __init__(self, *hooks: str) -> None:
        self.hooks = set(hooks)
        self.calls: list[str] = []

    def _maybe(self, hook: str, job_uid: str) -> None:
        if hook in self.hooks and job_uid == "default/x":
            raise RuntimeError(f"{hook} broke on {job_uid}")

    @hookimpl
    def kai_predicate(self, task, job, node):
        self._maybe("predicate", job.uid)

    @hookimpl
    def kai_on_allocate(self, task):
        self.calls.append(f"allocate {task.name}")
        self._maybe("on_allocate", task.job)

    @hookimpl
    def kai_on_deallocate(self, task):
        self.calls.append(f"deallocate {task.name}")
        self._maybe("on_deallocate", task.job)

    @hookimpl
    def kai_victim_filter(self, action, preemptor, victim):
        self._maybe("victim_filter", preemptor.uid)

    @hookimpl
    def kai_scenario_validator(self, action, scenario):
        self._maybe("validator", scenario.preemptor.uid)


def _three_jobs(skip: str = ""):
    return kt.cluster(nodes=[kt.node("n1", gpus=4), kt.node("n2", gpus=4)],
                      jobs=[kt.job(name, "q", tasks=2, gpus=1, creation=float(i))
                            for i, name in enumerate(("a", "x", "c")) if name != skip])


def _run(snapshot, boom, actions=("allocate",)):
    return kt.run(snapshot, plugins=[*DEFAULTS, "boom"], actions=actions, extra_plugins={"boom": lambda a: boom})


def test_a_plugin_raising_in_kai_predicate_for_one_job_leaves_the_others_placed(caplog):
    with caplog.at_level(logging.ERROR, logger="kai.session"):
        session = _run(_three_jobs(), Boom("predicate"))
    assert sorted(kt.placements(session)) == ["a-0", "a-1", "c-0", "c-1"]
    x = session.jobs["default/x"]
    assert all(t.status is TaskStatus.PENDING for t in x.tasks.values())
    [error] = session.errors
    assert (error.action, error.job, error.queue) == ("allocate", "default/x", "q")
    assert error.message == "RuntimeError: predicate broke on default/x"
    assert "in kai_predicate" in error.traceback
    assert session.job_fit_message(x) == ("InternalSchedulingError: Internal error while scheduling the podgroup in "
                                          "action allocate: RuntimeError: predicate broke on default/x.")
    assert [(e.reason, e.detail) for e in session.job_fit_errors[x.uid]] == [(INTERNAL_ERROR_REASON, error.fit_error())]
    [record] = caplog.records
    assert "default/x" in record.getMessage() and "queue q" in record.getMessage()
    assert record.exc_info is not None


def test_a_step_that_raises_after_placing_tasks_is_rolled_back_exactly():
    boom = Boom("on_allocate", "on_deallocate")  # raises while placing x-0, and again while undoing it
    session = _run(_three_jobs(), boom)
    without_x = kt.run(_three_jobs(skip="x"), plugins=DEFAULTS)
    assert "allocate x-0" in boom.calls and "deallocate x-0" in boom.calls
    assert [e.job for e in session.errors] == ["default/x"]
    assert kt.placements(session) == kt.placements(without_x)
    for kind in ("cpu", "mem", "gpu", "pods"):
        assert getattr(session.arrays, f"idle_{kind}") == getattr(without_x.arrays, f"idle_{kind}")
    assert session.open_statements == []


def _preemption():
    return kt.cluster(nodes=[kt.node("n1", gpus=2)], queues=[kt.queue("q", deserved_gpus=2)],
                      jobs=[kt.job("low", "q", tasks=2, gpus=1, priority=5, min_available=1, status="Running",
                                   node="n1"),
                            kt.job("x", "q", gpus=1, priority=50, creation=1.0),
                            kt.job("y", "q", gpus=1, priority=50, creation=2.0)])


@pytest.mark.parametrize("hook", ["victim_filter", "validator"])
def test_a_preemptor_whose_solve_raises_is_skipped_and_its_victims_restored(hook):
    session = _run(_preemption(), Boom(hook), actions=("preempt",))
    assert [(e.action, e.job) for e in session.errors] == [("preempt", "default/x")]
    assert kt.placements(session, "pipeline") == {"y-0": "n1"}
    assert len(kt.placements(session, "evict")) == 1
    low = session.jobs["default/low"].tasks
    assert sorted(t.status.value for t in low.values()) == ["Releasing", "Running"]
    assert session.open_statements == []


class OrderBoom:
    @hookimpl
    def kai_job_order(self, left, right):
        raise ValueError("no order today")


def test_an_exception_outside_any_job_ends_its_action_and_the_next_action_runs():
    job = kt.job("g", tasks=[kt.task("g-0", gpus=1, status="Running", node="n1"), kt.task("g-1", gpus=1)],
                 min_available=2)
    job.stale_since = kt.NOW - 3600
    snap = kt.cluster(nodes=[kt.node("n1", gpus=1)],
                      jobs=[job, kt.job("p1", gpus=1, creation=1.0), kt.job("p2", gpus=1, creation=2.0)])
    session = kt.run(snap, plugins=[*DEFAULTS, "order"], actions=("allocate", "stalegangeviction"),
                     extra_plugins={"order": lambda a: OrderBoom()})
    assert [(e.action, e.job, e.message) for e in session.errors] == [
        ("allocate", None, "ValueError: no order today")]
    assert kt.placements(session, "evict") == {"g-0": "n1"}  # stalegangeviction still ran


class Opener:
    def __init__(self, name, log, fail=False):
        self.name, self.log, self.fail = name, log, fail

    @hookimpl
    def kai_session_open(self, session):
        if self.fail:
            raise KeyError("missing state")
        self.log.append(f"open {self.name}")

    @hookimpl
    def kai_session_close(self, session):
        self.log.append(f"close {self.name}")
        if self.fail:
            raise KeyError("cannot close")


def test_a_plugin_failing_to_open_the_session_skips_the_cycle_and_closes_the_plugins_opened():
    log: list[str] = []
    plugins = kt.plugin_manager(["a", "bad", "c"], extra_plugins={
        "a": lambda args: Opener("a", log), "bad": lambda args: Opener("bad", log, fail=True),
        "c": lambda args: Opener("c", log)})
    with pytest.raises(SessionOpenError, match=r"plugin 'bad' failed to open the session \(KeyError: 'missing"):
        Session(_three_jobs(), plugins).open()
    assert log == ["open a", "close a"]


def test_a_plugin_failing_to_close_is_recorded_and_the_others_close_and_the_decisions_stand():
    log: list[str] = []
    bad = Opener("bad", log)
    plugins = kt.plugin_manager([*DEFAULTS, "a", "bad", "c"], extra_plugins={
        "a": lambda args: Opener("a", log), "bad": lambda args: bad, "c": lambda args: Opener("c", log)})
    session = Session(_three_jobs(), plugins).open()
    session.run_actions()
    bad.fail = True
    session.close()
    assert log[-3:] == ["close a", "close bad", "close c"]
    assert [(e.action, e.plugin, e.message) for e in session.errors] == [
        ("session close", "bad", "KeyError: 'cannot close'")]
    assert len(kt.placements(session)) == 6


def test_a_rollback_that_cannot_restore_a_task_is_not_contained(monkeypatch):
    session = Session(_three_jobs(), kt.plugin_manager(DEFAULTS)).open()
    job = session.jobs["default/a"]

    def broken(*args, **kwargs):
        raise RuntimeError("node state lost")

    with pytest.raises(SessionCorrupted, match="could not undo allocate of task default/a-0"):
        with session.contained("allocate", job):
            session.statement().allocate(job.tasks["a-0"], "n1")
            monkeypatch.setattr(session, "move_task", broken)
            raise RuntimeError("first failure")
    assert session.arrays.idle_gpu[0] == 3.0  # the allocation stays: nothing pretends it was undone
