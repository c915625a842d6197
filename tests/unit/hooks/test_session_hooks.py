"""Session life-cycle hooks: kai_actions, kai_session_open, kai_session_close."""

import pytest

from kai import hookimpl
from kai import testing as kt
from kai.framework import PluginError


class Recorder:
    def __init__(self, name, log):
        self.name, self.log = name, log

    @hookimpl
    def kai_session_open(self, session):
        self.log.append(f"open {self.name}")

    @hookimpl
    def kai_session_close(self, session):
        self.log.append(f"close {self.name} after {len(session.decisions)} decisions")


class CountAction:
    @hookimpl
    def kai_actions(self):
        return {"count": self.count}

    def count(self, session):
        session.counted = sorted(d.task.name for d in session.decisions)


def _snap():
    return kt.cluster(nodes=[kt.node("n1", gpus=1)], jobs=[kt.job("j", queue="q", gpus=1)])


def _recorders(log):
    return {"a": lambda args: Recorder("a", log), "b": lambda args: Recorder("b", log)}


def test_kai_session_open_and_close_run_in_config_order_around_the_actions():
    log = []
    kt.run(_snap(), plugins=["b", "a"], extra_plugins=_recorders(log))
    assert log == ["open b", "open a", "close b after 1 decisions", "close a after 1 decisions"]


def test_kai_session_open_order_follows_the_config_not_registration():
    log = []
    kt.run(_snap(), plugins=["a", "b"], extra_plugins=_recorders(log))
    assert log[:2] == ["open a", "open b"]


def test_kai_actions_offers_an_action_that_the_config_runs():
    session = kt.run(_snap(), plugins=["predicates", "counter"], actions=("allocate", "count"),
                     extra_plugins={"counter": lambda args: CountAction()})
    assert session.counted == ["j-0"]


def test_kai_actions_not_offered_means_unknown_action():
    with pytest.raises(PluginError, match="unknown action.*count.*available actions: allocate"):
        kt.plugin_manager(["predicates"], actions=("allocate", "count"))


def test_kai_actions_one_name_offered_twice_is_an_error():
    with pytest.raises(PluginError, match="action 'count' is offered twice"):
        kt.plugin_manager(["c1", "c2"], actions=("count",),
                          extra_plugins={"c1": lambda a: CountAction(), "c2": lambda a: CountAction()})


def test_kai_session_close_sees_the_committed_decisions():
    seen = {}

    class Closer:
        @hookimpl
        def kai_session_close(self, session):
            seen["decisions"] = [(d.kind, d.task.name, d.node) for d in session.decisions]

    kt.run(_snap(), plugins=["closer"], extra_plugins={"closer": lambda a: Closer()})
    assert seen["decisions"] == [("bind", "j-0", "n1")]


class Arrivals:
    def __init__(self, log, veto=None):
        self.log, self.veto = log, veto

    @hookimpl
    def kai_session_job_added(self, session, job):
        self.log.append((job.name, job.uid in session.jobs))
        return self.veto


def test_kai_session_job_added_sees_the_job_in_the_session_and_allocate_places_it():
    from kai.actions.allocate import allocate_arrival
    from kai.framework import Session

    log = []
    plugins = kt.plugin_manager(["proportion", "arrivals"], extra_plugins={"arrivals": lambda a: Arrivals(log)})
    session = Session(kt.cluster(nodes=[kt.node("n1", gpus=1)], queues=[kt.queue("q")]), plugins).open()
    first, second = kt.job("first", queue="q", gpus=1), kt.job("second", queue="q", gpus=1)
    assert session.add_job(first) == [] and allocate_arrival(session, first)
    assert session.add_job(second) == [] and not allocate_arrival(session, second)
    session.close()
    assert log == [("first", True), ("second", True)]
    assert kt.placements(session) == {"first-0": "n1"}


def test_kai_session_job_added_veto_takes_the_job_out_again():
    from kai.api import Reject
    from kai.framework import Session

    veto = Reject("arrivals", "cannot follow it")
    plugins = kt.plugin_manager(["arrivals"], extra_plugins={"arrivals": lambda a: Arrivals([], veto)})
    session = Session(kt.cluster(nodes=[kt.node("n1", gpus=1)], queues=[kt.queue("q")]), plugins).open()
    job = kt.job("late", queue="q", gpus=1)
    assert session.add_job(job) == [veto]
    assert job.uid not in session.jobs
